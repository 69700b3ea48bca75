// For kernel tests compiled for every Highway target (foreach_target.h): CompiledTarget() in
// each target's namespace, and SATTN_TEST_RUNS_ON_ITS_TARGET(Suite), a test that an instance of
// the suite really dispatches to the target it is named for. Include it after highway.h, and
// use the macro where the suite's HWY_EXPORT_AND_TEST_P lines are.
#if defined(STREAMATTN_TESTS_COMPILED_TARGET_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_TESTS_COMPILED_TARGET_INL_H_
#undef STREAMATTN_TESTS_COMPILED_TARGET_INL_H_
#else
#define STREAMATTN_TESTS_COMPILED_TARGET_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {

// Internal: the library has a function of this name too.
static int64_t CompiledTarget() { return HWY_TARGET; }

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_TESTS_COMPILED_TARGET_INL_H_

#if HWY_ONCE && !defined(SATTN_TEST_RUNS_ON_ITS_TARGET)
#define SATTN_TEST_RUNS_ON_ITS_TARGET(Suite)                       \
  HWY_EXPORT(CompiledTarget);                                      \
  TEST_P(Suite, RunsOnTheTargetItNames) {                          \
    EXPECT_EQ(HWY_DYNAMIC_DISPATCH(CompiledTarget)(), GetParam()); \
  }
#endif
