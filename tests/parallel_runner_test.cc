// The application's own threads (sattn_context_options.runner): runners that run the indices in
// reverse or in random order on threads of their own, or all on the caller's thread, give the
// same bytes as a one-thread context for every operation; a runner's failure comes back as
// SATTN_ERR_RUNNER_FAILED with its code and leaves the context usable; a runner that breaks the
// contract (a slot out of range, an index skipped) is caught; runner_data without a runner is
// refused at creation.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "operation_jobs.h"
#include "streamattn/streamattn.h"

namespace streamattn {
namespace {

using testing_util::Job;
using testing_util::MakeJobs;
using testing_util::SingleThreadedResults;

enum class Order { kForward, kReverse, kRandom };

// A runner with its own threads, started per loop: thread t of `threads` takes the next index
// of the loop's order and passes t as its slot. Counts its loops.
struct ThreadsRunner {
  int threads = 3;
  Order order = Order::kForward;
  std::mt19937_64 rng{5};
  int loops = 0;

  static int32_t Run(void* self, sattn_parallel_task task, void* task_data, int64_t count) {
    ThreadsRunner& r = *static_cast<ThreadsRunner*>(self);
    ++r.loops;
    std::vector<int64_t> indices(static_cast<size_t>(count));
    std::iota(indices.begin(), indices.end(), 0);
    if (r.order == Order::kReverse) std::reverse(indices.begin(), indices.end());
    if (r.order == Order::kRandom) std::shuffle(indices.begin(), indices.end(), r.rng);
    std::atomic<size_t> next{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < r.threads; ++t) {
      pool.emplace_back([&, t] {
        for (size_t i; (i = next.fetch_add(1)) < indices.size();) task(task_data, indices[i], t);
      });
    }
    for (std::thread& thread : pool) thread.join();
    return 0;
  }
};

// Everything on the caller's thread, slot 0, in order (a runner that has no threads to give).
int32_t RunOnCaller(void*, sattn_parallel_task task, void* task_data, int64_t count) {
  for (int64_t i = 0; i < count; ++i) task(task_data, i, 0);
  return 0;
}

sattn_context* CreateWithRunner(int32_t num_threads, sattn_parallel_runner runner, void* data) {
  sattn_context_options options{};
  options.struct_size = sizeof(options);
  options.num_threads = num_threads;
  options.runner = runner;
  options.runner_data = data;
  sattn_context* ctx = nullptr;
  EXPECT_EQ(sattn_context_create(&options, &ctx), SATTN_OK) << sattn_last_error();
  return ctx;
}

int32_t NumThreads(const sattn_context* ctx) {
  sattn_context_info info{};
  info.struct_size = sizeof(info);
  EXPECT_EQ(sattn_context_get_info(ctx, &info), SATTN_OK) << sattn_last_error();
  return info.num_threads;
}

// Every job's bytes through `ctx` against `want`; the number that differ or failed.
int Mismatches(sattn_context* ctx, const std::vector<std::vector<uint8_t>>& want) {
  std::vector<std::unique_ptr<Job>> jobs = MakeJobs();
  int mismatches = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const std::vector<uint8_t> got = jobs[j]->Run(ctx);
    EXPECT_FALSE(got.empty()) << "job " << j << ": " << sattn_last_error();
    mismatches += got != want[j];
  }
  return mismatches;
}

TEST(ParallelRunnerTest, OwnThreadsInAnyOrderGiveTheSameBytes) {
  const std::vector<std::vector<uint8_t>> want = SingleThreadedResults();
  const struct {
    Order order;
    int threads;
  } runs[] = {{Order::kForward, 1},
              {Order::kReverse, 2},
              {Order::kReverse, 8},
              {Order::kRandom, 3},
              {Order::kRandom, 8}};
  for (const auto& run : runs) {
    ThreadsRunner runner;
    runner.threads = run.threads;
    runner.order = run.order;
    sattn_context* ctx = CreateWithRunner(run.threads, &ThreadsRunner::Run, &runner);
    ASSERT_NE(ctx, nullptr);
    // Slots are the runner's: as many as asked for, whatever this machine's cores.
    EXPECT_EQ(NumThreads(ctx), run.threads);
    EXPECT_EQ(Mismatches(ctx, want), 0)
        << "order " << static_cast<int>(run.order) << ", " << run.threads << " threads";
    EXPECT_GT(runner.loops, 0) << "the context ran no loop through its runner";
    sattn_context_destroy(ctx);
  }
}

TEST(ParallelRunnerTest, EverythingOnTheCallersThreadGivesTheSameBytes) {
  const std::vector<std::vector<uint8_t>> want = SingleThreadedResults();
  for (int32_t slots : {1, 4}) {  // 4: the kernels split for 4 workers; only slot 0 runs
    sattn_context* ctx = CreateWithRunner(slots, &RunOnCaller, nullptr);
    ASSERT_NE(ctx, nullptr);
    EXPECT_EQ(Mismatches(ctx, want), 0) << slots << " slots";
    sattn_context_destroy(ctx);
  }
}

TEST(ParallelRunnerTest, ZeroThreadsMeansTheAvailableCpus) {
  sattn_context* ctx = CreateWithRunner(0, &RunOnCaller, nullptr);
  ASSERT_NE(ctx, nullptr);
  EXPECT_GE(NumThreads(ctx), 1);
  sattn_context_destroy(ctx);
}

// Fails (code 42) after running half of each loop's indices while `fail` is set.
struct FailingRunner {
  bool fail = true;
  static int32_t Run(void* self, sattn_parallel_task task, void* task_data, int64_t count) {
    const bool fail = static_cast<FailingRunner*>(self)->fail;
    for (int64_t i = 0; i < (fail ? count / 2 : count); ++i) task(task_data, i, 0);
    return fail ? 42 : 0;
  }
};

TEST(ParallelRunnerTest, AFailureReturnsItsCodeAndTheContextStaysUsable) {
  const std::vector<std::vector<uint8_t>> want = SingleThreadedResults();
  FailingRunner runner;
  sattn_context* ctx = CreateWithRunner(2, &FailingRunner::Run, &runner);
  ASSERT_NE(ctx, nullptr);
  for (auto& job : MakeJobs()) {
    EXPECT_TRUE(job->Run(ctx).empty()) << "a failing runner's call succeeded";
    EXPECT_NE(std::string(sattn_last_error()).find("options->runner returned 42"),
              std::string::npos)
        << sattn_last_error();
  }
  std::vector<float> x(10, 1.0f), y(10);
  EXPECT_EQ(sattn_exp2(ctx, x.data(), y.data(), 10), SATTN_ERR_RUNNER_FAILED);
  runner.fail = false;
  EXPECT_EQ(Mismatches(ctx, want), 0) << "the context is not usable after its runner failed";
  sattn_context_destroy(ctx);
}

// Contract breakers: each makes the call fail, naming what went wrong, and runs nothing unsafe.
int32_t SlotOutOfRange(void*, sattn_parallel_task task, void* task_data, int64_t count) {
  for (int64_t i = 0; i < count; ++i) task(task_data, i, 2);  // the context has 2 slots: 0, 1
  return 0;
}
int32_t SkipsTheLastIndex(void*, sattn_parallel_task task, void* task_data, int64_t count) {
  for (int64_t i = 0; i + 1 < count; ++i) task(task_data, i, 0);
  return 0;
}
int32_t IndexOutOfRange(void*, sattn_parallel_task task, void* task_data, int64_t count) {
  for (int64_t i = 0; i <= count; ++i) task(task_data, i, 0);
  return 0;
}

TEST(ParallelRunnerTest, BrokenContractsAreCaught) {
  const struct {
    sattn_parallel_runner runner;
    const char* message;
  } cases[] = {
      {&SlotOutOfRange, "passed thread 2, outside [0, num_threads=2)"},
      {&SkipsTheLastIndex, "task calls for a loop of"},
      {&IndexOutOfRange, "outside [0, count="},
  };
  for (const auto& c : cases) {
    sattn_context* ctx = CreateWithRunner(2, c.runner, nullptr);
    ASSERT_NE(ctx, nullptr);
    // 4 chunks of exp2: a loop of 4 indices.
    std::vector<float> x(4 << 16, 0.5f), y(x.size());
    EXPECT_EQ(sattn_exp2(ctx, x.data(), y.data(), static_cast<int64_t>(x.size())),
              SATTN_ERR_RUNNER_FAILED);
    EXPECT_NE(std::string(sattn_last_error()).find(c.message), std::string::npos)
        << sattn_last_error();
    sattn_context_destroy(ctx);
  }
}

TEST(ParallelRunnerTest, RunnerDataWithoutARunnerIsRefused) {
  int data = 0;
  sattn_context_options options{};
  options.struct_size = sizeof(options);
  options.runner_data = &data;
  sattn_context* ctx = reinterpret_cast<sattn_context*>(&data);  // must become NULL
  EXPECT_EQ(sattn_context_create(&options, &ctx), SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ctx, nullptr);
  EXPECT_NE(std::string(sattn_last_error()).find("options->runner is NULL"), std::string::npos)
      << sattn_last_error();
  EXPECT_NE(std::string(sattn_last_error()).find("options->runner_data"), std::string::npos)
      << sattn_last_error();
}

}  // namespace
}  // namespace streamattn
