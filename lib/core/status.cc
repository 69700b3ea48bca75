#include "core/status.h"

#include <cstdarg>
#include <cstdio>

namespace streamattn {
namespace {

Status MakeStatus(sattn_status code, const char* format, va_list args) {
  char buffer[512];
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  return Status(code, buffer);
}

}  // namespace

#define STREAMATTN_DEFINE_STATUS_MAKER(Name, code)  \
  Status Name(const char* format, ...) {            \
    va_list args;                                   \
    va_start(args, format);                         \
    Status status = MakeStatus(code, format, args); \
    va_end(args);                                   \
    return status;                                  \
  }

STREAMATTN_DEFINE_STATUS_MAKER(InvalidArgument, SATTN_ERR_INVALID_ARGUMENT)
STREAMATTN_DEFINE_STATUS_MAKER(Unsupported, SATTN_ERR_UNSUPPORTED)
STREAMATTN_DEFINE_STATUS_MAKER(BackendUnavailable, SATTN_ERR_BACKEND_UNAVAILABLE)
STREAMATTN_DEFINE_STATUS_MAKER(OutOfMemory, SATTN_ERR_OUT_OF_MEMORY)
STREAMATTN_DEFINE_STATUS_MAKER(Internal, SATTN_ERR_INTERNAL)
STREAMATTN_DEFINE_STATUS_MAKER(RunnerFailed, SATTN_ERR_RUNNER_FAILED)

#undef STREAMATTN_DEFINE_STATUS_MAKER

}  // namespace streamattn
