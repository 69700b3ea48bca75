// Decoding's kernels that read a quantized cache (I8, I4, FP8) in place, for every Highway
// target: the driver's StreamTilesInPlace and AdvanceTileInPlace for those formats
// (decode/decode_entry-inl.h), called from decode_attention.cc.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/decode_quantized_attention.cc"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/decode/decode_driver-inl.h"
#include "cpu/decode/decode_entry-inl.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {

void StreamQuantizedTilesInPlace(const AttentionArgs& a, const AttentionPlan& plan,
                                 const WorkItem& item, int64_t k_first, int64_t tiles,
                                 int64_t key_end, const AttentionScratch& s) {
  if constexpr (kStreamTilesOnTarget) {
    StreamTilesInPlace</*kQuantized=*/true>(hn::ScalableTag<float>(), a, plan, item, k_first, tiles,
                                            key_end, s);
  }
}

void AdvanceQuantizedTileInPlace(const AttentionArgs& a, const AttentionPlan& plan,
                                 const WorkItem& item, const TileKeys& tile, int64_t key_end,
                                 const AttentionScratch& s) {
  if constexpr (kNativeF16) {
    AdvanceTileInPlace</*kQuantized=*/true>(hn::ScalableTag<float>(), a, plan, item, tile, key_end,
                                            s);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();
