// Status: the error type every internal function returns. The C API turns it into a
// sattn_status and a thread-local message; nothing below the API throws to report bad input.
#ifndef STREAMATTN_CORE_STATUS_H_
#define STREAMATTN_CORE_STATUS_H_

#include <string>
#include <utility>

#include "streamattn/streamattn.h"

namespace streamattn {

class Status {
 public:
  Status() = default;  // OK
  Status(sattn_status code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == SATTN_OK; }
  sattn_status code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  sattn_status code_ = SATTN_OK;
  std::string message_;
};

// printf-style constructors, so messages can quote values: "k.shape[3]=96 must equal ...".
Status InvalidArgument(const char* format, ...) __attribute__((format(printf, 1, 2)));
Status Unsupported(const char* format, ...) __attribute__((format(printf, 1, 2)));
Status BackendUnavailable(const char* format, ...) __attribute__((format(printf, 1, 2)));
Status OutOfMemory(const char* format, ...) __attribute__((format(printf, 1, 2)));
Status Internal(const char* format, ...) __attribute__((format(printf, 1, 2)));
Status RunnerFailed(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace streamattn

// Variadic so that the expression may be a call with a lambda whose body has top-level commas
// (pool->ParallelFor(n, [&](...) { int64_t a = 0, b = 1; ... })).
#define SATTN_RETURN_IF_ERROR(...)                          \
  do {                                                      \
    ::streamattn::Status sattn_status_tmp_ = (__VA_ARGS__); \
    if (!sattn_status_tmp_.ok()) return sattn_status_tmp_;  \
  } while (0)

#endif  // STREAMATTN_CORE_STATUS_H_
