// Every float of [-150, 128] through exp2, on every compiled target. Opt-in: `ctest -L
// exhaustive` (a few minutes); the default suite runs the every-8th-float sweep.
#include "cpu/exp2.h"
#include "exp2_accuracy.h"
#include "gtest/gtest.h"
#include "hwy/tests/hwy_gtest.h"
#include "library_target_test.h"

namespace streamattn {
namespace {

class Exp2ExhaustiveTest : public LibraryTargetTest {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(Exp2ExhaustiveTest);

TEST_P(Exp2ExhaustiveTest, EveryFloatWithinTwoUlp) {
  const Exp2AccuracyTable table = MeasureExp2Accuracy(Exp2Array, 1);
  table.Print(hwy::TargetName(GetParam()));
  for (const Exp2RangeError& range : table.ranges) {
    EXPECT_LE(range.max_ulp, 2.0) << range.name << " at x=" << range.worst_x;
  }
}

}  // namespace
}  // namespace streamattn
