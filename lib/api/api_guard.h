// The boundary between C callers and C++ internals: every entry point runs its body through
// RunGuarded, which records the thread-local message and makes sure no exception, however
// unexpected, crosses into C.
#ifndef STREAMATTN_API_API_GUARD_H_
#define STREAMATTN_API_API_GUARD_H_

#include <new>

#include "core/status.h"
#include "core/versioned_options.h"
#include "streamattn/streamattn.h"

namespace streamattn {

// Records a failed status as this thread's last error; returns the status code.
sattn_status RecordStatus(const Status& status);
// The same from a code and up to two pieces of text, without building a Status: it never
// throws, so the handlers below can use it when memory has run out.
sattn_status RecordError(sattn_status code, const char* prefix, const char* detail) noexcept;

template <typename Body>
sattn_status RunGuarded(Body&& body) noexcept {
  try {
    return RecordStatus(body());
  } catch (const std::bad_alloc& e) {  // AllocationFailure says which allocator, and how much
    return RecordError(SATTN_ERR_OUT_OF_MEMORY, "out of memory: ", e.what());
  } catch (const std::exception& e) {
    return RecordError(SATTN_ERR_INTERNAL, "unexpected exception: ", e.what());
  } catch (...) {
    return RecordError(SATTN_ERR_INTERNAL, "unexpected exception", "");
  }
}

// Reads a caller's option struct into *out by core/versioned_options.h's rule (NULL: *out
// keeps its defaults), naming the struct `name` in the errors.
template <typename Options>
Status ReadOptions(const Options* user, const char* name, size_t first_version_size, Options* out) {
  if (user == nullptr) return Status();
  const OptionsRead read = CopyVersionedOptions(*user, first_version_size, out);
  if (read.verdict == OptionsVerdict::kTooSmall) {
    return InvalidArgument(
        "%s->struct_size=%u is smaller than the smallest known size %zu "
        "(set it to sizeof(%s))",
        name, read.struct_size, first_version_size, name);
  }
  if (read.verdict == OptionsVerdict::kUnknownField) {
    return Unsupported(
        "%s sets a field at byte %zu that this version of streamattn (%s) "
        "does not know",
        name, read.byte, sattn_version());
  }
  return Status();
}

}  // namespace streamattn

#endif  // STREAMATTN_API_API_GUARD_H_
