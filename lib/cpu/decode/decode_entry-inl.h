// Where decoding's kernels cross translation units: attention.cc (prefill and the work items)
// calls RunDecodeWorkItem in decode_attention.cc (the decode driver, float caches read in
// place), which calls decode_quantized_attention.cc for quantized caches read in place. As one
// file they were the longest compile of every build (attention.cc: 118 of a Release build's
// 341 s on 2 cores, 100 of them decoding's); split, a build's two compilers share them. The
// files are compiled for the same Highway targets (foreach_target), so each target's
// declaration meets its own definition.
#if defined(STREAMATTN_CPU_DECODE_DECODE_ENTRY_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_DECODE_DECODE_ENTRY_INL_H_
#undef STREAMATTN_CPU_DECODE_DECODE_ENTRY_INL_H_
#else
#define STREAMATTN_CPU_DECODE_DECODE_ENTRY_INL_H_
#endif

#include <cstdint>

#include "core/attention_args.h"
#include "cpu/attention_plan-inl.h"
#include "cpu/attention_scratch-inl.h"
#include "cpu/work_item-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {

// DecodeWorkItem (decode/decode_driver-inl.h) for this target's widest f32 vectors
// (decode_attention.cc).
void RunDecodeWorkItem(const AttentionArgs& a, const AttentionPlan& plan, const WorkItem& item,
                       const AttentionScratch& s);

// The driver's StreamTilesInPlace and AdvanceTileInPlace for K and V of one quantized format
// (decode_quantized_attention.cc); nothing on targets that do not read a cache in place.
void StreamQuantizedTilesInPlace(const AttentionArgs& a, const AttentionPlan& plan,
                                 const WorkItem& item, int64_t k_first, int64_t tiles,
                                 int64_t key_end, const AttentionScratch& s);
void AdvanceQuantizedTileInPlace(const AttentionArgs& a, const AttentionPlan& plan,
                                 const WorkItem& item, const TileKeys& tile, int64_t key_end,
                                 const AttentionScratch& s);

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_DECODE_DECODE_ENTRY_INL_H_
