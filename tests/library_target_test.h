// The base of kernel tests that run once per SIMD target and call kernels dispatched inside
// the library (through streamattn_internal, e.g. Exp2Array): hwy::TestWithParamTarget limits
// Highway's dispatch to the target an instance names, and this checks before the test that the
// library's dispatch then picks exactly that target.
#ifndef STREAMATTN_TESTS_LIBRARY_TARGET_TEST_H_
#define STREAMATTN_TESTS_LIBRARY_TARGET_TEST_H_

#include "cpu/cpu_backend.h"
#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "hwy/tests/hwy_gtest.h"

namespace streamattn {

class LibraryTargetTest : public hwy::TestWithParamTarget {
 protected:
  void SetUp() override {
    hwy::TestWithParamTarget::SetUp();
    ASSERT_STREQ(ChosenSimdTargetName(), hwy::TargetName(GetParam()))
        << "the library runs another SIMD target";
  }
};

}  // namespace streamattn

#endif  // STREAMATTN_TESTS_LIBRARY_TARGET_TEST_H_
