// libFuzzer target: sattn_quantize_kv from f32, f16 or bf16 rows (any layout, now and then NaN,
// infinities, 1e30, subnormals) into I8, I4 or FP8 E4M3 caches, contiguous or through a block
// table, at chosen positions, with f16 or f32 group scales (or an FP8 scale per head or per
// tensor, now and then negative, zero, NaN or infinite), and malformed details now and then.
// Every call must be memory-safe and follow the contract (fuzz_util.h). A call whose source
// holds a NaN or an infinity must fail naming its index; every successful call is checked
// element by element against the header's rules, written here independently.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_util.h"

namespace streamattn {
namespace fuzz {
namespace {

int32_t PickFormat(FuzzedDataProvider& in) {
  static const int32_t kFormats[] = {SATTN_DTYPE_I8, SATTN_DTYPE_I4, SATTN_DTYPE_FP8_E4M3};
  if (in.ConsumeIntegralInRange<int>(0, 15) == 0) return PickFloatDType(in);
  return kFormats[in.ConsumeIntegralInRange<int>(0, 2)];
}

// The float32 the scale dtype stores for x (f16 saturating at its largest finite value, as
// the header states for scales).
float StoredScale(int32_t dtype, float x) {
  if (dtype == SATTN_DTYPE_F16) {
    return std::min(testing_util::FromF16(testing_util::ToF16(x)), 65504.0f);
  }
  return x;
}

}  // namespace
}  // namespace fuzz
}  // namespace streamattn

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace streamattn::fuzz;  // NOLINT
  namespace tu = streamattn::testing_util;
  FuzzedDataProvider in(data, size);
  sattn_context* ctx = PickContextAndTarget(in);
  const uint64_t seed = in.ConsumeIntegral<uint64_t>();

  // ---- the problem
  const int64_t batch = in.ConsumeIntegralInRange<int64_t>(1, 3);
  const int64_t n = in.ConsumeIntegralInRange<int64_t>(1, 9);
  const int64_t heads = in.ConsumeIntegralInRange<int64_t>(1, 3);
  static const int64_t kDims[] = {2, 8, 32, 64, 96, 128, 576};
  const int64_t dim = in.ConsumeIntegralInRange<int>(0, 3)
                          ? kDims[in.ConsumeIntegralInRange<int>(0, 6)]
                          : in.ConsumeIntegralInRange<int64_t>(1, 140);
  const int32_t format = PickFormat(in);
  const bool fp8 = format == SATTN_DTYPE_FP8_E4M3;
  // Scale groups per row: mostly head_dim over a power of two that divides it, or one per row;
  // now and then any count (a group size that need not divide head_dim: refused).
  static const int64_t kGroups[] = {32, 16, 2, 64, 8};
  const int64_t common = kGroups[in.ConsumeIntegralInRange<int>(0, 4)];
  const int64_t groups = in.ConsumeIntegralInRange<int>(0, 7) == 0
                             ? in.ConsumeIntegralInRange<int64_t>(1, dim + 1)
                         : in.ConsumeBool() && dim % common == 0 ? dim / common
                                                                 : 1;
  const int64_t group = std::max<int64_t>(1, dim / groups);  // checked only where it divides
  const bool paged = in.ConsumeIntegralInRange<int>(0, 2) == 0;
  const int64_t page_size = paged ? in.ConsumeIntegralInRange<int64_t>(1, 8) : 0;
  const int64_t cache_len = paged ? page_size * in.ConsumeIntegralInRange<int64_t>(1, 4)
                                  : n + in.ConsumeIntegralInRange<int64_t>(0, 12);
  const int64_t max_pages = paged ? cache_len / page_size : 0;
  const int64_t num_pages =
      paged ? batch * max_pages + in.ConsumeIntegralInRange<int64_t>(0, 2) : 0;
  const int64_t slots = paged ? num_pages : batch, rows = paged ? page_size : cache_len;

  // ---- tensors
  FuzzTensor src, values, scales, positions, table;
  const int32_t src_dtype = SATTN_DTYPE_F32 + in.ConsumeIntegralInRange<int>(0, 2);
  src.Make(in, in.ConsumeIntegralInRange<int>(0, 31) ? src_dtype : PickFloatDType(in),
           {batch, n, heads, dim}, false);
  values.Make(in, format, {slots, rows, heads, dim}, true);
  const int32_t scale_dtype = in.ConsumeIntegralInRange<int>(0, 15) == 0 ? PickFloatDType(in)
                              : fp8 || in.ConsumeBool()                  ? SATTN_DTYPE_F32
                                                                         : SATTN_DTYPE_F16;
  const bool fp8_per_head = in.ConsumeBool();
  if (fp8) {
    scales.Make(in, scale_dtype, {fp8_per_head ? heads : 1}, false);
  } else {
    scales.Make(in, scale_dtype, {slots, rows, heads, groups}, true);
  }
  const int r = in.ConsumeIntegralInRange<int>(0, 9);
  const Fill fill = r < 6 ? Fill::kUniform : r < 9 ? Fill::kSpecial : Fill::kBytes;
  src.FillValues(fill, seed);
  const float spread = in.ConsumeBool() ? 1.0f : in.ConsumeBool() ? 300.0f : 1e-3f;
  src.TransformElements([spread](double x) { return static_cast<float>(x * spread); });
  values.FillBytes(0x5A);
  if (fp8 && scales.real() && !scales.mutated()) {
    std::mt19937_64 rng(seed + 1);
    const float specials[] = {0.0f, -1.0f, NAN, INFINITY, 1e-30f};
    scales.ForEach([&](const int64_t* i) {
      float s = spread * (0.5f + static_cast<float>(rng() % 1000) / 1000.0f) / 448.0f;
      if (fill == Fill::kSpecial && rng() % 8 == 0) s = specials[rng() % 5];
      scales.Set(i, s);
    });
  } else if (!fp8) {
    scales.FillBytes(0x5A);
  }

  // ---- options: positions and a block table
  sattn_quantize_kv_options o{};
  o.struct_size = sizeof(o);
  std::vector<int64_t> start(batch, 0);
  if (in.ConsumeBool()) {
    positions.Make(in, in.ConsumeIntegralInRange<int>(0, 15) ? SATTN_DTYPE_I32 : PickFloatDType(in),
                   {batch}, false);
    for (int64_t b = 0; b < batch && positions.real(); ++b) {
      start[b] = in.ConsumeIntegralInRange<int>(0, 15) == 0
                     ? in.ConsumeIntegralInRange<int64_t>(-3, cache_len + 3)  // maybe out of range
                     : in.ConsumeIntegralInRange<int64_t>(0, std::max<int64_t>(0, cache_len - n));
      if (!positions.mutated() && positions.view().dtype == SATTN_DTYPE_I32) {
        positions.SetInt(&b, static_cast<int32_t>(start[b]));
      }
    }
    // What the call will read: a broadcast view (stride 0) holds one position for all.
    for (int64_t b = 0; b < batch && positions.real() && !positions.mutated() &&
                        positions.view().dtype == SATTN_DTYPE_I32;
         ++b) {
      start[b] = positions.GetInt(&b);
    }
    o.positions = &positions.view();
  }
  if (paged) {
    table.Make(in, in.ConsumeIntegralInRange<int>(0, 15) ? SATTN_DTYPE_I32 : PickFloatDType(in),
               {batch, max_pages}, false);
    // Sequences own distinct pages in a shuffled order; now and then an entry points outside.
    std::vector<int32_t> shuffled(num_pages);
    for (int64_t i = 0; i < num_pages; ++i) shuffled[i] = static_cast<int32_t>(i);
    std::mt19937_64 rng(seed + 2);
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    const bool fill_table =
        table.real() && !table.mutated() && table.view().dtype == SATTN_DTYPE_I32;
    for (int64_t b = 0; b < batch && fill_table; ++b) {
      for (int64_t j = 0; j < max_pages; ++j) {
        const int64_t index[2] = {b, j};
        int32_t entry = shuffled[b * max_pages + j];
        if (in.ConsumeIntegralInRange<int>(0, 63) == 0) {
          entry = in.ConsumeBool() ? static_cast<int32_t>(num_pages) : -1;
        }
        table.SetInt(index, entry);
      }
    }
    o.block_table = &table.view();
  }
  const bool pass_options = in.ConsumeIntegralInRange<int>(0, 7) != 0;

  std::vector<const FuzzTensor*> inputs = {&src, &positions, &table};
  if (fp8) inputs.push_back(&scales);
  std::vector<std::vector<uint8_t>> inputs_before;
  for (const FuzzTensor* t : inputs) inputs_before.push_back(t->Snapshot());
  std::vector<const FuzzTensor*> outputs = {&values};
  if (!fp8) outputs.push_back(&scales);
  std::vector<std::vector<uint8_t>> outputs_before;
  for (const FuzzTensor* t : outputs) outputs_before.push_back(t->Snapshot());

  const sattn_status status = sattn_quantize_kv(ctx, &src.view(), &values.view(), &scales.view(),
                                                pass_options ? &o : nullptr);
  for (size_t i = 0; i < inputs.size(); ++i) {
    FUZZ_CHECK(inputs[i]->Unchanged(inputs_before[i]), "input %zu was written", i);
  }
  if (status != SATTN_OK) {
    CheckFailure(status, outputs, outputs_before);
    return 0;
  }
  FUZZ_CHECK(values.OnlyViewWritten(outputs_before[0]), "wrote values' padding");
  FUZZ_CHECK(fp8 || scales.OnlyViewWritten(outputs_before[1]), "wrote scales' padding");
  const bool plain = !src.mutated() && !values.mutated() && !scales.mutated() &&
                     !positions.mutated() && !table.mutated();
  if (!plain) return 0;

  // ---- every row written by the rules
  // Without options a paged cache is taken as a contiguous one (it was accepted: as many pages
  // as sequences), its rows from 0.
  const int max_q = format == SATTN_DTYPE_I4 ? 7 : 127;
  const bool use_table = paged && pass_options;
  FUZZ_CHECK(fp8 || (dim % groups == 0 && (format != SATTN_DTYPE_I4 || group % 2 == 0)),
             "accepted %lld groups of head_dim %lld", static_cast<long long>(groups),
             static_cast<long long>(dim));
  if (!pass_options) std::fill(start.begin(), start.end(), 0);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < n; ++t) {
      const int64_t key = start[b] + t;
      FUZZ_CHECK(key >= 0 && key < (use_table ? cache_len : rows), "accepted key %lld",
                 static_cast<long long>(key));
      const int64_t entry[2] = {b, use_table ? key / page_size : 0};
      const int64_t slot = use_table ? table.GetInt(entry) : b;
      const int64_t row = use_table ? key % page_size : key;
      FUZZ_CHECK(slot >= 0 && slot < slots, "accepted page %lld", static_cast<long long>(slot));
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t g = 0; g < (fp8 ? 1 : groups); ++g) {
          const int64_t lo = fp8 ? 0 : g * group, hi = fp8 ? dim : lo + group;
          float amax = 0.0f;
          for (int64_t i = lo; i < hi; ++i) {
            const int64_t at[4] = {b, t, h, i};
            const double x = src.Get(at);
            FUZZ_CHECK(std::isfinite(x), "accepted src[%lld, %lld, %lld, %lld] = %g",
                       static_cast<long long>(b), static_cast<long long>(t),
                       static_cast<long long>(h), static_cast<long long>(i), x);
            amax = std::max(amax, static_cast<float>(std::fabs(x)));
          }
          float scale;
          if (fp8) {
            const int64_t sh = fp8_per_head ? h : 0;
            scale = static_cast<float>(scales.Get(&sh));
            FUZZ_CHECK(std::isfinite(scale) && scale > 0.0f, "accepted FP8 scale %g", scale);
          } else {
            scale = StoredScale(scale_dtype, amax / static_cast<float>(max_q));
            const int64_t at[4] = {slot, row, h, g};
            FUZZ_CHECK(scales.Get(at) == scale, "scale [%lld, %lld, %lld, %lld] = %g, want %g",
                       static_cast<long long>(slot), static_cast<long long>(row),
                       static_cast<long long>(h), static_cast<long long>(g), scales.Get(at),
                       static_cast<double>(scale));
          }
          for (int64_t i = lo; i < hi; ++i) {
            const int64_t from[4] = {b, t, h, i}, to[4] = {slot, row, h, i};
            const float x = static_cast<float>(src.Get(from));
            double want;
            if (fp8) {
              want = tu::FromE4M3(tu::ToE4M3(x / scale));
            } else {
              want = scale == 0.0f ? 0.0
                                   : std::clamp<double>(std::nearbyint(x / scale), -max_q, max_q);
            }
            const double got = values.Get(to);
            FUZZ_CHECK(got == want, "values[%lld, %lld, %lld, %lld] = %g, want %g (x %g, scale %g)",
                       static_cast<long long>(slot), static_cast<long long>(row),
                       static_cast<long long>(h), static_cast<long long>(i), got, want,
                       static_cast<double>(x), static_cast<double>(scale));
          }
        }
      }
    }
  }
  return 0;
}
