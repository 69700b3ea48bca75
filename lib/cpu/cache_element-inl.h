// How the attention kernels read a K/V cache: the element type its dtype maps to, chosen here
// and nowhere else (WithCacheElement: the float dtypes and the quantized formats), and a tile
// of it converted to dense f32 (ConvertKeyTile: every tile of prefill's f32 tile kernel, the
// edge tiles of decoding).
//
// An element type (convert-inl.h has the float ones) names its stored type and loads a
// vector of f32 from element i of a row (Load: decoding reads the cache in place and converts
// in registers, kv_rows-inl.h) or one element alone (LoadOne: tails and strided rows). A new
// cache format is a file defining its element type and one case in WithCacheElement; the
// drivers, the state, the merge, masks, paging and split-KV do not change (docs/design.md
// works through an example).
#if defined(STREAMATTN_CPU_CACHE_ELEMENT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_CACHE_ELEMENT_INL_H_
#undef STREAMATTN_CPU_CACHE_ELEMENT_INL_H_
#else
#define STREAMATTN_CPU_CACHE_ELEMENT_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "core/attention_args.h"
#include "cpu/attention_plan-inl.h"
#include "cpu/attention_scratch-inl.h"
#include "cpu/convert-inl.h"
#include "cpu/kv_rows-inl.h"
#include "cpu/quantized_element-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Calls f with the element the kernels read cache tensor `cache` (a.k or a.v) as: a value of
// its element type, built from the call where the format carries state. The float dtypes
// (F32Element, F16Element, BF16Element) carry none; FP8 neither (its per-head scales are
// folded into the queries and the output: KeyHeadFactor, work_item-inl.h); I8 and I4 carry
// where their group scales are (quantized_element-inl.h), in the scales' dtype.
template <class F>
HWY_INLINE void WithCacheElement(const AttentionArgs& a, const Tensor& cache, F&& f) {
  const GroupScales& g = a.GroupScalesOf(cache);
  auto lookup = [&](auto scale) {
    using S = decltype(scale);
    return GroupScaleLookup<S>{static_cast<const uint8_t*>(cache.data),
                               static_cast<const S*>(g.scales.data), g.log2_group};
  };
  const bool f32_scales = g.scales.dtype == DType::kF32;
  switch (cache.dtype) {
    case DType::kFP8E4M3:
      return f(E4M3Element{});
    case DType::kI8:
      if (f32_scales) return f(I8Element<float>{lookup(0.0f)});
      return f(I8Element<hwy::float16_t>{lookup(hwy::float16_t())});
    case DType::kI4:
      if (f32_scales) return f(I4Element<float>{lookup(0.0f)});
      return f(I4Element<hwy::float16_t>{lookup(hwy::float16_t())});
    default:
      return WithFloatElement(cache.dtype, std::forward<F>(f));
  }
}

// Calls f(k_element, v_element) with the elements of a cache whose K and V hold one element
// type (CacheReadInPlaceAsOneElement, attention_plan-inl.h, which plan.cache_in_place
// requires).
template <class F>
HWY_INLINE void WithCacheElements(const AttentionArgs& a, const F& f) {
  WithCacheElement(a, a.k, [&](const auto& k_element) {
    WithCacheElement(a, a.v, [&](const auto& v_element) {
      using E = std::decay_t<decltype(k_element)>;
      if constexpr (std::is_same_v<E, std::decay_t<decltype(v_element)>>) f(k_element, v_element);
    });
  });
}

// WithCacheElements for one family of element types: kQuantized, the quantized formats (I8, I4,
// FP8), else the float dtypes. The kernels that read a cache in place are compiled per element
// type; decoding compiles each family in a translation unit of its own (decode_entry-inl.h).
template <bool kQuantized, class F>
HWY_INLINE void WithCacheElementsOf(const AttentionArgs& a, const F& f) {
  WithCacheElements(a, [&](const auto& k_element, const auto& v_element) {
    using E = std::decay_t<decltype(k_element)>;
    if constexpr ((E::kBits <= 8) == kQuantized) f(k_element, v_element);
  });
}

// Converts row(s) of key `key` of tensor t (k or v, elements read as `element`) for kv heads
// [hkv_begin, hkv_begin + heads) into `rows`, rows of `dim` elements `dim_pad` apart (the
// padding zeroed). When a key's heads are one dense run of elements (the usual
// [.., heads_kv, dim] layout with unpadded dims), one conversion covers all of them. A
// group-scaled element takes each row's scales from the scales tensor, whatever its layout.
template <class E, class D>
HWY_INLINE void ConvertKeyRows(D d, const E& element, const AttentionArgs& a, const Tensor& t,
                               int64_t b, int64_t key, int64_t hkv_begin, size_t heads, size_t dim,
                               size_t dim_pad, float* HWY_RESTRICT rows) {
  using Stored = typename E::Stored;
  auto row_of = [&](int64_t head) { return static_cast<const Stored*>(a.KeyRow(t, b, key, head)); };
  if constexpr (E::kGroupScales) {
    const GroupScales& g = a.GroupScalesOf(t);
    for (size_t h = 0; h < heads; ++h) {
      const int64_t head = hkv_begin + static_cast<int64_t>(h);
      float* row = rows + h * dim_pad;
      ConvertScaledRow<E>(d, row_of(head),
                          static_cast<const typename E::Scale*>(a.KeyRow(g.scales, b, key, head)),
                          g.scales.stride(3), g.group, dim, row);
      std::fill(row + dim, row + dim_pad, 0.0f);
    }
    return;
  }
  if (dim == dim_pad && t.stride(3) == 1 &&
      (heads == 1 || t.stride(2) == static_cast<int64_t>(dim))) {
    ConvertRow(d, element, row_of(hkv_begin), 1, heads * dim, rows);
    return;
  }
  for (size_t h = 0; h < heads; ++h) {
    float* row = rows + h * dim_pad;
    ConvertRow(d, element, row_of(hkv_begin + static_cast<int64_t>(h)), t.stride(3), dim, row);
    std::fill(row + dim, row + dim_pad, 0.0f);
  }
}

// Converts the rows of keys [k0, k0 + nb) of kv heads [hkv_begin, hkv_begin + plan.heads) of
// sequence b of cache t (a.k or a.v, `dim` channels a row) to dense f32, key after key and head
// after head, so the reads sweep the cache in address order (contiguous or paged alike). The
// tile is key-major: head h's row of key c is at tile + (c * heads + h) * dim_pad.
template <class D>
HWY_INLINE void ConvertCacheTile(D d, const AttentionArgs& a, const AttentionPlan& plan,
                                 const Tensor& t, size_t dim, size_t dim_pad, int64_t b,
                                 int64_t hkv_begin, int64_t k0, size_t nb,
                                 float* HWY_RESTRICT tile) {
  const size_t heads = static_cast<size_t>(plan.heads);
  WithCacheElement(a, t, [&](auto element) {
    using E = decltype(element);
    // A contiguous cache whose key holds one dense run (prefill's usual case): step one pointer
    // by the key stride rather than locate each key's row and test its layout again.
    if constexpr (!E::kGroupScales) {
      if (!a.paged && dim == dim_pad && t.stride(3) == 1 &&
          (heads == 1 || t.stride(2) == static_cast<int64_t>(dim))) {
        const auto* row = static_cast<const typename E::Stored*>(a.KeyRow(t, b, k0, hkv_begin));
        for (size_t c = 0; c < nb; ++c, row += t.stride(1)) {
          ConvertRow(d, element, row, 1, heads * dim, tile + c * heads * dim_pad);
        }
        return;
      }
    }
    for (size_t c = 0; c < nb; ++c) {
      ConvertKeyRows(d, element, a, t, b, k0 + static_cast<int64_t>(c), hkv_begin, heads, dim,
                     dim_pad, tile + c * heads * dim_pad);
    }
  });
}

// Converts keys [k0, k0 + nb) of kv heads [hkv_begin, hkv_begin + plan.heads) of sequence b:
// K rows into k_tile (ConvertCacheTile's layout, rows past nb, to nb_pad, zero), then V rows
// into v_tile. k_tile == nullptr: V alone (a tile kernel that reads K in another form). When V
// is K's leading channels (plan.values_in_key_tile) and K is converted, V is not: its rows are
// the K tile's (ConvertedValueRows), so an MLA cache is read and converted once per tile.
template <class D>
HWY_INLINE void ConvertKeyTile(D d, const AttentionArgs& a, const AttentionPlan& plan, int64_t b,
                               int64_t hkv_begin, int64_t k0, size_t nb, size_t nb_pad,
                               float* HWY_RESTRICT k_tile, float* HWY_RESTRICT v_tile) {
  if (k_tile != nullptr) {
    ConvertCacheTile(d, a, plan, a.k, plan.dim, plan.dim_pad, b, hkv_begin, k0, nb, k_tile);
    const size_t heads = static_cast<size_t>(plan.heads);
    std::fill(k_tile + nb * heads * plan.dim_pad, k_tile + nb_pad * heads * plan.dim_pad, 0.0f);
    if (plan.values_in_key_tile) return;
  }
  ConvertCacheTile(d, a, plan, a.v, static_cast<size_t>(a.head_dim_v), plan.dim_v_pad, b, hkv_begin,
                   k0, nb, v_tile);
}

// The V rows of the item's h-th kv head in a tile ConvertKeyTile converted with K: the V tile,
// or with V inside K the K tile's rows (dim_pad apart per head; the columns past head_dim_v
// are K's next channels, which land only in O's padding columns, never read).
inline DenseRows ConvertedValueRows(const AttentionPlan& plan, const AttentionScratch& s,
                                    int64_t h) {
  const size_t heads = static_cast<size_t>(plan.heads), hh = static_cast<size_t>(h);
  if (plan.values_in_key_tile) return DenseRows{s.k_tile + hh * plan.dim_pad, heads * plan.dim_pad};
  return DenseRows{s.v_tile + hh * plan.dim_v_pad, heads * plan.dim_v_pad};
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_CACHE_ELEMENT_INL_H_
