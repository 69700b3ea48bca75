// Concurrency: many application threads, each with its own context or all sharing one (calls
// on a shared context run one at a time, see sattn_context_options), each running every
// operation; every result must be the same bytes as a single-threaded run. Run under the tsan
// preset, these are also the race checks of the library's own threads.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
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
using testing_util::ScopedContext;

bool Small() { return std::getenv("STREAMATTN_TEST_SMALL") != nullptr; }

// One operation with inputs made from fixed seeds (so every instance has the same inputs) and
// outputs of its own. Run returns the output bytes, or an empty vector on failure.
class Job {
 public:
  virtual ~Job() = default;
  virtual std::vector<uint8_t> Run(sattn_context* ctx) = 0;
};

class AttentionJob : public Job {
 public:
  explicit AttentionJob(const AttentionCase& c) : call_(c) {}
  std::vector<uint8_t> Run(sattn_context* ctx) override {
    call_.out.FillBytes(0xEE);
    call_.lse.FillBytes(0xEE);
    if (call_.Run(ctx) != SATTN_OK) return {};
    std::vector<uint8_t> bytes = call_.out.bytes();
    bytes.insert(bytes.end(), call_.lse.bytes().begin(), call_.lse.bytes().end());
    return bytes;
  }

 private:
  AttentionCall call_;
};

class SoftmaxJob : public Job {
 public:
  SoftmaxJob(int64_t rows, int64_t n, int mode)  // mode 0: softmax, 1: log, 2: top-k
      : mode_(mode),
        in_(SATTN_DTYPE_BF16, {rows, n}),
        out_(SATTN_DTYPE_F32, {rows, n}),
        indices_(SATTN_DTYPE_I32, {rows, 16}),
        probs_(SATTN_DTYPE_F32, {rows, 16}) {
    std::mt19937_64 rng(static_cast<uint64_t>(rows * 31 + n));
    in_.FillUniform(rng, -20, 20);
  }
  std::vector<uint8_t> Run(sattn_context* ctx) override {
    const sattn_tensor in = in_.view(), out = out_.view();
    const sattn_tensor indices = indices_.view(), probs = probs_.view();
    sattn_status status;
    if (mode_ == 2) {
      status = sattn_softmax_topk(ctx, &in, 16, &indices, &probs, nullptr, nullptr);
    } else {
      status = mode_ == 0 ? sattn_softmax(ctx, &in, &out, nullptr)
                          : sattn_log_softmax(ctx, &in, &out, nullptr);
    }
    if (status != SATTN_OK) return {};
    if (mode_ != 2) return out_.bytes();
    std::vector<uint8_t> bytes = indices_.bytes();
    bytes.insert(bytes.end(), probs_.bytes().begin(), probs_.bytes().end());
    return bytes;
  }

 private:
  int mode_;
  HostTensor in_, out_, indices_, probs_;
};

class MergeJob : public Job {
 public:
  MergeJob() {
    std::mt19937_64 rng(17);
    for (int i = 0; i < 3; ++i) {
      o_.emplace_back(SATTN_DTYPE_F16, std::vector<int64_t>{2, 9, 4, 64});
      lse_.emplace_back(SATTN_DTYPE_F32, std::vector<int64_t>{2, 4, 9});
      o_.back().FillUniform(rng, -1, 1);
      lse_.back().FillUniform(rng, -5, 5);
    }
  }
  std::vector<uint8_t> Run(sattn_context* ctx) override {
    std::vector<sattn_tensor> o, lse;
    for (const HostTensor& t : o_) o.push_back(t.view());
    for (const HostTensor& t : lse_) lse.push_back(t.view());
    const sattn_tensor out = out_.view(), lse_out = lse_out_.view();
    if (sattn_merge_states(ctx, 3, o.data(), lse.data(), &out, &lse_out) != SATTN_OK) return {};
    std::vector<uint8_t> bytes = out_.bytes();
    bytes.insert(bytes.end(), lse_out_.bytes().begin(), lse_out_.bytes().end());
    return bytes;
  }

 private:
  std::vector<HostTensor> o_, lse_;
  HostTensor out_{SATTN_DTYPE_F32, {2, 9, 4, 64}}, lse_out_{SATTN_DTYPE_F32, {2, 4, 9}};
};

// Every operation, and the paths that differ between one thread and many: prefill work items,
// split-KV decode, softmax rows split across tasks.
std::vector<std::unique_ptr<Job>> MakeJobs() {
  std::vector<std::unique_ptr<Job>> jobs;
  AttentionCase prefill;
  prefill.seq_q = Small() ? 70 : 200, prefill.seq_k = Small() ? 90 : 300;
  prefill.heads_q = 4, prefill.heads_kv = 2, prefill.head_dim = 64, prefill.causal = true;
  prefill.kv_dtype = SATTN_DTYPE_F16, prefill.sinks = true;
  jobs.push_back(std::make_unique<AttentionJob>(prefill));
  AttentionCase decode;
  decode.batch = 2, decode.seq_q = 1, decode.seq_k = Small() ? 1536 : 4096;
  decode.heads_q = 8, decode.heads_kv = 2, decode.head_dim = 64, decode.page_size = 32;
  decode.seqused_k = {decode.seq_k, decode.seq_k / 2 + 5};
  jobs.push_back(std::make_unique<AttentionJob>(decode));
  const int64_t n = Small() ? 20000 : 50000;
  for (int mode = 0; mode < 3; ++mode) jobs.push_back(std::make_unique<SoftmaxJob>(3, n, mode));
  jobs.push_back(std::make_unique<SoftmaxJob>(33, 500, 0));
  jobs.push_back(std::make_unique<MergeJob>());
  return jobs;
}

std::vector<std::vector<uint8_t>> SingleThreadedResults() {
  ScopedContext ctx(1);
  std::vector<std::vector<uint8_t>> want;
  for (auto& job : MakeJobs()) {
    want.push_back(job->Run(ctx.get()));
    EXPECT_FALSE(want.back().empty()) << sattn_last_error();
  }
  return want;
}

constexpr int kAppThreads = 6;
int Rounds() { return Small() ? 1 : 3; }

// Runs body(thread) on kAppThreads threads started together; returns the mismatch count.
int RunThreads(const std::function<int(int)>& body) {
  std::atomic<int> ready{0}, mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kAppThreads; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < kAppThreads) std::this_thread::yield();
      mismatches.fetch_add(body(t));
    });
  }
  for (std::thread& thread : threads) thread.join();
  return mismatches.load();
}

int RunJobs(sattn_context* ctx, const std::vector<std::vector<uint8_t>>& want) {
  int mismatches = 0;
  std::vector<std::unique_ptr<Job>> jobs = MakeJobs();
  for (int round = 0; round < Rounds(); ++round) {
    for (size_t j = 0; j < jobs.size(); ++j) mismatches += jobs[j]->Run(ctx) != want[j];
  }
  return mismatches;
}

TEST(ConcurrencyTest, ThreadsWithTheirOwnContexts) {
  const std::vector<std::vector<uint8_t>> want = SingleThreadedResults();
  // Contexts of 1, 2 and 3 threads: oneTBB arenas of different sizes side by side.
  EXPECT_EQ(RunThreads([&](int t) {
              ScopedContext ctx(1 + t % 3);
              return RunJobs(ctx.get(), want);
            }),
            0);
}

TEST(ConcurrencyTest, ThreadsSharingOneContext) {
  const std::vector<std::vector<uint8_t>> want = SingleThreadedResults();
  ScopedContext shared(2);
  EXPECT_EQ(RunThreads([&](int) { return RunJobs(shared.get(), want); }), 0);
}

// Contexts created, used and destroyed on many threads at once, and errors reported on each
// thread's own message.
TEST(ConcurrencyTest, CreateUseDestroyAndErrorsPerThread) {
  EXPECT_EQ(RunThreads([](int t) {
              int failures = 0;
              for (int round = 0; round < 4; ++round) {
                sattn_context_options options{};
                options.struct_size = sizeof(options);
                options.num_threads = 1 + (t + round) % 2;
                sattn_context* ctx = nullptr;
                if (sattn_context_create(&options, &ctx) != SATTN_OK) return 1;
                std::vector<float> x(1000, static_cast<float>(t)), y(1000);
                failures += sattn_exp2(ctx, x.data(), y.data(), 1000) != SATTN_OK;
                const double want = std::exp2(static_cast<double>(t));
                failures += std::abs(y[999] - want) > 1e-6 * want;
                const int64_t bad = -1 - t;
                failures += sattn_exp2(ctx, x.data(), y.data(), bad) != SATTN_ERR_INVALID_ARGUMENT;
                failures += std::string(sattn_last_error()).find("n=" + std::to_string(bad)) ==
                            std::string::npos;
                sattn_context_destroy(ctx);
              }
              return failures;
            }),
            0);
}

}  // namespace
}  // namespace streamattn
