// Bad calls to streamattn_mpi: whichever rank holds the bad argument, every rank returns the same
// status (the bad rank with the message naming the argument, the others with "rank R: " and
// that message), nothing is written, and the communicator is usable afterwards.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <string>
#include <vector>

#include "mpi_case.h"
#include "streamattn/streamattn_mpi.h"
#include "test_util.h"

namespace streamattn {
namespace mpi_testing {
namespace {

using testing_util::ScopedContext;

// A small well-formed call; tests break one piece of it on one rank.
struct SmallCall {
  static constexpr int64_t kBatch = 1, kSeq = 3, kHeads = 2, kDim = 8, kKeys = 5;
  std::vector<float> q, k, v, out, lse, sinks, mask;
  sattn_tensor q_view, k_view, v_view, out_view, lse_view, sinks_view, mask_view;
  sattn_attention_options options{};

  SmallCall()
      : q(kBatch * kSeq * kHeads * kDim, 0.25f),
        k(kBatch * kKeys * kHeads * kDim, 0.5f),
        v(kBatch * kKeys * kHeads * kDim, 1.0f),
        out(kBatch * kSeq * kHeads * kDim, -7.0f),
        lse(kBatch * kHeads * kSeq, -7.0f),
        sinks(kHeads, 0.0f),
        mask(kHeads * kSeq * kKeys, 0.0f) {
    const int64_t qs[4] = {kBatch, kSeq, kHeads, kDim}, ks[4] = {kBatch, kKeys, kHeads, kDim};
    const int64_t ls[3] = {kBatch, kHeads, kSeq}, hs[1] = {kHeads};
    const int64_t ms[4] = {1, kHeads, kSeq, kKeys};
    q_view = sattn_tensor_contiguous(q.data(), SATTN_DTYPE_F32, 4, qs);
    k_view = sattn_tensor_contiguous(k.data(), SATTN_DTYPE_F32, 4, ks);
    v_view = sattn_tensor_contiguous(v.data(), SATTN_DTYPE_F32, 4, ks);
    out_view = sattn_tensor_contiguous(out.data(), SATTN_DTYPE_F32, 4, qs);
    lse_view = sattn_tensor_contiguous(lse.data(), SATTN_DTYPE_F32, 3, ls);
    sinks_view = sattn_tensor_contiguous(sinks.data(), SATTN_DTYPE_F32, 1, hs);
    mask_view = sattn_tensor_contiguous(mask.data(), SATTN_DTYPE_F32, 4, ms);
    options.struct_size = sizeof(options);
  }

  sattn_status Run(sattn_context* ctx) {
    return sattn_mpi_attention(ctx, MPI_COMM_WORLD, &q_view, &k_view, &v_view, &out_view, &lse_view,
                               &options);
  }
  bool Untouched() const {
    for (float x : out) {
      if (x != -7.0f) return false;
    }
    for (float x : lse) {
      if (x != -7.0f) return false;
    }
    return true;
  }
};

// Every rank got `want`; the bad rank's message contains `needle`, the others' say which rank.
void ExpectAgreedFailure(sattn_status got, sattn_status want, int bad_rank, const char* needle,
                         const SmallCall& call) {
  EXPECT_EQ(got, want) << sattn_mpi_last_error();
  const std::string message = sattn_mpi_last_error();
  EXPECT_NE(message.find(needle), std::string::npos) << message;
  if (bad_rank >= 0 && Rank() != bad_rank) {
    EXPECT_EQ(message.find("rank " + std::to_string(bad_rank) + ": "), 0u) << message;
  }
  EXPECT_TRUE(call.Untouched());
}

// Whatever failed, the next call on the same communicator works.
void ExpectNextCallWorks(sattn_context* ctx) {
  SmallCall good;
  EXPECT_EQ(good.Run(ctx), SATTN_OK) << sattn_mpi_last_error();
  EXPECT_FALSE(good.Untouched());
}

TEST(MpiErrors, BadShardOnOneRankFailsEveryRank) {
  ScopedContext ctx(1);
  const int bad = Size() - 1;
  SmallCall call;
  if (Rank() == bad) call.k_view.shape[3] = 4;  // head_dim mismatch, found by sattn_attention
  ExpectAgreedFailure(call.Run(ctx.get()), SATTN_ERR_INVALID_ARGUMENT, bad, "k.shape[3]", call);
  ExpectNextCallWorks(ctx.get());
}

TEST(MpiErrors, MissingValueShardIsNamed) {
  ScopedContext ctx(1);
  SmallCall call;
  const sattn_status status = sattn_mpi_attention(
      ctx.get(), MPI_COMM_WORLD, &call.q_view, &call.k_view, Rank() == 0 ? nullptr : &call.v_view,
      &call.out_view, &call.lse_view, &call.options);
  ExpectAgreedFailure(status, SATTN_ERR_INVALID_ARGUMENT, 0, "v_shard must both be NULL", call);
  ExpectNextCallWorks(ctx.get());
}

TEST(MpiErrors, AlibiIsUnsupported) {
  ScopedContext ctx(1);
  SmallCall call;
  call.options.alibi_slopes = &call.sinks_view;
  ExpectAgreedFailure(call.Run(ctx.get()), SATTN_ERR_UNSUPPORTED, 0, "alibi", call);
}

TEST(MpiErrors, PackedBatchesAreUnsupported) {
  ScopedContext ctx(1);
  SmallCall call;
  call.options.cu_seqlens_q = &call.sinks_view;  // refused before it is read
  ExpectAgreedFailure(call.Run(ctx.get()), SATTN_ERR_UNSUPPORTED, 0, "cu_seqlens_q", call);
}

TEST(MpiErrors, OptionsThatDifferBetweenRanks) {
  if (Size() == 1) GTEST_SKIP() << "needs two ranks";
  ScopedContext ctx(1);
  SmallCall call;
  call.options.causal = Rank() == 1;
  ExpectAgreedFailure(call.Run(ctx.get()), SATTN_ERR_INVALID_ARGUMENT, -1, "rank 1: options", call);
}

TEST(MpiErrors, BadOutputAndMaskOnOneRank) {
  ScopedContext ctx(1);
  const int bad = Size() / 2;
  SmallCall out_call;
  if (Rank() == bad) out_call.out_view.strides[2] = 0;  // writes one element twice
  ExpectAgreedFailure(out_call.Run(ctx.get()), SATTN_ERR_INVALID_ARGUMENT, bad, "overlap itself",
                      out_call);
  SmallCall mask_call;
  mask_call.options.mask = &mask_call.mask_view;
  if (Rank() == bad) mask_call.mask_view.shape[2] = 2;  // not seq_q rows
  ExpectAgreedFailure(mask_call.Run(ctx.get()), SATTN_ERR_INVALID_ARGUMENT, bad,
                      "options->mask.shape[2]", mask_call);
  SmallCall sinks_call;  // applied by rank 0 only, so checked there even for an empty shard
  sinks_call.options.sinks = &sinks_call.sinks_view;
  sinks_call.sinks[1] = NAN;
  ExpectAgreedFailure(sinks_call.Run(ctx.get()), SATTN_ERR_INVALID_ARGUMENT, 0, "sinks[1]",
                      sinks_call);
  ExpectNextCallWorks(ctx.get());
}

TEST(MpiErrors, DecodeRootArguments) {
  ScopedContext ctx(1);
  SmallCall call;
  const int root = Size() - 1;
  const bool is_root = Rank() == root;
  sattn_status status =
      sattn_mpi_decode(ctx.get(), MPI_COMM_WORLD, root, is_root ? &call.q_view : nullptr,
                       &call.k_view, &call.v_view, nullptr, nullptr, &call.options);
  ExpectAgreedFailure(status, SATTN_ERR_INVALID_ARGUMENT, root, "out must not be NULL", call);
  status = sattn_mpi_decode(ctx.get(), MPI_COMM_WORLD, Size(), &call.q_view, &call.k_view,
                            &call.v_view, &call.out_view, &call.lse_view, &call.options);
  ExpectAgreedFailure(status, SATTN_ERR_INVALID_ARGUMENT, -1, "root=", call);
  ExpectNextCallWorks(ctx.get());
}

TEST(MpiErrors, NullContextOnOneRank) {
  ScopedContext ctx(1);
  SmallCall call;
  const sattn_status status = sattn_mpi_attention(Rank() == 0 ? nullptr : ctx.get(), MPI_COMM_WORLD,
                                                  &call.q_view, &call.k_view, &call.v_view,
                                                  &call.out_view, &call.lse_view, &call.options);
  ExpectAgreedFailure(status, SATTN_ERR_INVALID_ARGUMENT, 0, "ctx must not be NULL", call);
}

TEST(MpiTimings, PartsAddUpToTheWhole) {
  ScopedContext ctx(1);
  SmallCall call;
  ASSERT_EQ(call.Run(ctx.get()), SATTN_OK) << sattn_mpi_last_error();
  sattn_mpi_timings t{};
  t.struct_size = sizeof(t);
  ASSERT_EQ(sattn_mpi_last_timings(&t), SATTN_OK);
  const double parts = t.exchange + t.compute + t.agree + t.reduce + t.unpack;
  for (double x : {t.exchange, t.compute, t.agree, t.reduce, t.unpack}) EXPECT_GE(x, 0.0);
  EXPECT_GT(t.total, 0.0);
  EXPECT_LE(parts, t.total * 1.0001 + 1e-6);
  EXPECT_EQ(t.struct_size, sizeof(t));
}

}  // namespace
}  // namespace mpi_testing
}  // namespace streamattn
