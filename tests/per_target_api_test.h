// The base of the API tests that run once per SIMD target: hwy::TestWithParamTarget limits
// Highway's dispatch to the target a test instance names, and this checks, before the test,
// that the library then really runs that target (a context created now reports it), so a test
// named for AVX2 cannot silently exercise AVX-512 kernels.
#ifndef STREAMATTN_TESTS_PER_TARGET_API_TEST_H_
#define STREAMATTN_TESTS_PER_TARGET_API_TEST_H_

#include <string>

#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "hwy/tests/hwy_gtest.h"
#include "streamattn/streamattn.h"

namespace streamattn {
namespace testing_util {

class PerTargetApiTest : public hwy::TestWithParamTarget {
 protected:
  void SetUp() override {
    hwy::TestWithParamTarget::SetUp();
    sattn_context* ctx = nullptr;
    ASSERT_EQ(sattn_context_create(nullptr, &ctx), SATTN_OK) << sattn_last_error();
    sattn_context_info info{};
    info.struct_size = sizeof(info);
    const sattn_status status = sattn_context_get_info(ctx, &info);
    const std::string running = status == SATTN_OK ? info.simd_target : "";
    sattn_context_destroy(ctx);
    ASSERT_EQ(status, SATTN_OK) << sattn_last_error();
    ASSERT_EQ(running, hwy::TargetName(GetParam())) << "the library runs another SIMD target";
  }
};

}  // namespace testing_util
}  // namespace streamattn

#endif  // STREAMATTN_TESTS_PER_TARGET_API_TEST_H_
