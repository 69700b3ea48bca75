// Packed variable-length batches (sattn_attention_options.cu_seqlens_q, cu_seqlens_k) on every
// SIMD target: each sequence is also run as its own call (an AttentionCall of batch 1), the
// packed call is assembled from those calls' inputs, and every sequence's slice of the packed
// out and lse is judged by the oracle on that sequence alone, and compared byte for byte with
// its own call's where that call takes the same plan. Keys packed, paged, or a dense cache per
// sequence; prefill and decode shapes, GQA, every option but the mask, sequences of 0 queries
// or 0 keys, an I8 cache, 1 and 2 threads.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "attention_case.h"
#include "gtest/gtest.h"
#include "hwy/tests/hwy_gtest.h"
#include "per_target_api_test.h"

namespace streamattn {
namespace {

using testing_util::AttentionCall;
using testing_util::AttentionCase;
using testing_util::HostTensor;
using testing_util::ScopedContext;

// How the packed call holds its keys.
enum class Keys { kPacked, kPaged, kDensePerSequence };

struct PackedCase {
  std::vector<int64_t> q_lens, k_lens;
  Keys keys = Keys::kPacked;
  AttentionCase options;  // shapes, dtypes and options (batch, seq_q, seq_k set per sequence)
};

// Sequence b's own call: batch 1, its own lengths (0 keys: one key hidden by seqused_k = 0).
AttentionCase SequenceCase(const PackedCase& p, size_t b) {
  AttentionCase c = p.options;
  c.batch = 1;
  c.seq_q = p.q_lens[b];
  const int64_t keys = p.k_lens[b];
  c.seq_k = std::max<int64_t>(keys, 1);
  if (p.keys == Keys::kPaged) {
    c.seq_k = (c.seq_k + c.page_size - 1) / c.page_size * c.page_size;
  } else {
    c.page_size = 0;
  }
  if (c.seq_k != keys) c.seqused_k = {keys};
  c.seed = p.options.seed * 1000 + b;
  return c;
}

// Copies element rows [0, rows) of dimension 1 of `from` (batch `fb`) to rows [at, at + rows)
// of `to` (batch `tb`), every head and channel.
void CopyRows(const HostTensor& from, int64_t fb, int64_t rows, HostTensor* to, int64_t tb,
              int64_t at) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < from.shape()[2]; ++h)
      for (int64_t d = 0; d < from.shape()[3]; ++d)
        to->Set({tb, at + r, h, d}, from.Get({fb, r, h, d}));
}

// The packed call assembled from the sequences' own calls.
struct PackedCall {
  std::vector<AttentionCase> cases;
  std::vector<std::unique_ptr<AttentionCall>> calls;
  std::vector<int64_t> q_starts;
  HostTensor q, k, v, k_scales, out, lse, cu_q, cu_k, block_table, seqused_k;
  sattn_tensor q_view, k_view, v_view, k_scales_view, out_view, lse_view, cu_q_view, cu_k_view,
      block_table_view, seqused_k_view;
  sattn_attention_options options{};

  explicit PackedCall(const PackedCase& p) {
    const int64_t batch = static_cast<int64_t>(p.q_lens.size());
    int64_t total_q = 0, total_k = 0, pages = 0, max_pages = 1, max_k = 1;
    cu_q = HostTensor(SATTN_DTYPE_I32, {batch + 1});
    cu_k = HostTensor(SATTN_DTYPE_I32, {batch + 1});
    seqused_k = HostTensor(SATTN_DTYPE_I32, {batch});
    std::vector<int64_t> k_starts, page_starts;
    for (int64_t b = 0; b < batch; ++b) {
      cases.push_back(SequenceCase(p, static_cast<size_t>(b)));
      calls.push_back(std::make_unique<AttentionCall>(cases.back()));
      cu_q.Set({b}, static_cast<double>(total_q));
      cu_k.Set({b}, static_cast<double>(total_k));
      seqused_k.Set({b}, static_cast<double>(p.k_lens[b]));
      q_starts.push_back(total_q);
      k_starts.push_back(total_k);
      page_starts.push_back(pages);
      total_q += p.q_lens[b];
      total_k += p.k_lens[b];
      max_k = std::max(max_k, cases.back().seq_k);
      if (p.keys == Keys::kPaged) {
        pages += calls.back()->k.shape()[0];
        max_pages = std::max(max_pages, calls.back()->block_table.shape()[1]);
      }
    }
    cu_q.Set({batch}, static_cast<double>(total_q));
    cu_k.Set({batch}, static_cast<double>(total_k));
    const AttentionCase& c = p.options;
    const int64_t dim_v = c.head_dim_v ? c.head_dim_v : c.head_dim;
    const AttentionCall& first = *calls[0];
    q = HostTensor(c.q_dtype, {1, total_q, c.heads_q, c.head_dim});
    out = HostTensor(c.out_dtype, {1, total_q, c.heads_q, dim_v});
    lse = HostTensor(SATTN_DTYPE_F32, {1, c.heads_q, total_q});
    out.FillBytes(0xEE);
    lse.FillBytes(0xEE);
    std::vector<int64_t> key_shape{1, total_k, c.heads_kv, 0};
    if (p.keys == Keys::kPaged) key_shape = {pages, c.page_size, c.heads_kv, 0};
    if (p.keys == Keys::kDensePerSequence) key_shape = {batch, max_k, c.heads_kv, 0};
    auto shaped = [&](const HostTensor& like, int64_t dim) {
      std::vector<int64_t> s = key_shape;
      s[3] = dim;
      HostTensor t(like.dtype(), s);
      t.FillBytes(0);
      return t;
    };
    k = shaped(first.k, c.head_dim);
    v = shaped(first.v, dim_v);
    const bool group_scales = c.k_format == SATTN_DTYPE_I8;
    if (group_scales) k_scales = shaped(first.k_scales, first.k_scales.shape()[3]);
    block_table = HostTensor(SATTN_DTYPE_I32, {batch, max_pages});
    block_table.FillBytes(0);
    for (int64_t b = 0; b < batch; ++b) {
      AttentionCall& call = *calls[b];
      // The options the packed call shares: the first sequence's slopes and sinks.
      call.alibi.mutable_bytes() = first.alibi.bytes();
      call.sinks.mutable_bytes() = first.sinks.bytes();
      CopyRows(call.q, 0, p.q_lens[b], &q, 0, q_starts[b]);
      if (p.keys == Keys::kPaged) {
        const int64_t own = call.k.shape()[0];
        for (int64_t page = 0; page < own; ++page) {
          for (HostTensor* t : {&k, &v}) {
            const HostTensor& from = t == &k ? call.k : call.v;
            for (int64_t r = 0; r < c.page_size; ++r)
              for (int64_t h = 0; h < c.heads_kv; ++h)
                for (int64_t d = 0; d < from.shape()[3]; ++d)
                  t->Set({page_starts[b] + page, r, h, d}, from.Get({page, r, h, d}));
          }
        }
        for (int64_t j = 0; j < call.block_table.shape()[1]; ++j) {
          const double entry = call.block_table.Get({0, j});
          block_table.Set({b, j}, entry < 0 ? entry : entry + page_starts[b]);
        }
        continue;
      }
      const int64_t tb = p.keys == Keys::kPacked ? 0 : b;
      const int64_t at = p.keys == Keys::kPacked ? k_starts[b] : 0;
      CopyRows(call.k, 0, p.k_lens[b], &k, tb, at);
      CopyRows(call.v, 0, p.k_lens[b], &v, tb, at);
      if (group_scales) CopyRows(call.k_scales, 0, p.k_lens[b], &k_scales, tb, at);
    }
    options = first.options;  // scale, causal, window, softcap, f32_pv; views replaced below
    q_view = q.view(), k_view = k.view(), v_view = v.view(), out_view = out.view();
    lse_view = lse.view(), cu_q_view = cu_q.view(), cu_k_view = cu_k.view();
    block_table_view = block_table.view(), seqused_k_view = seqused_k.view();
    options.alibi_slopes = c.alibi ? &calls[0]->alibi_view : nullptr;
    options.sinks = c.sinks ? &calls[0]->sinks_view : nullptr;
    options.cu_seqlens_q = &cu_q_view;
    options.cu_seqlens_k = p.keys == Keys::kPacked ? &cu_k_view : nullptr;
    options.block_table = p.keys == Keys::kPaged ? &block_table_view : nullptr;
    options.seqused_k = p.keys == Keys::kPacked ? nullptr : &seqused_k_view;
    if (group_scales) {
      k_scales_view = k_scales.view();
      options.k_scales = &k_scales_view;
    }
  }

  sattn_status Run(sattn_context* ctx) const {
    return sattn_attention(ctx, &q_view, &k_view, &v_view, &out_view, &lse_view, &options);
  }

  std::vector<uint8_t> Bytes() const {
    std::vector<uint8_t> bytes = out.bytes();
    bytes.insert(bytes.end(), lse.bytes().begin(), lse.bytes().end());
    return bytes;
  }
};

// Runs the packed call on 1 and 2 threads (the same bytes), then judges each sequence.
void ExpectPackedMatches(const PackedCase& p) {
  PackedCall packed(p);
  SCOPED_TRACE(p.options.Describe());
  {
    ScopedContext one(1);
    ASSERT_EQ(packed.Run(one.get()), SATTN_OK) << sattn_last_error();
  }
  const std::vector<uint8_t> serial = packed.Bytes();
  {
    ScopedContext two(2);
    ASSERT_EQ(packed.Run(two.get()), SATTN_OK) << sattn_last_error();
  }
  EXPECT_EQ(packed.Bytes(), serial) << "the packed call's bytes depend on the thread count";
  ScopedContext ctx(2);
  for (size_t b = 0; b < packed.calls.size(); ++b) {
    if (p.q_lens[b] == 0) continue;  // nothing to judge: no rows
    AttentionCall& own = *packed.calls[b];
    const AttentionCase& c = packed.cases[b];
    ASSERT_EQ(own.Run(ctx.get()), SATTN_OK) << sattn_last_error();
    const std::vector<uint8_t> own_out = own.out.bytes(), own_lse = own.lse.bytes();
    // The packed call's rows of sequence b, into the own call's outputs for the oracle.
    const int64_t start = packed.q_starts[b];
    for (int64_t i = 0; i < c.seq_q; ++i)
      for (int64_t h = 0; h < c.heads_q; ++h)
        for (int64_t d = 0; d < own.out.shape()[3]; ++d)
          own.out.Set({0, i, h, d}, packed.out.Get({0, start + i, h, d}));
    for (int64_t h = 0; h < c.heads_q; ++h)
      for (int64_t i = 0; i < c.seq_q; ++i)
        own.lse.Set({0, h, i}, packed.lse.Get({0, h, start + i}));
    const testing_util::AttentionErrors e = testing_util::CompareWithOracle(c, own);
    EXPECT_LE(e.out, testing_util::OutTolerance(c)) << "sequence " << b << ": " << c.Describe();
    EXPECT_LE(e.lse, 2e-5) << "sequence " << b << ": " << c.Describe();
    // Tiles and split-KV chunks are cut per sequence by the same rules, so where the
    // sequence's own call takes the packed call's plan the bytes are its own call's. The plan
    // is the longest sequence's; a shorter own call has another one when its queries are fewer
    // than a prefill work item's positions (kTargetRows = 384 rows a kv head,
    // attention_plan-inl.h), which then also changes the keys a tile holds.
    const int64_t longest = *std::max_element(p.q_lens.begin(), p.q_lens.end());
    const int64_t positions =
        std::min<int64_t>(longest, std::max<int64_t>(1, 384 / (c.heads_q / c.heads_kv)));
    if (c.seq_q < positions) continue;
    EXPECT_EQ(own.out.bytes(), own_out) << "sequence " << b << ": " << c.Describe();
    EXPECT_EQ(own.lse.bytes(), own_lse) << "sequence " << b << ": " << c.Describe();
  }
}

PackedCase Prefill(Keys keys) {
  PackedCase p;
  // A sequence longer than a work item's 384 rows and one tile, short ones, an empty query and
  // an empty cache; every sequence's keys at least its queries (causal needs no more).
  p.q_lens = {400, 17, 0, 1, 33, 5};
  p.k_lens = {460, 17, 9, 0, 40, 130};
  p.keys = keys;
  AttentionCase& c = p.options;
  c.heads_q = 4, c.heads_kv = 2, c.head_dim = 32;
  c.q_dtype = c.kv_dtype = SATTN_DTYPE_F16;
  c.causal = true;
  c.page_size = 16;
  c.seed = 3;
  return p;
}

class PackedBatchTest : public testing_util::PerTargetApiTest {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(PackedBatchTest);

TEST_P(PackedBatchTest, PrefillWithPackedPagedAndDenseKeys) {
  for (Keys keys : {Keys::kPacked, Keys::kPaged, Keys::kDensePerSequence}) {
    ExpectPackedMatches(Prefill(keys));
  }
}

TEST_P(PackedBatchTest, EveryOptionButTheMask) {
  for (int option = 0; option < 6; ++option) {
    PackedCase p = Prefill(option % 2 ? Keys::kPaged : Keys::kPacked);
    AttentionCase& c = p.options;
    c.seed = 10 + option;
    c.heads_q = 8;  // GQA 4
    switch (option) {
      case 0:
        c.has_window = true, c.window_left = 20, c.window_right = 3;
        break;
      case 1:
        c.softcap = 5.0f, c.causal = false;
        break;
      case 2:
        c.alibi = true;
        break;
      case 3:
        c.sinks = true;
        break;
      case 4:
        c.q_dtype = c.kv_dtype = SATTN_DTYPE_F32, c.out_dtype = SATTN_DTYPE_BF16;
        c.head_dim_v = 24;
        break;
      default:
        c.q_dtype = c.kv_dtype = SATTN_DTYPE_BF16, c.f32_pv = true, c.scale = 0.3f;
    }
    ExpectPackedMatches(p);
  }
}

TEST_P(PackedBatchTest, DecodeShapes) {
  // One to three queries per sequence against caches of very different lengths (long enough
  // to be cut into split-KV chunks in both the packed and the own call).
  for (Keys keys : {Keys::kPacked, Keys::kPaged}) {
    PackedCase p;
    p.q_lens = {1, 1, 1, 1};
    p.k_lens = {1300, 1, 0, 700};
    p.keys = keys;
    AttentionCase& c = p.options;
    c.heads_q = 8, c.heads_kv = 2, c.head_dim = 64;
    c.kv_dtype = SATTN_DTYPE_F16;
    c.causal = true, c.sinks = keys == Keys::kPaged;
    c.page_size = 32;
    c.seed = 21;
    ExpectPackedMatches(p);
  }
}

TEST_P(PackedBatchTest, QuantizedKeysWithPackedQueries) {
  PackedCase p = Prefill(Keys::kPacked);
  AttentionCase& c = p.options;
  c.q_dtype = SATTN_DTYPE_F32;
  c.k_format = SATTN_DTYPE_I8, c.k_group = 16;
  ExpectPackedMatches(p);
  p.keys = Keys::kDensePerSequence;
  ExpectPackedMatches(p);
}

TEST(PackedBatchApiTest, EmptySequencesOnly) {
  // Every sequence but one without queries; one without keys: its rows are 0 and -inf.
  PackedCase p;
  p.q_lens = {0, 3, 0};
  p.k_lens = {4, 0, 2};
  p.options.head_dim = 8;
  p.options.seed = 5;
  PackedCall packed(p);
  ScopedContext ctx(2);
  ASSERT_EQ(packed.Run(ctx.get()), SATTN_OK) << sattn_last_error();
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(packed.lse.Get({0, 0, i}), -INFINITY);
    for (int64_t d = 0; d < 8; ++d) EXPECT_EQ(packed.out.Get({0, i, 0, d}), 0.0);
  }
}

}  // namespace
}  // namespace streamattn
