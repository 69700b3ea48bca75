// Allocation failure: a context whose allocator fails its N-th allocation, for every N a call
// makes (context creation included), returns SATTN_ERR_OUT_OF_MEMORY with a message, writes no
// output, gives back everything it took, and works afterwards. Also: the allocator is called
// only from the calling thread, with valid alignments, and every byte comes back by
// sattn_context_destroy (LeakSanitizer checks the same from outside under the asan preset).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "attention_case.h"
#include "gtest/gtest.h"
#include "streamattn/streamattn.h"
#include "test_util.h"

namespace streamattn {
namespace {

using testing_util::AttentionCall;
using testing_util::AttentionCase;
using testing_util::HostTensor;

// Counts allocations and fails the fail_at-th (1-based; 0 = never).
struct TestAllocator {
  int64_t count = 0;
  int64_t fail_at = 0;
  std::map<void*, size_t> live;  // pointer -> bytes
  std::thread::id caller = std::this_thread::get_id();
  bool misuse = false;  // a call from another thread, a bad alignment or an unknown free

  static void* Alloc(void* user, size_t bytes, size_t alignment) {
    auto* self = static_cast<TestAllocator*>(user);
    if (std::this_thread::get_id() != self->caller || bytes == 0 || alignment == 0 ||
        (alignment & (alignment - 1)) != 0 || alignment > 64) {
      self->misuse = true;
    }
    if (++self->count == self->fail_at) return nullptr;
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    self->live[p] = bytes;
    return p;
  }
  static void Free(void* user, void* p) {
    auto* self = static_cast<TestAllocator*>(user);
    if (std::this_thread::get_id() != self->caller || self->live.erase(p) != 1) {
      self->misuse = true;
    }
    std::free(p);
  }
  sattn_context_options Options(int32_t num_threads) {
    sattn_context_options o{};
    o.struct_size = sizeof(o);
    o.num_threads = num_threads;
    o.backend = SATTN_BACKEND_CPU;
    o.alloc_fn = Alloc;
    o.free_fn = Free;
    o.alloc_user = this;
    return o;
  }
};

// One call with its own outputs: run returns its status, outputs gives the bytes of every
// output buffer (canaries included) and reset fills them with canary bytes again.
struct Operation {
  std::string name;
  std::function<sattn_status(sattn_context*)> run;
  std::function<std::vector<uint8_t>()> outputs;
  std::function<void()> reset;
};

AttentionCase DenseCase() {  // every option that copies per-head or per-sequence data
  AttentionCase c;
  c.batch = 2, c.seq_q = 70, c.seq_k = 90, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 32;
  c.alibi = true, c.sinks = true, c.causal = true, c.seqused_k = {90, 41};
  return c;
}

AttentionCase SplitKvCase() {  // few work items and a long cache: split-KV partial states
  AttentionCase c;
  c.batch = 1, c.seq_q = 1, c.seq_k = 2048, c.heads_q = 8, c.heads_kv = 1, c.head_dim = 64;
  c.page_size = 16, c.seqused_k = {2000};
  return c;
}

std::vector<Operation> Operations() {
  std::vector<Operation> ops;
  for (const auto& [name, c] : {std::pair<const char*, AttentionCase>{"attention", DenseCase()},
                                {"attention split-KV paged", SplitKvCase()}}) {
    auto call = std::make_shared<AttentionCall>(c);
    ops.push_back({name, [call](sattn_context* ctx) { return call->Run(ctx); },
                   [call] {
                     std::vector<uint8_t> b = call->out.bytes();
                     b.insert(b.end(), call->lse.bytes().begin(), call->lse.bytes().end());
                     return b;
                   },
                   [call] {
                     call->out.FillBytes(0xEE);
                     call->lse.FillBytes(0xEE);
                   }});
  }
  {  // merge_states over five parts
    struct Merge {
      std::vector<HostTensor> o, lse;
      std::vector<sattn_tensor> o_views, lse_views;
      HostTensor out{SATTN_DTYPE_BF16, {2, 3, 4, 40}}, lse_out{SATTN_DTYPE_F32, {2, 4, 3}};
      sattn_tensor out_view = out.view(), lse_out_view = lse_out.view();
    };
    auto m = std::make_shared<Merge>();
    std::mt19937_64 rng(3);
    for (int i = 0; i < 5; ++i) {
      m->o.emplace_back(SATTN_DTYPE_F32, std::vector<int64_t>{2, 3, 4, 40});
      m->lse.emplace_back(SATTN_DTYPE_F32, std::vector<int64_t>{2, 4, 3});
      m->o.back().FillUniform(rng, -1, 1);
      m->lse.back().FillUniform(rng, -3, 3);
    }
    for (int i = 0; i < 5; ++i) m->o_views.push_back(m->o[i].view());
    for (int i = 0; i < 5; ++i) m->lse_views.push_back(m->lse[i].view());
    m->out.FillBytes(0x5A);
    m->lse_out.FillBytes(0x5A);
    ops.push_back({"merge_states",
                   [m](sattn_context* ctx) {
                     return sattn_merge_states(ctx, 5, m->o_views.data(), m->lse_views.data(),
                                               &m->out_view, &m->lse_out_view);
                   },
                   [m] {
                     std::vector<uint8_t> b = m->out.bytes();
                     b.insert(b.end(), m->lse_out.bytes().begin(), m->lse_out.bytes().end());
                     return b;
                   },
                   [m] {
                     m->out.FillBytes(0x5A);
                     m->lse_out.FillBytes(0x5A);
                   }});
  }
  // Softmax and top-k of a few rows long enough to be split across tasks (per-row and
  // per-part bookkeeping), and of many short rows.
  for (int64_t rows : {3, 40}) {
    const int64_t n = rows == 3 ? 50000 : 300;
    struct Softmax {
      HostTensor in, out, indices, probs, lse;
      sattn_tensor in_view, out_view, indices_view, probs_view, lse_view;
    };
    auto s = std::make_shared<Softmax>(Softmax{HostTensor(SATTN_DTYPE_F16, {rows, n}),
                                               HostTensor(SATTN_DTYPE_F32, {rows, n}),
                                               HostTensor(SATTN_DTYPE_I32, {rows, 20}),
                                               HostTensor(SATTN_DTYPE_F32, {rows, 20}),
                                               HostTensor(SATTN_DTYPE_F32, {rows}),
                                               {},
                                               {},
                                               {},
                                               {},
                                               {}});
    std::mt19937_64 rng(rows);
    s->in.FillUniform(rng, -8, 8);
    for (HostTensor* t : {&s->out, &s->indices, &s->probs, &s->lse}) t->FillBytes(0x33);
    s->in_view = s->in.view(), s->out_view = s->out.view(), s->indices_view = s->indices.view();
    s->probs_view = s->probs.view(), s->lse_view = s->lse.view();
    const std::string suffix = " of " + std::to_string(rows) + " rows";
    auto reset = [s] {
      for (HostTensor* t : {&s->out, &s->indices, &s->probs, &s->lse}) t->FillBytes(0x33);
    };
    ops.push_back(
        {"softmax" + suffix,
         [s](sattn_context* ctx) { return sattn_softmax(ctx, &s->in_view, &s->out_view, nullptr); },
         [s] { return s->out.bytes(); }, reset});
    ops.push_back({"log_softmax" + suffix,
                   [s](sattn_context* ctx) {
                     return sattn_log_softmax(ctx, &s->in_view, &s->out_view, nullptr);
                   },
                   [s] { return s->out.bytes(); }, reset});
    ops.push_back({"softmax_topk" + suffix,
                   [s](sattn_context* ctx) {
                     return sattn_softmax_topk(ctx, &s->in_view, 20, &s->indices_view,
                                               &s->probs_view, &s->lse_view, nullptr);
                   },
                   [s] {
                     std::vector<uint8_t> b = s->indices.bytes();
                     b.insert(b.end(), s->probs.bytes().begin(), s->probs.bytes().end());
                     b.insert(b.end(), s->lse.bytes().begin(), s->lse.bytes().end());
                     return b;
                   },
                   reset});
  }
  return ops;
}

class AllocationFailureTest : public ::testing::TestWithParam<int32_t> {};
INSTANTIATE_TEST_SUITE_P(Threads, AllocationFailureTest, ::testing::Values(1, 2));

TEST_P(AllocationFailureTest, FailingTheNthAllocationForEveryN) {
  const int32_t threads = GetParam();
  for (const Operation& op : Operations()) {
    SCOPED_TRACE(op.name);
    op.reset();
    const std::vector<uint8_t> untouched = op.outputs();
    // A clean run: how many allocations creation and the call make, and the right answer.
    TestAllocator counting;
    sattn_context_options options = counting.Options(threads);
    sattn_context* ctx = nullptr;
    ASSERT_EQ(sattn_context_create(&options, &ctx), SATTN_OK) << sattn_last_error();
    const int64_t at_creation = counting.count;
    ASSERT_EQ(op.run(ctx), SATTN_OK) << sattn_last_error();
    const int64_t total = counting.count;
    EXPECT_NE(op.outputs(), untouched);
    const std::vector<uint8_t> want = op.outputs();
    ASSERT_EQ(sattn_context_destroy(ctx), SATTN_OK);
    EXPECT_TRUE(counting.live.empty()) << counting.live.size() << " allocations leaked";
    EXPECT_FALSE(counting.misuse);
    EXPECT_GE(at_creation, 1);
    EXPECT_GT(total, at_creation) << "the call allocated nothing: it tests nothing here";
    std::printf("%s on %d thread(s): %lld allocations at creation, %lld in the call\n",
                op.name.c_str(), threads, static_cast<long long>(at_creation),
                static_cast<long long>(total - at_creation));

    for (int64_t n = 1; n <= total; ++n) {
      SCOPED_TRACE("failing allocation " + std::to_string(n) + " of " + std::to_string(total));
      op.reset();
      TestAllocator failing;
      failing.fail_at = n;
      options = failing.Options(threads);
      ctx = nullptr;
      const sattn_status created = sattn_context_create(&options, &ctx);
      if (n <= at_creation) {
        EXPECT_EQ(created, SATTN_ERR_OUT_OF_MEMORY);
        EXPECT_EQ(ctx, nullptr);
        EXPECT_NE(std::string(sattn_last_error()).find("options->alloc_fn"), std::string::npos)
            << sattn_last_error();
        EXPECT_TRUE(failing.live.empty()) << "a failed create leaked";
        continue;
      }
      ASSERT_EQ(created, SATTN_OK) << sattn_last_error();
      EXPECT_EQ(op.run(ctx), SATTN_ERR_OUT_OF_MEMORY);
      EXPECT_NE(std::string(sattn_last_error()).find("options->alloc_fn returned NULL"),
                std::string::npos)
          << sattn_last_error();
      EXPECT_EQ(op.outputs(), untouched) << "an out-of-memory call wrote an output";
      // The context works afterwards, and gives the same bytes as a context that never failed.
      ASSERT_EQ(op.run(ctx), SATTN_OK) << sattn_last_error();
      EXPECT_EQ(op.outputs(), want);
      ASSERT_EQ(sattn_context_destroy(ctx), SATTN_OK);
      EXPECT_TRUE(failing.live.empty()) << failing.live.size() << " allocations leaked";
      EXPECT_FALSE(failing.misuse);
    }
  }
}

}  // namespace
}  // namespace streamattn
