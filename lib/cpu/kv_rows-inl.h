// Where the tile micro-kernels read their rows of K or V from, as f32 vectors:
//  - DenseRows: a converted tile, dense f32 rows at a fixed stride (prefill: each row is
//    converted once per work item and then read by ~384 query rows).
//  - CacheRows<E>: the caller's K/V rows in place, of a cache element type E (f32, f16, bf16:
//    cache_element-inl.h), one pointer per key and the conversion done in registers as each vector
//    is loaded (decode: a row serves only a few query rows, so converting it into a tile first
//    costs a store and a reload of twice its bytes, which made decoding compute-bound at about half
//    the memory bandwidth).
// Both yield the same f32 values, so a kernel gives the same bytes from either.
#if defined(STREAMATTN_CPU_KV_ROWS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_KV_ROWS_INL_H_
#undef STREAMATTN_CPU_KV_ROWS_INL_H_
#else
#define STREAMATTN_CPU_KV_ROWS_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cpu/convert-inl.h"  // the float element types
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
  DenseRows WithoutPrefetch() const { return *this; }
  static constexpr bool kPrefetches = false;  // no NextKey, NextValue
  static constexpr bool kPairLoads = false;   // see CacheRows
};

// Whether element type E reads two vectors at once cheaper than one at a time (E::LoadPair).
template <class E, class = void>
struct ElementPairLoads {
  static constexpr bool value = false;
};
template <class E>
struct ElementPairLoads<E, std::void_t<decltype(E::kPairLoads)>> {
  static constexpr bool value = E::kPairLoads;
};

// Requests the line holding p into the core's L2, not L1 (prefetcht1 on x86, PLDL2KEEP on
// Arm). Requests into L1 (hwy::Prefetch, prefetcht0) held decoding on a Zen 4 host near 10
// GB/s per core, as if each held one of L1's few miss buffers for its whole trip to memory;
// requests into L2 decoded 1.2-1.6x faster from memory in every cache shape tried (f16, bf16,
// f32; head_dim 64 and 128; 8 and 32 query heads over 8). The loads that follow then miss
// only to L2, a latency the out-of-order core hides behind the products. On a Sapphire
// Rapids host (2 threads from memory, alternated against this): into L1 5-10% slower, and
// requests for only the first line of each 128-byte pair, leaving the other to the
// hardware's pair prefetch, 1.3-1.5x slower; so every line a step reads is requested.
HWY_INLINE void RequestIntoL2(const void* p) { __builtin_prefetch(p, /*rw=*/0, /*locality=*/2); }

// Prefetching a row of `bytes` bytes line by line, at row, row + 64, ... below row + bytes,
// misses its last line when the row does not start on a line (a cache 16 bytes off, as
// std::vector's large allocations are, made head_dim 64 decoding 25-40% slower): that line's
// address then, else null.
HWY_INLINE const char* UncoveredTail(const char* row, size_t bytes) {
  const char* tail = row + bytes - 1;
  const char* last_prefetched = row + (bytes - 1) / 64 * 64;
  return reinterpret_cast<uintptr_t>(tail) / 64 != reinterpret_cast<uintptr_t>(last_prefetched) / 64
             ? tail
             : nullptr;
}

// Requests every line of `bytes` bytes from `row` on into L2 (UncoveredTail's too).
HWY_INLINE void RequestRowIntoL2(const char* row, size_t bytes) {
  for (size_t byte = 0; byte < bytes; byte += 64) RequestIntoL2(row + byte);
  if (const char* tail = UncoveredTail(row, bytes)) RequestIntoL2(tail);
}

// RequestRowIntoL2 without the test: the row's last byte is requested whether or not its line
// is already, a duplicate request when the row starts on a line. For the small rows of the
// quantized one-row steps, where the test (five instructions) cost more per row than the
// products of a vector: one instruction instead.
HWY_INLINE void RequestRowAndLastByteIntoL2(const char* row, size_t bytes) {
  for (size_t byte = 0; byte < bytes; byte += 64) RequestIntoL2(row + byte);
  RequestIntoL2(row + bytes - 1);
}

// E is a cache element type (cache_element-inl.h), E::Stored what the cache holds; `element`
// reads it. Each row holds at least as many elements as the kernel reads (callers use this
// only for head dims that are whole vectors).
//
// Reading a head's rows of a tile while the tile's keys also hold the other heads' rows ([..,
// heads, dim] caches) is a pattern the hardware prefetchers follow poorly, so the rows also
// carry rows to request ahead of use (RequestIntoL2), one head of work ahead (a head's share of
// a tile, 8 KiB of K rows or more, enough to cover the memory latency; a whole tile ahead, or a
// second request a tile ahead, measured no faster). The caller chooses them:
//  - K rows carry the K rows of the head whose scores come next (NextKey): DotBlock requests
//    their lines a few per step as the scores walk a row, rather than in a burst that would
//    fill the core's miss buffers and stall the arithmetic. Packed decoding scores a block of
//    keys for every head before the next block (ScorePackedHeads): its K rows carry the same
//    head's rows of the next block instead.
//  - V rows carry the V rows of the head whose P.V comes next (NextValue): GemmTile requests
//    them as the P.V walks its rows, so that requests go out through the P.V as well as the
//    scores (3-11% faster from memory, f32 included, than requesting V during the scores,
//    which leaves the memory idle through the P.V).
//  - Streamed decoding tiles (decode/stream_tiles-inl.h) give both the next step's rows of
//    their own stream, in address order, whatever the head.
// Both also request a row's last line when the row does not start on one (UncoveredTail).
// Where element `elements` of a row of E is from the row's pointer, in E::Stored units: the
// same count for whole-byte elements, half of it for I4's two to a byte (offsets into its rows
// are even: heads and vectors start on a byte).
template <class E>
constexpr ptrdiff_t StoredUnits(ptrdiff_t elements) {
  return elements * E::kBits / (8 * static_cast<ptrdiff_t>(sizeof(typename E::Stored)));
}

template <class E>
struct CacheRows {
  using T = typename E::Stored;
  E element;
  const T* const* rows;  // rows[r]: where row r's elements are, offset by `offset`
  ptrdiff_t offset;      // elements added to every row: a head's offset, then a column
  // NextKey and NextValue only: the K and V rows to prefetch, row for row, and the offsets of
  // their heads in them (null when this role requests none).
  const T* const* next_keys = nullptr;
  const T* const* next_values = nullptr;
  ptrdiff_t next_key_offset = 0;
  ptrdiff_t next_value_offset = 0;

  const T* Row(size_t row) const { return rows[row] + StoredUnits<E>(offset); }
  template <class D>
  HWY_INLINE hn::Vec<D> Load(D d, const T* HWY_RESTRICT row, size_t i) const {
    return element.Load(d, row, i);
  }
  // Where the element reads a pair of vectors (elements i.. i + 2 Lanes(d) - 1) in fewer
  // operations than two Loads (FP8 on AVX2), kernels that read a row's vectors in pairs call
  // LoadPair.
  static constexpr bool kPairLoads = ElementPairLoads<E>::value;
  template <class D>
  HWY_INLINE void LoadPair(D d, const T* HWY_RESTRICT row, size_t i, hn::Vec<D>& lo,
                           hn::Vec<D>& hi) const {
    element.LoadPair(d, row, i, lo, hi);
  }
  // The same rows, and rows to prefetch, from column `columns` on.
  CacheRows Columns(size_t columns) const {
    const ptrdiff_t c = static_cast<ptrdiff_t>(columns);
    return CacheRows{element,
                     rows,
                     offset + c,
                     next_keys,
                     next_values,
                     next_key_offset + c,
                     next_value_offset + c};
  }
  // The same rows without rows to prefetch (for every block of rows but the first).
  CacheRows WithoutPrefetch() const { return CacheRows{element, rows, offset}; }
  // Where row `row`'s K and V rows to prefetch start.
  static constexpr bool kPrefetches = true;
  // The bytes of `elements` elements of a row (prefetches walk rows by bytes).
  static constexpr size_t Bytes(size_t elements) { return elements * E::kBits / 8; }
  const char* NextKey(size_t row) const {
    return reinterpret_cast<const char*>(next_keys[row] + StoredUnits<E>(next_key_offset));
  }
  const char* NextValue(size_t row) const {
    return reinterpret_cast<const char*>(next_values[row] + StoredUnits<E>(next_value_offset));
  }
};

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_KV_ROWS_INL_H_
