// Where the tile micro-kernels read their rows of K or V from, as f32 vectors:
//  - DenseRows: a converted tile, dense f32 rows at a fixed stride (prefill: each row is
//    converted once per work item and then read by ~192 query rows).
//  - CacheRows<T>: the caller's K/V rows in place, f32, f16 or bf16, one pointer per key and
//    the conversion done in registers as each vector is loaded (decode: a row serves only a
//    few query rows, so converting it into a tile first costs a store and a reload of twice its
//    bytes, which made decoding compute-bound at about half the memory bandwidth).
// Both yield the same f32 values, so a kernel gives the same bytes from either.
#if defined(STREAMATTN_CPU_KV_ROWS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_KV_ROWS_INL_H_
#undef STREAMATTN_CPU_KV_ROWS_INL_H_
#else
#define STREAMATTN_CPU_KV_ROWS_INL_H_
#endif

#include <cstddef>

#include "cpu/convert-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

struct DenseRows {
  const float* base;
  size_t ld;  // floats from one row to the next

  const float* Row(size_t row) const { return base + row * ld; }
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const float* HWY_RESTRICT row, size_t i) {
    return hn::LoadU(d, row + i);
  }
  // The same rows from column `first` on.
  DenseRows Columns(size_t first) const { return DenseRows{base + first, ld}; }
  static constexpr bool kPrefetches = false;  // no NextKey, NextValue
};

// T is float, hwy::float16_t or hwy::bfloat16_t. Each row holds at least as many elements as
// the kernel reads (callers use this only for head dims that are whole vectors).
//
// Reading a head's rows of a tile while the tile's keys also hold the other heads' rows ([..,
// heads, dim] caches) is a pattern the hardware prefetchers follow poorly, so the key rows
// also carry rows to request ahead of use (NextKey, NextValue; the caller chooses them: the K
// rows of the head computed next and the V rows of the head whose P.V comes next): as the
// scores walk a row, DotBlock requests their lines a few per step rather than in a burst that
// would fill the core's miss buffers and stall the arithmetic. About one head of work ahead
// (16 keys, 8 KiB for head_dim 128 in f16) covers the memory latency and stays in L1; a whole
// tile ahead (64 KiB over 8 kv heads) did not fit L1, so the lines were evicted before use and
// decoding from memory ran 7-10% slower.
template <typename T>
struct CacheRows {
  const T* const* rows;  // rows[r]: where row r's elements are, offset by `offset`
  ptrdiff_t offset;      // elements added to every row pointer: a head's offset, then a column
  // NextKey and NextValue only: the K and V rows to prefetch, row for row, and the offsets of
  // their heads in them.
  const T* const* next_keys = nullptr;
  const T* const* next_values = nullptr;
  ptrdiff_t next_key_offset = 0;
  ptrdiff_t next_value_offset = 0;

  const T* Row(size_t row) const { return rows[row] + offset; }
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const T* HWY_RESTRICT row, size_t i) {
    return LoadAsF32(d, row + i);
  }
  CacheRows Columns(size_t columns) const {
    return CacheRows{rows, offset + static_cast<ptrdiff_t>(columns)};
  }
  // Where row `row`'s K and V rows to prefetch start.
  static constexpr bool kPrefetches = true;
  static constexpr size_t kElementBytes = sizeof(T);
  const char* NextKey(size_t row) const {
    return reinterpret_cast<const char*>(next_keys[row] + next_key_offset);
  }
  const char* NextValue(size_t row) const {
    return reinterpret_cast<const char*>(next_values[row] + next_value_offset);
  }
};

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_KV_ROWS_INL_H_
