// sattn_attention on the CPU: partition into work items (sequence x kv head x block of query
// positions, the heaviest causal blocks first) and run flash_forward-inl.h on them.
//
// Split-KV (Flash-Decoding): when that gives too few work items to keep many cores busy
// (decoding: one position block per sequence and kv head), the keys are also cut into chunks,
// each chunk a work item writing a partial state (m, l, O); a second pass merges each item's
// chunks in order with the seed's merge. The number of chunks depends on the problem only, so
// every output byte is the same for any thread count.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/flash_forward.cc"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/flash_forward-inl.h"
// clang-format on
#include <vector>

#include "cpu/cpu_backend.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {

// Enough work items for 16 cores' worth of balance (the phones and boards this library runs
// on have 4 to 8), and chunks of at least this many keys. Each chunk has fixed costs (packing
// Q, a first tile that nothing requested ahead, writing and merging its state), which 64 work
// items (the earlier balance) made a few percent of a long cache: on a 2-core host, timed call
// for call in one process, one sequence of 32768 keys (h32/8 d128) decoded 2-8% faster in 16
// chunks of 2048 than in 64 of 512 (f16, bf16, f32 alike; h8/8 too), 131072 keys 4% faster;
// batch 8 was the same in 2 chunks per sequence as in 8.
constexpr int64_t kMinWorkItems = 16;
constexpr int64_t kMinKeysPerChunk = 512;

Status FlashForward(const AttentionArgs& a, ThreadPool* pool, WorkerScratch* scratch,
                    Vector<float>* partials) {
  const hn::ScalableTag<float> d;
  const FlashConfig cfg = MakeFlashConfig(d, a);
  SATTN_RETURN_IF_ERROR(scratch->Reserve(pool->NumWorkers(), cfg.total_floats * sizeof(float)));
  const int64_t blocks = (a.seq_q + cfg.positions - 1) / cfg.positions;
  const int64_t head_groups = a.heads_kv / cfg.heads;
  const int64_t items = a.batch * head_groups * blocks;
  int64_t chunks = 1;
  if (items < kMinWorkItems) {
    const int64_t most = std::max<int64_t>(1, a.seq_k / kMinKeysPerChunk);
    chunks = std::min(most, (kMinWorkItems + items - 1) / items);
  }
  const int64_t chunk_keys = static_cast<int64_t>(
      RoundUp(static_cast<size_t>((a.seq_k + chunks - 1) / chunks), kKeysPerTile));
  chunks = (a.seq_k + chunk_keys - 1) / chunk_keys;

  auto item_of = [&](int64_t index) {
    // Later query blocks see more keys under a causal mask: start them first.
    const int64_t block = blocks - 1 - index % blocks;
    const int64_t pos0 = block * cfg.positions;
    return WorkItem{index / blocks / head_groups,
                    index / blocks % head_groups * cfg.heads,
                    pos0,
                    std::min(a.seq_q, pos0 + cfg.positions),
                    0,
                    a.seq_k,
                    nullptr};
  };
  if (chunks == 1) {
    pool->ParallelFor(items, [&](int64_t index, int worker) {
      FlashForwardWorkItem(d, a, cfg, item_of(index), scratch->Get<float>(worker));
    });
    return Status();
  }
  partials->resize(static_cast<size_t>(items * chunks) * cfg.PartialFloats());
  pool->ParallelFor(items * chunks, [&](int64_t task, int worker) {
    WorkItem item = item_of(task / chunks);
    const int64_t chunk = task % chunks;
    item.chunk_begin = chunk * chunk_keys;
    item.chunk_end = std::min(a.seq_k, item.chunk_begin + chunk_keys);
    item.partial = partials->data() + task * cfg.PartialFloats();
    FlashForwardWorkItem(d, a, cfg, item, scratch->Get<float>(worker));
  });
  pool->ParallelFor(items, [&](int64_t index, int worker) {
    const float* first = partials->data() + index * chunks * cfg.PartialFloats();
    MergeSplitsAndFinish(d, a, cfg, item_of(index), first, chunks,
                         scratch->Get<float>(worker) + cfg.tmp);
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
  return HWY_DYNAMIC_DISPATCH(FlashForward)(args, pool_, scratch_, &split_partials_);
}

}  // namespace streamattn
#endif  // HWY_ONCE
