// The rule for reading a caller's versioned options struct (one that begins with
// `uint32_t struct_size`), header-only so that the core's entry points and the MPI layer (which
// links only the C API) accept and reject the same sizes, each in its own error type.
#ifndef STREAMATTN_CORE_VERSIONED_OPTIONS_H_
#define STREAMATTN_CORE_VERSIONED_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "streamattn/streamattn.h"

namespace streamattn {

// sattn_attention_options as first published ends with block_table: an older caller's
// struct_size stops there, and later fields are appended after it.
constexpr size_t kFirstAttentionOptionsSize =
    offsetof(sattn_attention_options, block_table) + sizeof(const sattn_tensor*);

// Whether a struct_size ends inside the field at `offset` of `size` bytes (not the size of any
// version: copying it would take part of a pointer).
constexpr bool CutsField(uint32_t struct_size, size_t offset, size_t size) {
  return struct_size > offset && struct_size < offset + size;
}

// A sattn_attention_options struct_size that cuts one of the fields appended after the first
// version (the third version's scale views, the fourth's int8_queries, the fifth's
// cu_seqlens_q and cu_seqlens_k).
constexpr bool CutsAttentionOptionsField(uint32_t struct_size) {
  return CutsField(struct_size, offsetof(sattn_attention_options, k_scales),
                   sizeof(const sattn_tensor*)) ||
         CutsField(struct_size, offsetof(sattn_attention_options, v_scales),
                   sizeof(const sattn_tensor*)) ||
         CutsField(struct_size, offsetof(sattn_attention_options, int8_queries), sizeof(int32_t)) ||
         CutsField(struct_size, offsetof(sattn_attention_options, cu_seqlens_q),
                   sizeof(const sattn_tensor*)) ||
         CutsField(struct_size, offsetof(sattn_attention_options, cu_seqlens_k),
                   sizeof(const sattn_tensor*));
}

enum class OptionsVerdict {
  kCopied,
  kTooSmall,      // struct_size is below the first version's size
  kUnknownField,  // a newer header's field, past what this build knows, is not zero
};

struct OptionsRead {
  OptionsVerdict verdict = OptionsVerdict::kCopied;
  uint32_t struct_size = 0;  // the caller's
  size_t byte = 0;           // kUnknownField: the offset of the first non-zero unknown byte
};

// Copies `user` into *out (whose fields the caller did not provide keep their defaults) and sets
// out->struct_size to this build's size. A struct_size below first_version_size is refused; a
// larger one than sizeof(Options) (a newer header) is accepted when every byte we do not know is
// zero, i.e. the caller left the newer options at their defaults. *out is untouched when refused.
template <typename Options>
OptionsRead CopyVersionedOptions(const Options& user, size_t first_version_size, Options* out) {
  OptionsRead read;
  read.struct_size = user.struct_size;
  if (read.struct_size < first_version_size) {
    read.verdict = OptionsVerdict::kTooSmall;
    return read;
  }
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(&user);
  for (size_t i = sizeof(Options); i < read.struct_size; ++i) {
    if (bytes[i] != 0) {
      read.verdict = OptionsVerdict::kUnknownField;
      read.byte = i;
      return read;
    }
  }
  std::memcpy(static_cast<void*>(out), &user,
              read.struct_size < sizeof(Options) ? read.struct_size : sizeof(Options));
  out->struct_size = sizeof(Options);
  return read;
}

}  // namespace streamattn

#endif  // STREAMATTN_CORE_VERSIONED_OPTIONS_H_
