// sattn_attention on the CPU: partition into work items (batch x kv head x block of query
// positions, the heaviest causal blocks first), reserve scratch, run flash_forward-inl.h.
// Work items write disjoint outputs and never depend on which thread runs them, so results are
// bitwise identical for any thread count.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/flash_forward.cc"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/flash_forward-inl.h"
// clang-format on
#include "cpu/cpu_backend.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {

Status FlashForward(const AttentionArgs& a, ThreadPool* pool, WorkerScratch* scratch) {
  const hn::ScalableTag<float> d;
  const FlashConfig cfg = MakeFlashConfig(d, a);
  SATTN_RETURN_IF_ERROR(scratch->Reserve(pool->NumWorkers(), cfg.total_floats * sizeof(float)));
  const int64_t blocks = (a.seq_q + cfg.positions - 1) / cfg.positions;
  pool->ParallelFor(a.batch * a.heads_kv * blocks, [&](int64_t task, int worker) {
    // Later query blocks see more keys under a causal mask: start them first.
    const int64_t block = blocks - 1 - task % blocks;
    const int64_t head = task / blocks % a.heads_kv;
    const int64_t b = task / blocks / a.heads_kv;
    const int64_t pos0 = block * cfg.positions;
    FlashForwardWorkItem(d, a, cfg, b, head, pos0, std::min(a.seq_q, pos0 + cfg.positions),
                         scratch->Get<float>(worker));
  });
  return Status();
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace streamattn {

HWY_EXPORT(FlashForward);

Status CpuBackend::Attention(const AttentionArgs& args) {
  return HWY_DYNAMIC_DISPATCH(FlashForward)(args, pool_, scratch_);
}

}  // namespace streamattn
#endif  // HWY_ONCE
