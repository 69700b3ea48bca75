// sattn_attention on the CPU: the plan (attention_plan-inl.h: which driver, what shapes), the
// work items (sequence x kv heads x block of query positions, the heaviest causal blocks
// first), each run by its driver on a worker's scratch: prefill/prefill_driver-inl.h, or
// decode/decode_driver-inl.h compiled in decode_attention.cc (decode/decode_entry-inl.h).
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
#include "cpu/decode/decode_entry-inl.h"
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
//
// A padded batch has `blocks` position blocks in every sequence and enumerates them by
// arithmetic. A packed one (AttentionArgs::q_offsets) cuts each sequence's own SeqQ(b) queries
// into blocks, so a tile never spans two sequences and a short sequence costs its blocks only;
// `order` then lists (sequence, block) pairs, the heaviest first, so that one long prompt's
// blocks start before thirty short ones' and the pool's greedy scheduling balances them.
struct WorkSplit {
  int64_t blocks;       // padded: blocks of query positions per sequence; packed: in all
  int64_t head_groups;  // work items per position block: kv heads / plan.heads
  int64_t items;
  int64_t chunks = 1;  // per work item
  int64_t chunk_keys = 0;
  const PackedBlock* order = nullptr;  // packed: the blocks, heaviest first

  // Work item `index` (over all keys; chunks are cut from it).
  WorkItem Item(const AttentionArgs& a, const AttentionPlan& plan, int64_t index) const {
    if (order != nullptr) {
      const int64_t b = order[index / head_groups].b, pos0 = order[index / head_groups].pos0;
      return WorkItem{b,      index % head_groups * plan.heads,
                      pos0,   std::min(a.SeqQ(b), pos0 + plan.positions),
                      0,      a.seq_k,
                      nullptr};
    }
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

// The work of positions [pos0, pos1) of sequence b: query rows times the keys they see (the
// visible ranges grow linearly inside a block, so the two ends' mean is their average), plus
// one tile's worth for the fixed costs of an item.
int64_t BlockCost(const AttentionArgs& a, int64_t b, int64_t pos0, int64_t pos1) {
  const int64_t seq_k = a.SeqK(b);
  auto seen = [&](int64_t i) {
    const KeyRange r = VisibleKeys(a, b, i, seq_k);
    return r.empty() ? int64_t{0} : r.hi - r.lo + 1;
  };
  return (pos1 - pos0) * ((seen(pos0) + seen(pos1 - 1)) / 2 + static_cast<int64_t>(kKeysPerTile));
}

// Fills *order with every packed sequence's position blocks, heaviest first (ties in sequence
// and position order: the order depends on the problem only, though no output depends on it).
void OrderPackedBlocks(const AttentionArgs& a, const AttentionPlan& plan,
                       Vector<PackedBlock>* order) {
  int64_t blocks = 0;
  for (int64_t b = 0; b < a.batch; ++b) blocks += (a.SeqQ(b) + plan.positions - 1) / plan.positions;
  order->clear();
  order->reserve(static_cast<size_t>(blocks));  // one allocation, kept across calls
  for (int64_t b = 0; b < a.batch; ++b) {
    for (int64_t pos0 = 0; pos0 < a.SeqQ(b); pos0 += plan.positions) {
      order->push_back(
          PackedBlock{BlockCost(a, b, pos0, std::min(a.SeqQ(b), pos0 + plan.positions)), b, pos0});
    }
  }
  // std::sort allocates nothing (stable_sort would, outside the context's allocator).
  std::sort(order->begin(), order->end(), [](const PackedBlock& x, const PackedBlock& y) {
    if (x.cost != y.cost) return x.cost > y.cost;
    return x.b != y.b ? x.b < y.b : x.pos0 < y.pos0;
  });
}

WorkSplit SplitWork(const AttentionArgs& a, const AttentionPlan& plan, Vector<PackedBlock>* order) {
  WorkSplit w;
  w.head_groups = a.heads_kv / plan.heads;
  if (a.q_offsets.empty()) {
    w.blocks = (a.seq_q + plan.positions - 1) / plan.positions;
    w.items = a.batch * w.head_groups * w.blocks;
  } else {
    OrderPackedBlocks(a, plan, order);
    w.blocks = static_cast<int64_t>(order->size());
    w.order = order->data();
    w.items = w.blocks * w.head_groups;
  }
  if (w.items < kMinWorkItems) {
    const int64_t most = std::max<int64_t>(1, a.seq_k / kMinKeysPerChunk);
    w.chunks = std::min(
        most, (kMinWorkItems + std::max<int64_t>(w.items, 1) - 1) / std::max<int64_t>(w.items, 1));
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
                    WorkerScratch* scratch, Vector<float>* partials, Vector<PackedBlock>* order,
                    const RunItem& run_item) {
  const AttentionScratchLayout layout = MakeAttentionScratchLayout(plan);
  SATTN_RETURN_IF_ERROR(scratch->Reserve(pool->NumWorkers(), layout.bytes));
  const WorkSplit w = SplitWork(a, plan, order);
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
                    WorkerScratch* scratch, Vector<float>* partials, Vector<PackedBlock>* order) {
  const hn::ScalableTag<float> d;
  const AttentionPlan plan = MakeAttentionPlan(d, a);
  if (plan.decode()) {
    return RunWorkItems(d, a, plan, pool, scratch, partials, order,
                        [&](const WorkItem& item, const AttentionScratch& s) {
                          RunDecodeWorkItem(a, plan, item, s);
                        });
  }
  Status status;
  WithPrefillTiles(a, cpu_kernel, [&](auto tiles) {
    status = RunWorkItems(d, a, plan, pool, scratch, partials, order,
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
  return HWY_DYNAMIC_DISPATCH(RunAttention)(args, cpu_kernel_, pool_, scratch_, &split_partials_,
                                            &work_order_);
}

const char* PrefillTileKernelName(DType dtype, int32_t cpu_kernel) {
  return HWY_DYNAMIC_DISPATCH(PrefillTileKernelName)(dtype, cpu_kernel);
}

}  // namespace streamattn
#endif  // HWY_ONCE
