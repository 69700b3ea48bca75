// Version, status names and the thread-local last error.
#include <string>

#include "api/api_guard.h"

namespace streamattn {
namespace {

std::string& LastErrorMessage() {
  thread_local std::string message;
  return message;
}

#define SATTN_STRINGIFY_(x) #x
#define SATTN_STRINGIFY(x) SATTN_STRINGIFY_(x)

}  // namespace

sattn_status RecordStatus(const Status& status) {
  if (status.ok()) return SATTN_OK;
  // Assigning may allocate; a failure to record a message must not become a crash.
  try {
    LastErrorMessage() = status.message();
  } catch (...) {
    LastErrorMessage().clear();
  }
  return status.code();
}

sattn_status RecordError(sattn_status code, const char* prefix, const char* detail) noexcept {
  try {
    std::string& message = LastErrorMessage();
    message = prefix;
    message += detail;
  } catch (...) {
    LastErrorMessage().clear();  // clear() never allocates
  }
  return code;
}

}  // namespace streamattn

extern "C" {

SATTN_API const char* sattn_version(void) {
  return SATTN_STRINGIFY(SATTN_VERSION_MAJOR) "." SATTN_STRINGIFY(
      SATTN_VERSION_MINOR) "." SATTN_STRINGIFY(SATTN_VERSION_PATCH);
}

SATTN_API const char* sattn_status_string(sattn_status status) {
  switch (status) {
    case SATTN_OK:
      return "ok";
    case SATTN_ERR_INVALID_ARGUMENT:
      return "invalid argument";
    case SATTN_ERR_UNSUPPORTED:
      return "unsupported";
    case SATTN_ERR_OUT_OF_MEMORY:
      return "out of memory";
    case SATTN_ERR_BACKEND_UNAVAILABLE:
      return "backend unavailable";
    case SATTN_ERR_INTERNAL:
      return "internal error";
    case SATTN_ERR_RUNNER_FAILED:
      return "parallel runner failed";
  }
  return "unknown status";
}

SATTN_API const char* sattn_last_error(void) { return streamattn::LastErrorMessage().c_str(); }

}  // extern "C"
