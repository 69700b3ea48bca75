// Decoding's kernels for every Highway target (decode/decode_driver-inl.h), reached from
// attention.cc through RunDecodeWorkItem (decode/decode_entry-inl.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/decode_attention.cc"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/decode/decode_driver-inl.h"
#include "cpu/decode/decode_entry-inl.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {

void RunDecodeWorkItem(const AttentionArgs& a, const AttentionPlan& plan, const WorkItem& item,
                       const AttentionScratch& s) {
  DecodeWorkItem(hn::ScalableTag<float>(), a, plan, item, s);
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();
