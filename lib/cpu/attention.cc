// sattn_attention on the CPU: the plan (attention_plan-inl.h: which driver, what shapes), the
// work items (sequence x kv heads x block of query positions, the heaviest causal blocks
// first), each run by its driver on a worker's scratch: prefill/prefill_driver-inl.h or
// decode/decode_driver-inl.h.
//
// Split-KV (Flash-Decoding): when the work items are too few to keep many cores busy
// (decoding: one position block per sequence), the keys are also cut into chunks, each chunk a
// task writing a partial state (m, l, O); a second pass merges each item's chunks in order
// (MergeSplitsAndFinish). The number of chunks depends on the problem only, so every output
// byte is the same for any thread count.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/attention.cc"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/attention_plan-inl.h"
#include "cpu/attention_scratch-inl.h"
#include "cpu/decode/decode_driver-inl.h"
#include "cpu/prefill/prefill_driver-inl.h"
#include "cpu/prefill/tile_kernels-inl.h"
#include "cpu/work_item-inl.h"
// clang-format on
#include <algorithm>

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

// The call's work items and how each one's keys are cut into chunks.
struct WorkSplit {
  int64_t blocks;       // blocks of query positions per sequence
  int64_t head_groups;  // work items per position block: kv heads / plan.heads
  int64_t items;
  int64_t chunks = 1;  // per work item
  int64_t chunk_keys = 0;

  // Work item `index` (over all keys; chunks are cut from it).
  WorkItem Item(const AttentionArgs& a, const AttentionPlan& plan, int64_t index) const {
    // Later query blocks see more keys under a causal mask: start them first.
    const int64_t block = blocks - 1 - index % blocks;
    const int64_t pos0 = block * plan.positions;
    return WorkItem{index / blocks / head_groups,
                    index / blocks % head_groups * plan.heads,
                    pos0,
                    std::min(a.seq_q, pos0 + plan.positions),
                    0,
                    a.seq_k,
                    nullptr};
  }
};

WorkSplit SplitWork(const AttentionArgs& a, const AttentionPlan& plan) {
  WorkSplit w;
  w.blocks = (a.seq_q + plan.positions - 1) / plan.positions;
  w.head_groups = a.heads_kv / plan.heads;
  w.items = a.batch * w.head_groups * w.blocks;
  if (w.items < kMinWorkItems) {
    const int64_t most = std::max<int64_t>(1, a.seq_k / kMinKeysPerChunk);
    w.chunks = std::min(most, (kMinWorkItems + w.items - 1) / w.items);
  }
  w.chunk_keys = static_cast<int64_t>(
      RoundUp(static_cast<size_t>((a.seq_k + w.chunks - 1) / w.chunks), kKeysPerTile));
  w.chunks = (a.seq_k + w.chunk_keys - 1) / w.chunk_keys;
  return w;
}

// Runs every work item (every chunk of it, then the merge, under split-KV) through
// run_item(item, scratch) on the pool's workers.
template <class D, class RunItem>
Status RunWorkItems(D d, const AttentionArgs& a, const AttentionPlan& plan, ThreadPool* pool,
                    WorkerScratch* scratch, Vector<float>* partials, const RunItem& run_item) {
  const AttentionScratchLayout layout = MakeAttentionScratchLayout(plan);
  SATTN_RETURN_IF_ERROR(scratch->Reserve(pool->NumWorkers(), layout.bytes));
  const WorkSplit w = SplitWork(a, plan);
  auto bound = [&](int worker) { return layout.Bind(scratch->Get<unsigned char>(worker)); };
  if (w.chunks == 1) {
    return pool->ParallelFor(w.items, [&](int64_t index, int worker) {
      run_item(w.Item(a, plan, index), bound(worker));
    });
  }
  const size_t partial_floats = PartialFloats(plan);
  partials->resize(static_cast<size_t>(w.items * w.chunks) * partial_floats);
  SATTN_RETURN_IF_ERROR(pool->ParallelFor(w.items * w.chunks, [&](int64_t task, int worker) {
    WorkItem item = w.Item(a, plan, task / w.chunks);
    item.chunk_begin = task % w.chunks * w.chunk_keys;
    item.chunk_end = std::min(a.seq_k, item.chunk_begin + w.chunk_keys);
    item.partial = partials->data() + task * partial_floats;
    run_item(item, bound(worker));
  }));
  return pool->ParallelFor(w.items, [&](int64_t index, int worker) {
    const float* first = partials->data() + index * w.chunks * partial_floats;
    MergeSplitsAndFinish(d, a, plan, w.Item(a, plan, index), first, w.chunks, bound(worker).row);
  });
}

// The driver runs as the plan's path says (ChooseAttentionPath); prefill with the tile kernel
// chosen for this call (WithPrefillTiles) under the context's cpu_kernel.
Status RunAttention(const AttentionArgs& a, int32_t cpu_kernel, ThreadPool* pool,
                    WorkerScratch* scratch, Vector<float>* partials) {
  const hn::ScalableTag<float> d;
  const AttentionPlan plan = MakeAttentionPlan(d, a);
  if (plan.decode()) {
    return RunWorkItems(d, a, plan, pool, scratch, partials,
                        [&](const WorkItem& item, const AttentionScratch& s) {
                          DecodeWorkItem(d, a, plan, item, s);
                        });
  }
  Status status;
  WithPrefillTiles(a, cpu_kernel, [&](auto tiles) {
    status = RunWorkItems(d, a, plan, pool, scratch, partials,
                          [&](const WorkItem& item, const AttentionScratch& s) {
                            PrefillWorkItem<decltype(tiles)>(d, a, plan, item, s);
                          });
  });
  return status;
}

// The name of the tile kernel prefill runs for q, k and v of `dtype` under cpu_kernel, as
// WithPrefillTiles chooses it.
const char* PrefillTileKernelName(DType dtype, int32_t cpu_kernel) {
  AttentionArgs a;
  a.q.dtype = a.k.dtype = a.v.dtype = dtype;
  const char* name = "";
  WithPrefillTiles(a, cpu_kernel, [&](auto tiles) { name = decltype(tiles)::kName; });
  return name;
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace streamattn {

HWY_EXPORT(RunAttention);
HWY_EXPORT(PrefillTileKernelName);

Status CpuBackend::Attention(const AttentionArgs& args) {
  return HWY_DYNAMIC_DISPATCH(RunAttention)(args, cpu_kernel_, pool_, scratch_, &split_partials_);
}

const char* PrefillTileKernelName(DType dtype, int32_t cpu_kernel) {
  return HWY_DYNAMIC_DISPATCH(PrefillTileKernelName)(dtype, cpu_kernel);
}

}  // namespace streamattn
#endif  // HWY_ONCE
