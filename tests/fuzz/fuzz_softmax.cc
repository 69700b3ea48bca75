// libFuzzer target: sattn_softmax and sattn_log_softmax with fuzzer-chosen dtypes, ranks,
// row counts and lengths (short rows, and rows long enough to be split across tasks), layouts,
// in-place calls, temperatures, data and malformed details, on a chosen SIMD target. Plain data
// is judged against the oracle's three-pass softmax in double.
#include <cmath>
#include <cstdint>
#include <vector>

#include "fuzz_util.h"
#include "reference/reference_attention.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace streamattn::fuzz;  // NOLINT
  FuzzedDataProvider in(data, size);
  sattn_context* ctx = PickContextAndTarget(in);
  const uint64_t seed = in.ConsumeIntegral<uint64_t>();
  const bool log = in.ConsumeBool();
  const int rank = in.ConsumeBool() ? 2 : 1;
  const int64_t rows = rank == 1 ? 1 : in.ConsumeIntegralInRange<int64_t>(1, 40);
  const int64_t n = in.ConsumeIntegralInRange<int>(0, 7) == 0
                        ? in.ConsumeIntegralInRange<int64_t>(16000, 70000)  // split rows
                        : in.ConsumeIntegralInRange<int64_t>(1, 600);
  if (rows * n > 400000) return 0;
  std::vector<int64_t> shape = rank == 1 ? std::vector<int64_t>{n} : std::vector<int64_t>{rows, n};

  FuzzTensor scores, out;
  const int32_t in_dtype = PickFloatDType(in);
  scores.Make(in, in_dtype, shape, false);
  const int r = in.ConsumeIntegralInRange<int>(0, 9);
  const Fill fill = r < 6 ? Fill::kUniform : r < 9 ? Fill::kSpecial : Fill::kBytes;
  scores.FillValues(fill, seed);
  // Scores in [-1, 1] times a spread, so the softmax is neither flat nor one-hot.
  const float spread = std::ldexp(1.0f, in.ConsumeIntegralInRange<int>(-4, 7));
  if (fill == Fill::kUniform && scores.real() && !scores.mutated()) {
    scores.TransformElements([&](double x) { return static_cast<float>(x * spread); });
  }
  const bool in_place = in.ConsumeIntegralInRange<int>(0, 5) == 0;
  const int32_t out_dtype = in.ConsumeBool() ? SATTN_DTYPE_F32 : PickFloatDType(in);
  if (!in_place) out.Make(in, out_dtype, shape, true);
  out.FillBytes(0xEE);

  struct {
    sattn_softmax_options o;
    uint8_t newer[8];
  } options{};
  options.o.struct_size = sizeof(options.o);
  if (in.ConsumeIntegralInRange<int>(0, 31) == 0) {
    options.o.struct_size = in.ConsumeIntegralInRange<uint32_t>(0, sizeof(options));
    if (in.ConsumeBool()) options.newer[in.ConsumeIntegralInRange<int>(0, 7)] = 1;
  }
  if (in.ConsumeBool()) {
    static const float kCommon[] = {1.0f,   0.5f,  2.0f, 1e-3f,    1e-38f,
                                    1e-40f, -1.0f, NAN,  INFINITY, 1e30f};
    options.o.temperature = in.ConsumeIntegralInRange<int>(0, 5) == 0
                                ? in.ConsumeFloatingPoint<float>()
                                : kCommon[in.ConsumeIntegralInRange<int>(0, 9)];
  }
  const bool pass_options = in.ConsumeIntegralInRange<int>(0, 7) != 0;

  // The oracle's inputs, read before an in-place call overwrites them.
  const bool judge = fill == Fill::kUniform && !scores.mutated() && !out.mutated() &&
                     pass_options && options.o.struct_size == sizeof(options.o);
  std::vector<std::vector<double>> want_rows;
  if (judge) {
    want_rows.assign(rows, std::vector<double>(n));
    scores.ForEach(
        [&](const int64_t* i) { want_rows[rank == 2 ? i[0] : 0][i[rank - 1]] = scores.Get(i); });
  }
  const FuzzTensor& result = in_place ? scores : out;
  const std::vector<uint8_t> in_before = scores.Snapshot(), out_before = result.Snapshot();
  const sattn_softmax_options* opts = pass_options ? &options.o : nullptr;
  const sattn_tensor* out_view = in_place ? &scores.view() : &out.view();
  const sattn_status status = log ? sattn_log_softmax(ctx, &scores.view(), out_view, opts)
                                  : sattn_softmax(ctx, &scores.view(), out_view, opts);
  if (!in_place) FUZZ_CHECK(scores.Unchanged(in_before), "in was written");
  if (status != SATTN_OK) {
    CheckFailure(status, {&result}, {out_before});
    return 0;
  }
  FUZZ_CHECK(result.OnlyViewWritten(out_before), "wrote out's padding");
  if (!judge) return 0;
  const double t = options.o.temperature == 0.0f ? 1.0 : options.o.temperature;
  if (!(t >= 1e-2)) return 0;  // beyond that, float32 exponents lose digits the oracle has
  const double rounding = result.view().dtype == SATTN_DTYPE_F16    ? 0x1p-10
                          : result.view().dtype == SATTN_DTYPE_BF16 ? 0x1p-7
                                                                    : 0.0;
  for (auto& row : want_rows) {
    for (double& s : row) s /= t;
    if (!log) {
      row = streamattn::reference::Softmax(row);
      continue;
    }
    // log_softmax(s) = (s - m) - ln(sum exp(s - m)): s - lse loses ln(sum) to rounding when
    // the scores are huge. A row of only -inf is -inf everywhere (the header's rule); a NaN or
    // +inf makes it NaN.
    double m = -INFINITY, l = 0.0;
    for (double s : row) m = std::isnan(s) || s > m ? s : m;
    for (double s : row) l += s == -INFINITY ? 0.0 : std::exp(s - m);
    for (double& s : row) s = m == -INFINITY ? -INFINITY : (s - m) - std::log(l);
  }
  result.ForEach([&](const int64_t* i) {
    const double w = want_rows[rank == 2 ? i[0] : 0][i[rank - 1]], g = result.Get(i);
    const double tolerance =
        (log ? 2e-5 * (1.0 + std::fabs(w)) : 2e-6 + 3e-5 * std::fabs(w)) + rounding * std::fabs(w);
    const bool same = g == w || (std::isnan(g) && std::isnan(w));  // infinities, NaN rows
    FUZZ_CHECK(same || std::fabs(g - w) <= tolerance, "out[%lld][%lld] = %.9g, oracle %.9g",
               static_cast<long long>(rank == 2 ? i[0] : 0), static_cast<long long>(i[rank - 1]), g,
               w);
  });
  return 0;
}
