// libFuzzer target: sattn_merge_states with a fuzzer-chosen number of parts (0 included),
// dtypes per part, layouts, in-place merges into a part, empty parts (lse = -inf, whose o must
// never be read: it holds NaN), data and malformed details, on a chosen SIMD target. Plain data
// is judged against the merge in double.
#include <cmath>
#include <cstdint>
#include <vector>

#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace streamattn::fuzz;  // NOLINT
  FuzzedDataProvider in(data, size);
  sattn_context* ctx = PickContextAndTarget(in);
  const uint64_t seed = in.ConsumeIntegral<uint64_t>();
  int32_t num_parts = in.ConsumeIntegralInRange<int32_t>(0, 6);
  if (in.ConsumeIntegralInRange<int>(0, 31) == 0)
    num_parts = in.ConsumeIntegralInRange<int32_t>(-3, 40);
  const int64_t batch = in.ConsumeIntegralInRange<int64_t>(1, 3);
  const int64_t seq = in.ConsumeIntegralInRange<int64_t>(1, 20);
  const int64_t heads = in.ConsumeIntegralInRange<int64_t>(1, 6);
  const int64_t dim = in.ConsumeIntegralInRange<int64_t>(1, 300);
  if (batch * seq * heads * dim * std::max(num_parts, 1) > 2'000'000) return 0;
  const int r = in.ConsumeIntegralInRange<int>(0, 9);
  const Fill fill = r < 6 ? Fill::kUniform : r < 9 ? Fill::kSpecial : Fill::kBytes;
  const int parts = std::max(num_parts, 0);

  std::vector<FuzzTensor> o(parts), lse(parts);
  std::vector<sattn_tensor> o_views(parts), lse_views(parts);
  bool judge = fill == Fill::kUniform;
  std::mt19937_64 rng(seed);
  for (int i = 0; i < parts; ++i) {
    o[i].Make(in, PickFloatDType(in), {batch, seq, heads, dim}, false);
    lse[i].Make(in, in.ConsumeIntegralInRange<int>(0, 15) ? SATTN_DTYPE_F32 : PickFloatDType(in),
                {batch, heads, seq}, false);
    o[i].FillValues(fill, seed + 2 * i);
    lse[i].FillValues(fill, seed + 2 * i + 1);
    judge = judge && !o[i].mutated() && !lse[i].mutated();
    // Empty parts: lse = -inf and an o that must never be read.
    const int empty = in.ConsumeIntegralInRange<int>(0, 3);  // quarters of the rows
    if (judge && empty > 0 && lse[i].view().dtype == SATTN_DTYPE_F32) {
      lse[i].ForEach([&](const int64_t* at) {
        if (static_cast<int>(rng() % 4) >= empty) return;
        lse[i].Set(at, -INFINITY);
        for (int64_t d = 0; d < dim; ++d) {
          const int64_t oi[4] = {at[0], at[2], at[1], d};
          o[i].Set(oi, NAN);
        }
      });
    }
    o_views[i] = o[i].view();
    lse_views[i] = lse[i].view();
  }
  FuzzTensor out, lse_out;
  const int in_place = parts > 0 && in.ConsumeIntegralInRange<int>(0, 5) == 0
                           ? in.ConsumeIntegralInRange<int>(0, parts - 1)
                           : -1;
  if (in_place < 0) out.Make(in, PickFloatDType(in), {batch, seq, heads, dim}, true);
  const bool with_lse = in.ConsumeBool();
  const bool lse_in_place = with_lse && parts > 0 && in.ConsumeIntegralInRange<int>(0, 5) == 0;
  if (with_lse && !lse_in_place) lse_out.Make(in, SATTN_DTYPE_F32, {batch, heads, seq}, true);
  out.FillBytes(0xEE);
  lse_out.FillBytes(0xEE);
  judge = judge && !out.mutated() && !lse_out.mutated();
  const int lse_part = lse_in_place ? in.ConsumeIntegralInRange<int>(0, parts - 1) : -1;

  // The merge in double, before the call (which may write over a part).
  std::vector<double> want_out, want_lse;
  if (judge) {
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t s = 0; s < seq; ++s) {
        for (int64_t h = 0; h < heads; ++h) {
          std::vector<double> l(parts);
          double m = -INFINITY;
          for (int i = 0; i < parts; ++i) {
            const int64_t at[3] = {b, h, s};
            l[i] = lse[i].Get(at);
            m = std::max(m, l[i]);
          }
          double sum = 0.0;
          for (int i = 0; i < parts && m != -INFINITY; ++i) sum += std::exp(l[i] - m);
          const double total = m == -INFINITY ? -INFINITY : m + std::log(sum);
          want_lse.push_back(total);
          for (int64_t d = 0; d < dim; ++d) {
            double acc = 0.0;
            for (int i = 0; i < parts && total != -INFINITY; ++i) {
              if (l[i] == -INFINITY) continue;
              const int64_t at[4] = {b, s, h, d};
              acc += std::exp(l[i] - total) * o[i].Get(at);
            }
            want_out.push_back(acc);
          }
        }
      }
    }
  }

  const FuzzTensor& result = in_place >= 0 ? o[in_place] : out;
  const sattn_tensor* out_view = in_place >= 0 ? &o_views[in_place] : &out.view();
  const sattn_tensor* lse_view = !with_lse      ? nullptr
                                 : lse_in_place ? &lse_views[lse_part]
                                                : &lse_out.view();
  const FuzzTensor* lse_result = lse_in_place ? &lse[lse_part] : &lse_out;
  std::vector<const FuzzTensor*> all;
  for (int i = 0; i < parts; ++i) all.push_back(&o[i]), all.push_back(&lse[i]);
  all.push_back(&out);
  all.push_back(&lse_out);
  std::vector<std::vector<uint8_t>> before;
  for (const FuzzTensor* t : all) before.push_back(t->Snapshot());

  const sattn_status status =
      sattn_merge_states(ctx, num_parts, parts ? o_views.data() : nullptr,
                         parts ? lse_views.data() : nullptr, out_view, lse_view);
  if (status != SATTN_OK) {
    CheckFailure(status, all, before);
    return 0;
  }
  // Only the output views changed; inputs that are not outputs are untouched.
  for (size_t i = 0; i < all.size(); ++i) {
    const bool is_out = all[i] == &result || all[i] == lse_result;
    if (is_out) {
      FUZZ_CHECK(all[i]->OnlyViewWritten(before[i]), "wrote an output's padding");
    } else {
      FUZZ_CHECK(all[i]->Unchanged(before[i]), "wrote input %zu", i);
    }
  }
  if (!judge) return 0;
  const double rounding = result.view().dtype == SATTN_DTYPE_F16    ? 0x1p-10
                          : result.view().dtype == SATTN_DTYPE_BF16 ? 0x1p-7
                                                                    : 0.0;
  size_t row = 0;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) {
      for (int64_t h = 0; h < heads; ++h, ++row) {
        for (int64_t d = 0; d < dim; ++d) {
          const int64_t at[4] = {b, s, h, d};
          const double w = want_out[row * dim + d], g = result.Get(at);
          // A zero stride can share an empty row's NaN o with a visible row: NaN agrees with NaN.
          FUZZ_CHECK((std::isnan(g) && std::isnan(w)) ||
                         std::fabs(g - w) <= 1e-5 * (1.0 + std::fabs(w)) + rounding * std::fabs(w),
                     "out[%lld, %lld, %lld, %lld] = %.9g, want %.9g", static_cast<long long>(b),
                     static_cast<long long>(s), static_cast<long long>(h),
                     static_cast<long long>(d), g, w);
        }
        if (with_lse) {
          const int64_t at[3] = {b, h, s};
          const double w = want_lse[row], g = lse_result->Get(at);
          FUZZ_CHECK(std::isnan(w)   ? std::isnan(g)
                     : std::isinf(w) ? g == w
                                     : std::fabs(g - w) <= 1e-5 * (1.0 + std::fabs(w)),
                     "lse %.9g, want %.9g", g, w);
        }
      }
    }
  }
  return 0;
}
