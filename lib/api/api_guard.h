// The boundary between C callers and C++ internals: every entry point runs its body through
// RunGuarded, which records the thread-local message and makes sure no exception, however
// unexpected, crosses into C.
#ifndef STREAMATTN_API_API_GUARD_H_
#define STREAMATTN_API_API_GUARD_H_

#include <cstring>
#include <new>

#include "core/status.h"
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

// Copies a caller's option struct that begins with `uint32_t struct_size` into *out (whose
// fields the caller did not provide keep their defaults). A struct_size below the first
// version's size is an error; a larger one (a newer header) is accepted when every byte we do
// not know is zero, i.e. the caller left the newer options at their defaults.
template <typename Options>
Status ReadOptions(const Options* user, const char* name, size_t first_version_size, Options* out) {
  if (user == nullptr) return Status();
  const uint32_t size = user->struct_size;
  if (size < first_version_size) {
    return InvalidArgument(
        "%s->struct_size=%u is smaller than the smallest known size %zu "
        "(set it to sizeof(%s))",
        name, size, first_version_size, name);
  }
  if (size > sizeof(Options)) {
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(user);
    for (size_t i = sizeof(Options); i < size; ++i) {
      if (bytes[i] != 0) {
        return Unsupported(
            "%s sets a field at byte %zu that this version of streamattn (%s) "
            "does not know",
            name, i, sattn_version());
      }
    }
  }
  std::memcpy(static_cast<void*>(out), user, size < sizeof(Options) ? size : sizeof(Options));
  out->struct_size = sizeof(Options);
  return Status();
}

}  // namespace streamattn

#endif  // STREAMATTN_API_API_GUARD_H_
