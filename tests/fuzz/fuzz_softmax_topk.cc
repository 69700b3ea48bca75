// libFuzzer target: sattn_softmax_topk with fuzzer-chosen dtypes, ranks, row counts and
// lengths (split rows included), k (up to and past 1024), layouts, temperatures, data (ties,
// NaN, ±Inf) and malformed details, on a chosen SIMD target. Plain data is judged exactly for
// the indices (descending score, lower index first on ties) and against the double oracle for
// the probabilities and lse.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "fuzz_util.h"
#include "reference/reference_attention.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace streamattn::fuzz;  // NOLINT
  FuzzedDataProvider in(data, size);
  sattn_context* ctx = PickContextAndTarget(in);
  const uint64_t seed = in.ConsumeIntegral<uint64_t>();
  const int rank = in.ConsumeBool() ? 2 : 1;
  const int64_t rows = rank == 1 ? 1 : in.ConsumeIntegralInRange<int64_t>(1, 30);
  const int64_t n = in.ConsumeIntegralInRange<int>(0, 7) == 0
                        ? in.ConsumeIntegralInRange<int64_t>(16000, 70000)
                        : in.ConsumeIntegralInRange<int64_t>(1, 3000);
  if (rows * n > 400000) return 0;
  int32_t k =
      static_cast<int32_t>(in.ConsumeIntegralInRange<int>(0, 9) == 0
                               ? in.ConsumeIntegralInRange<int64_t>(-2, n + 2)
                               : in.ConsumeIntegralInRange<int64_t>(1, std::min<int64_t>(n, 40)));
  if (in.ConsumeIntegralInRange<int>(0, 15) == 0)
    k = in.ConsumeIntegralInRange<int32_t>(1000, 1100);
  const int64_t kk = std::max<int32_t>(k, 1);
  auto shape_of = [&](int64_t last) {
    return rank == 1 ? std::vector<int64_t>{last} : std::vector<int64_t>{rows, last};
  };

  FuzzTensor scores, indices, probs, lse;
  scores.Make(in, PickFloatDType(in), shape_of(n), false);
  const int r = in.ConsumeIntegralInRange<int>(0, 9);
  const Fill fill = r < 6 ? Fill::kUniform : r < 9 ? Fill::kSpecial : Fill::kBytes;
  scores.FillValues(fill, seed);
  // Ties: scores drawn from a few values only.
  const bool ties = in.ConsumeBool();
  const float spread = std::ldexp(1.0f, in.ConsumeIntegralInRange<int>(-4, 6));
  if (scores.real() && !scores.mutated() && fill == Fill::kUniform) {
    scores.TransformElements(
        [&](double s) { return static_cast<float>((ties ? std::round(s * 4) / 4 : s) * spread); });
  }
  indices.Make(in, in.ConsumeIntegralInRange<int>(0, 15) ? SATTN_DTYPE_I32 : PickFloatDType(in),
               shape_of(kk), true);
  probs.Make(in, in.ConsumeIntegralInRange<int>(0, 15) ? SATTN_DTYPE_F32 : PickFloatDType(in),
             shape_of(kk), true);
  const bool with_lse = in.ConsumeBool();
  if (with_lse) lse.Make(in, SATTN_DTYPE_F32, {rows}, true);
  for (FuzzTensor* t : {&indices, &probs, &lse}) t->FillBytes(0xEE);
  // Now and then probs on top of indices: must be refused.
  const bool alias = in.ConsumeIntegralInRange<int>(0, 31) == 0;
  sattn_tensor probs_view = probs.view();
  if (alias) probs_view.data = indices.view().data;

  sattn_softmax_options options{};
  options.struct_size = sizeof(options);
  if (in.ConsumeBool()) {
    static const float kCommon[] = {1.0f, 0.5f, 3.0f, 1e-40f, -2.0f, NAN};
    options.temperature = kCommon[in.ConsumeIntegralInRange<int>(0, 5)];
  }
  const bool judge =
      fill == Fill::kUniform && !scores.mutated() && !indices.mutated() && !probs.mutated();
  std::vector<const FuzzTensor*> outputs = {&indices, &probs, &lse};
  std::vector<std::vector<uint8_t>> before;
  for (const FuzzTensor* t : outputs) before.push_back(t->Snapshot());
  const std::vector<uint8_t> in_before = scores.Snapshot();
  const sattn_status status =
      sattn_softmax_topk(ctx, &scores.view(), k, &indices.view(), &probs_view,
                         with_lse ? &lse.view() : nullptr, &options);
  FUZZ_CHECK(scores.Unchanged(in_before), "in was written");
  if (status != SATTN_OK) {
    CheckFailure(status, outputs, before);
    return 0;
  }
  FUZZ_CHECK(!alias, "probs aliasing indices was accepted");
  for (size_t i = 0; i < outputs.size(); ++i) {
    FUZZ_CHECK(outputs[i]->OnlyViewWritten(before[i]), "wrote padding of output %zu", i);
  }
  // Any data: indices are -1 (a NaN row) or in [0, n), distinct within a row.
  std::vector<std::vector<int32_t>> got(rows);
  indices.ForEach(
      [&](const int64_t* i) { got[rank == 2 ? i[0] : 0].push_back(indices.GetInt(i)); });
  for (const auto& row : got) {
    std::vector<int32_t> sorted = row;
    std::sort(sorted.begin(), sorted.end());
    for (size_t j = 0; j < sorted.size(); ++j) {
      FUZZ_CHECK(sorted[j] >= -1 && sorted[j] < n, "index %d", sorted[j]);
      FUZZ_CHECK(sorted[j] == -1 || j == 0 || sorted[j] != sorted[j - 1], "index %d twice",
                 sorted[j]);
    }
  }
  if (!judge) return 0;
  const double t = options.temperature == 0.0f ? 1.0 : options.temperature;
  for (int64_t row = 0; row < rows; ++row) {
    std::vector<double> s(n);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t at[2] = {rank == 2 ? row : j, j};
      s[j] = scores.Get(rank == 2 ? at : at + 1) / t;
    }
    std::vector<int32_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return s[a] > s[b]; });
    const std::vector<double> p = streamattn::reference::Softmax(s);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t at[2] = {rank == 2 ? row : j, j};
      const int64_t* index = rank == 2 ? at : at + 1;
      FUZZ_CHECK(got[row][j] == order[j], "row %lld: index %lld is %d, want %d",
                 static_cast<long long>(row), static_cast<long long>(j), got[row][j], order[j]);
      const double g = probs.Get(index), w = p[order[j]];
      FUZZ_CHECK(std::fabs(g - w) <= 2e-6 + 3e-5 * w, "row %lld: prob %lld is %.9g, want %.9g",
                 static_cast<long long>(row), static_cast<long long>(j), g, w);
    }
    if (with_lse) {
      const double w = streamattn::reference::LogSumExp(s), g = lse.Get(&row);
      FUZZ_CHECK(std::fabs(g - w) <= 2e-5 * (1.0 + std::fabs(w)), "lse %.9g, want %.9g", g, w);
    }
  }
  return 0;
}
