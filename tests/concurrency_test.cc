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

#include "gtest/gtest.h"
#include "operation_jobs.h"
#include "streamattn/streamattn.h"
#include "test_util.h"

namespace streamattn {
namespace {

using testing_util::Job;
using testing_util::MakeJobs;
using testing_util::ScopedContext;
using testing_util::SingleThreadedResults;
using testing_util::Small;

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
