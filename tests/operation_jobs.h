// Every operation as a job with fixed inputs and its own outputs, and the paths that differ
// between one thread and many (prefill work items, split-KV decode, softmax rows split across
// tasks): the concurrency and parallel-runner tests compare each run's output bytes with a
// single-threaded run's.
#ifndef STREAMATTN_TESTS_OPERATION_JOBS_H_
#define STREAMATTN_TESTS_OPERATION_JOBS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "streamattn/streamattn.h"

namespace streamattn {
namespace testing_util {

// STREAMATTN_TEST_SMALL is set (emulated runs): smaller shapes.
bool Small();

// One operation with inputs made from fixed seeds (so every instance has the same inputs) and
// outputs of its own. Run returns the output bytes, or an empty vector on failure (the status
// then is sattn_last_error()'s).
class Job {
 public:
  virtual ~Job() = default;
  virtual std::vector<uint8_t> Run(sattn_context* ctx) = 0;
};

// Prefill, paged split-KV decode, softmax, log-softmax and top-k over long rows, softmax over
// many short rows, and a merge of states.
std::vector<std::unique_ptr<Job>> MakeJobs();

// Every job's output bytes on a one-thread context.
std::vector<std::vector<uint8_t>> SingleThreadedResults();

}  // namespace testing_util
}  // namespace streamattn

#endif  // STREAMATTN_TESTS_OPERATION_JOBS_H_
