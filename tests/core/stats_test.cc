// core/stats.h and core/parallel_for.h: the median and R² every fit and report shares, and the
// one thread-pool loop.
#include <atomic>
#include <vector>

#include <gtest/gtest.h>

#include "core/parallel_for.h"
#include "core/result.h"
#include "core/stats.h"

namespace loom {
namespace {

TEST(Median, IsTheMiddleValueOrTheMeanOfTheTwoMiddleOnes) {
  EXPECT_DOUBLE_EQ(median({5, 1, 3}), 3);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({7}), 7);
  EXPECT_DOUBLE_EQ(median({}), 0);
}

TEST(RSquared, IsOneForAPerfectFitAndZeroForTheMean) {
  const std::vector<double> measured = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(r_squared(measured, measured), 1.0);
  EXPECT_DOUBLE_EQ(r_squared(measured, {2.5, 2.5, 2.5, 2.5}), 0.0);
  // Σ residual² = 4 · 0.25 = 1, Σ (x − mean)² = 5: R² = 0.8.
  EXPECT_DOUBLE_EQ(r_squared(measured, {1.5, 1.5, 3.5, 3.5}), 0.8);
}

TEST(RSquared, IsOneWhenTheMeasuredValuesDoNotVary) { EXPECT_DOUBLE_EQ(r_squared({2, 2, 2}, {1, 2, 3}), 1.0); }

TEST(ParallelFor, CallsEveryIndexExactlyOnceOnAnyThreadCount) {
  for (int threads : {0, 1, 3, 64}) {
    std::vector<std::atomic<int>> calls(1000);
    parallel_for(calls.size(), threads, [&](std::size_t i) { ++calls[i]; });
    for (std::size_t i = 0; i < calls.size(); ++i)
      ASSERT_EQ(calls[i].load(), 1) << "index " << i << ", " << threads << " threads";
  }
}

TEST(ParallelFor, DoesNothingForNoWork) {
  int calls = 0;
  parallel_for(0, 4, [&](std::size_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ErrorKind, MakeErrorIsBadInputAndMakeInternalErrorIsInternal) {
  EXPECT_FALSE(make_error("x").internal());
  EXPECT_TRUE(make_internal_error("x").internal());
  const Error prefixed = prefix_error("file: ", make_internal_error("broken"));
  EXPECT_EQ(prefixed.message, "file: broken");
  EXPECT_TRUE(prefixed.internal());
  const Status status = make_internal_error("y");
  EXPECT_TRUE(status.error().internal());
}

}  // namespace
}  // namespace loom
