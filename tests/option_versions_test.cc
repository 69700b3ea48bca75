// Callers built against an older header: a struct_size of exactly an earlier version's size is
// accepted, its fields are honoured, and whatever the caller's memory holds after those bytes
// (here 0xAB garbage, as a caller never set fields it did not know) is never read, or for
// sattn_context_info never written. One byte less than the first version is refused by naming
// struct_size. The version sizes are spelled out here, from the header's history, so that a
// field appended to a struct cannot silently move them.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "streamattn/streamattn.h"
#include "test_util.h"

namespace streamattn {
namespace {

using testing_util::HostTensor;
using testing_util::ScopedContext;

// First published with block_table last.
constexpr size_t kAttentionOptionsV1Size =
    offsetof(sattn_attention_options, block_table) + sizeof(const sattn_tensor*);
constexpr size_t kContextOptionsV1Size = offsetof(sattn_context_options, backend) + sizeof(int32_t);
// Version 2 appended the allocator, version 3 the CPU kernel.
constexpr size_t kContextOptionsV2Size =
    offsetof(sattn_context_options, alloc_user) + sizeof(void*);
constexpr size_t kContextOptionsV3Size =
    offsetof(sattn_context_options, cpu_kernel) + sizeof(int32_t);
// Version 4 appended the parallel runner.
constexpr size_t kContextOptionsV4Size =
    offsetof(sattn_context_options, runner_data) + sizeof(void*);
constexpr size_t kContextInfoV1Size =
    offsetof(sattn_context_info, cuda_availability) + sizeof(const char*);
constexpr size_t kSoftmaxOptionsV1Size =
    offsetof(sattn_softmax_options, temperature) + sizeof(float);

// The header documents the first context options' size.
static_assert(kContextOptionsV1Size == 12);

constexpr unsigned char kGarbage = 0xAB;

// A struct and the caller's memory after it.
template <typename Struct>
struct InLargerBuffer {
  Struct head;
  unsigned char tail[32];
};

// `fields` cut to its first `size` bytes, with struct_size = size, and garbage in every byte
// after them.
template <typename Struct>
void OlderCaller(const Struct& fields, size_t size, InLargerBuffer<Struct>* buffer) {
  std::memset(static_cast<void*>(buffer), kGarbage, sizeof(*buffer));
  std::memcpy(static_cast<void*>(buffer), &fields, size);
  buffer->head.struct_size = static_cast<uint32_t>(size);
}

void ExpectStructSizeRejected(sattn_status status, const char* name, size_t size) {
  EXPECT_EQ(status, SATTN_ERR_INVALID_ARGUMENT);
  const std::string want = std::string(name) + "->struct_size=" + std::to_string(size);
  EXPECT_NE(std::string(sattn_last_error()).find(want), std::string::npos) << sattn_last_error();
}

// A small attention problem and its output bytes under the given options.
class AttentionProblem {
 public:
  AttentionProblem()
      : q_(SATTN_DTYPE_F32, {1, 3, 2, 8}),
        k_(SATTN_DTYPE_F32, {1, 5, 2, 8}),
        v_(SATTN_DTYPE_F32, {1, 5, 2, 8}) {
    std::mt19937_64 rng(7);
    q_.FillUniform(rng, -1, 1);
    k_.FillUniform(rng, -1, 1);
    v_.FillUniform(rng, -1, 1);
  }

  sattn_status Call(const sattn_attention_options* options, std::vector<uint8_t>* out_bytes) {
    HostTensor out(SATTN_DTYPE_F32, {1, 3, 2, 8});
    const sattn_tensor q = q_.view(), k = k_.view(), v = v_.view(), o = out.view();
    const sattn_status status = sattn_attention(ctx_.get(), &q, &k, &v, &o, nullptr, options);
    *out_bytes = out.bytes();
    return status;
  }

  std::vector<uint8_t> Run(const sattn_attention_options* options) {
    std::vector<uint8_t> out;
    EXPECT_EQ(Call(options, &out), SATTN_OK) << sattn_last_error();
    return out;
  }

 private:
  ScopedContext ctx_{1};
  HostTensor q_, k_, v_;
};

sattn_attention_options CausalScaled() {
  sattn_attention_options o{};
  o.struct_size = sizeof(o);
  o.scale = 0.3f;
  o.causal = 1;
  return o;
}

TEST(OptionVersionsTest, AttentionOptionsV1IsHonouredAndNothingAfterItIsRead) {
  AttentionProblem problem;
  const sattn_attention_options current = CausalScaled();
  InLargerBuffer<sattn_attention_options> older;
  OlderCaller(current, kAttentionOptionsV1Size, &older);
  const std::vector<uint8_t> want = problem.Run(&current);
  EXPECT_EQ(problem.Run(&older.head), want);
  EXPECT_NE(problem.Run(nullptr), want) << "the options should change the result";
}

// The third version ends with v_scales: a caller of that size has garbage where int8_queries
// is, which must not be read.
TEST(OptionVersionsTest, AttentionOptionsV3IsHonouredAndNothingAfterItIsRead) {
  AttentionProblem problem;
  const sattn_attention_options current = CausalScaled();
  InLargerBuffer<sattn_attention_options> older;
  OlderCaller(current, offsetof(sattn_attention_options, v_scales) + sizeof(void*), &older);
  EXPECT_EQ(problem.Run(&older.head), problem.Run(&current));
}

// The fourth version ends with int8_queries: a caller of that size has garbage where the fifth
// version's cu_seqlens_q and cu_seqlens_k are, which must not be read (they would be pointers).
TEST(OptionVersionsTest, AttentionOptionsV4IsHonouredAndNothingAfterItIsRead) {
  AttentionProblem problem;
  const sattn_attention_options current = CausalScaled();
  InLargerBuffer<sattn_attention_options> older;
  OlderCaller(current, offsetof(sattn_attention_options, int8_queries) + sizeof(int32_t), &older);
  EXPECT_EQ(problem.Run(&older.head), problem.Run(&current));
}

// A size that ends inside one of the fifth version's pointers is not the size of a version.
TEST(OptionVersionsTest, AttentionOptionsCuttingCuSeqlensAreRejected) {
  AttentionProblem problem;
  // Half a pointer in: on a 32-bit target + 4 would be the field's end, a valid size.
  for (size_t size : {offsetof(sattn_attention_options, cu_seqlens_q) + sizeof(void*) / 2,
                      offsetof(sattn_attention_options, cu_seqlens_k) + sizeof(void*) / 2}) {
    InLargerBuffer<sattn_attention_options> older;
    OlderCaller(CausalScaled(), size, &older);
    std::vector<uint8_t> out;
    EXPECT_EQ(problem.Call(&older.head, &out), SATTN_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(sattn_last_error()).find("ends inside a field"), std::string::npos)
        << sattn_last_error();
  }
}

TEST(OptionVersionsTest, AttentionOptionsShortOfV1AreRejected) {
  AttentionProblem problem;
  InLargerBuffer<sattn_attention_options> older;
  OlderCaller(CausalScaled(), kAttentionOptionsV1Size - 1, &older);
  std::vector<uint8_t> out;
  ExpectStructSizeRejected(problem.Call(&older.head, &out), "options", kAttentionOptionsV1Size - 1);
}

sattn_context_info Info(const sattn_context* ctx) {
  sattn_context_info info{};
  info.struct_size = sizeof(info);
  EXPECT_EQ(sattn_context_get_info(ctx, &info), SATTN_OK) << sattn_last_error();
  return info;
}

TEST(OptionVersionsTest, ContextOptionsV1GetsTheDefaultAllocator) {
  sattn_context_options fields{};
  fields.num_threads = 2;
  fields.backend = SATTN_BACKEND_CPU;
  InLargerBuffer<sattn_context_options> older;
  OlderCaller(fields, kContextOptionsV1Size, &older);  // alloc_fn and free_fn are garbage
  sattn_context* ctx = nullptr;
  ASSERT_EQ(sattn_context_create(&older.head, &ctx), SATTN_OK) << sattn_last_error();
  const sattn_context_info info = Info(ctx);
  EXPECT_EQ(info.backend, SATTN_BACKEND_CPU);
  EXPECT_EQ(info.num_threads, std::min(2, testing_util::BuiltInThreads()));
  std::vector<float> x(100, 1.0f);
  EXPECT_EQ(sattn_exp2(ctx, x.data(), x.data(), 100), SATTN_OK) << sattn_last_error();
  EXPECT_EQ(x[99], 2.0f);
  EXPECT_EQ(sattn_context_destroy(ctx), SATTN_OK);

  OlderCaller(fields, kContextOptionsV1Size - 1, &older);
  ctx = reinterpret_cast<sattn_context*>(0x1);
  ExpectStructSizeRejected(sattn_context_create(&older.head, &ctx), "options",
                           kContextOptionsV1Size - 1);
  EXPECT_EQ(ctx, nullptr);
}

// Counts what passes through it; the memory comes from the C library.
struct CountingAllocator {
  int64_t live = 0;
  int64_t taken = 0;
  static void* Alloc(void* user, size_t bytes, size_t alignment) {
    auto* self = static_cast<CountingAllocator*>(user);
    ++self->live, ++self->taken;
    return std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
  }
  static void Free(void* user, void* p) {
    --static_cast<CountingAllocator*>(user)->live;
    std::free(p);
  }
};

TEST(OptionVersionsTest, ContextOptionsV2UsesItsAllocator) {
  CountingAllocator counter;
  sattn_context_options fields{};
  fields.backend = SATTN_BACKEND_CPU;
  fields.alloc_fn = CountingAllocator::Alloc;
  fields.free_fn = CountingAllocator::Free;
  fields.alloc_user = &counter;
  InLargerBuffer<sattn_context_options> older;
  OlderCaller(fields, kContextOptionsV2Size, &older);
  sattn_context* ctx = nullptr;
  ASSERT_EQ(sattn_context_create(&older.head, &ctx), SATTN_OK) << sattn_last_error();
  EXPECT_GT(counter.taken, 0);
  EXPECT_EQ(sattn_context_destroy(ctx), SATTN_OK);
  EXPECT_EQ(counter.live, 0);

  // Between the versions: it would cut alloc_user, or cpu_kernel, off.
  for (size_t size : {kContextOptionsV2Size - 1, kContextOptionsV3Size - 1}) {
    OlderCaller(fields, size, &older);
    ExpectStructSizeRejected(sattn_context_create(&older.head, &ctx), "options", size);
  }
}

// Version 3's cpu_kernel is honoured (garbage after version 2 was not: the test above).
TEST(OptionVersionsTest, ContextOptionsV3ForcesTheCpuKernel) {
  if (std::getenv("STREAMATTN_CPU_KERNEL") != nullptr) GTEST_SKIP() << "STREAMATTN_CPU_KERNEL set";
  sattn_context_options fields{};
  fields.backend = SATTN_BACKEND_CPU;
  fields.cpu_kernel = SATTN_CPU_KERNEL_F32_FMA;
  InLargerBuffer<sattn_context_options> older;
  OlderCaller(fields, kContextOptionsV3Size, &older);
  sattn_context* ctx = nullptr;
  ASSERT_EQ(sattn_context_create(&older.head, &ctx), SATTN_OK) << sattn_last_error();
  const sattn_context_info info = Info(ctx);
  EXPECT_STREQ(info.bf16_kernel, "f32-fma");
  EXPECT_STREQ(info.f16_kernel, "f32-fma");
  EXPECT_STREQ(info.f32_kernel, "f32-fma");
  EXPECT_EQ(sattn_context_destroy(ctx), SATTN_OK);
  fields.struct_size = sizeof(fields);
  fields.cpu_kernel = 77;
  EXPECT_EQ(sattn_context_create(&fields, &ctx), SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sattn_last_error()).find("options->cpu_kernel=77"), std::string::npos)
      << sattn_last_error();
}

// Runs every index on the caller's thread and counts the loops.
int32_t CountingRunner(void* loops, sattn_parallel_task task, void* task_data, int64_t count) {
  ++*static_cast<int*>(loops);
  for (int64_t i = 0; i < count; ++i) task(task_data, i, 0);
  return 0;
}

// Version 4's runner is honoured (garbage after version 3 was not: the test above); a size
// inside runner or runner_data is not a version's.
TEST(OptionVersionsTest, ContextOptionsV4RunsItsRunner) {
  int loops = 0;
  sattn_context_options fields{};
  fields.num_threads = 2;
  fields.backend = SATTN_BACKEND_CPU;
  fields.runner = CountingRunner;
  fields.runner_data = &loops;
  InLargerBuffer<sattn_context_options> older;
  OlderCaller(fields, kContextOptionsV4Size, &older);
  sattn_context* ctx = nullptr;
  ASSERT_EQ(sattn_context_create(&older.head, &ctx), SATTN_OK) << sattn_last_error();
  std::vector<float> x(100, 1.0f), y(100);
  EXPECT_EQ(sattn_exp2(ctx, x.data(), y.data(), 100), SATTN_OK) << sattn_last_error();
  EXPECT_EQ(loops, 1);
  EXPECT_EQ(y[99], 2.0f);
  EXPECT_EQ(sattn_context_destroy(ctx), SATTN_OK);
  for (size_t size : {offsetof(sattn_context_options, runner) + 1, kContextOptionsV4Size - 1}) {
    OlderCaller(fields, size, &older);
    ExpectStructSizeRejected(sattn_context_create(&older.head, &ctx), "options", size);
  }
}

TEST(OptionVersionsTest, ContextInfoV1IsFilledAndNothingAfterItIsWritten) {
  ScopedContext ctx(1);
  const sattn_context_info want = Info(ctx.get());
  InLargerBuffer<sattn_context_info> older;
  OlderCaller(sattn_context_info{}, kContextInfoV1Size, &older);
  ASSERT_EQ(sattn_context_get_info(ctx.get(), &older.head), SATTN_OK) << sattn_last_error();
  EXPECT_EQ(older.head.struct_size, kContextInfoV1Size);
  EXPECT_EQ(older.head.backend, want.backend);
  EXPECT_EQ(older.head.num_threads, want.num_threads);
  EXPECT_EQ(older.head.backend_reason, want.backend_reason);
  EXPECT_EQ(older.head.simd_target, want.simd_target);
  EXPECT_EQ(older.head.compiled_targets, want.compiled_targets);
  EXPECT_EQ(older.head.cuda_availability, want.cuda_availability);
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(&older);
  for (size_t i = kContextInfoV1Size; i < sizeof(older); ++i) {
    ASSERT_EQ(bytes[i], kGarbage) << "byte " << i << " after the caller's struct_size";
  }

  OlderCaller(sattn_context_info{}, kContextInfoV1Size - 1, &older);
  ExpectStructSizeRejected(sattn_context_get_info(ctx.get(), &older.head), "info",
                           kContextInfoV1Size - 1);
}

TEST(OptionVersionsTest, SoftmaxOptionsV1IsHonouredAndNothingAfterItIsRead) {
  ScopedContext ctx(1);
  HostTensor in(SATTN_DTYPE_F32, {2, 9}), want(SATTN_DTYPE_F32, {2, 9}),
      got(SATTN_DTYPE_F32, {2, 9});
  std::mt19937_64 rng(3);
  in.FillUniform(rng, -4, 4);
  const sattn_tensor in_view = in.view(), want_view = want.view(), got_view = got.view();
  sattn_softmax_options current{};
  current.struct_size = sizeof(current);
  current.temperature = 2.5f;
  ASSERT_EQ(sattn_softmax(ctx.get(), &in_view, &want_view, &current), SATTN_OK);
  InLargerBuffer<sattn_softmax_options> older;
  OlderCaller(current, kSoftmaxOptionsV1Size, &older);
  ASSERT_EQ(sattn_softmax(ctx.get(), &in_view, &got_view, &older.head), SATTN_OK)
      << sattn_last_error();
  EXPECT_EQ(got.bytes(), want.bytes());

  OlderCaller(current, kSoftmaxOptionsV1Size - 1, &older);
  ExpectStructSizeRejected(sattn_softmax(ctx.get(), &in_view, &got_view, &older.head), "options",
                           kSoftmaxOptionsV1Size - 1);
}

}  // namespace
}  // namespace streamattn
