// The shared number formats and dropout hash: bf16 rounding as the hardware's __float2bfloat16_rn
// rounds (nearest, ties to even), and a dropout mask that keeps 1 − p of the values.
#include "kernels/numerics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace loom::kernels {
namespace {

float round_trip(float x) { return float_from_bf16_bits(bf16_bits_from_float(x)); }

TEST(Numerics, Bf16KeepsValuesItCanRepresentExactly) {
  for (float x : {0.0f, -0.0f, 1.0f, -2.5f, 0.15625f, 65536.0f, 1.0f / 1024})
    EXPECT_EQ(float_bits(round_trip(x)), float_bits(x)) << x;
}

TEST(Numerics, Bf16RoundsToNearestAndTiesToEven) {
  const float ulp = std::ldexp(1.0f, -7);                              // bf16 spacing in [1, 2)
  EXPECT_EQ(round_trip(1.0f + 0.5f * ulp), 1.0f);                      // tie, 1.0 is even
  EXPECT_EQ(round_trip(1.0f + 1.5f * ulp), 1.0f + 2 * ulp);            // tie, rounds up to even
  EXPECT_EQ(round_trip(1.0f + 0.5f * ulp + 1e-6f), 1.0f + ulp);        // above the tie
  EXPECT_EQ(round_trip(-(1.0f + 0.75f * ulp)), -(1.0f + ulp));         // sign-symmetric
  EXPECT_EQ(round_trip(std::numeric_limits<float>::max()), INFINITY);  // overflows as the hardware does
}

TEST(Numerics, Bf16KeepsInfinitiesAndNaNs) {
  EXPECT_EQ(round_trip(INFINITY), INFINITY);
  EXPECT_EQ(round_trip(-INFINITY), -INFINITY);
  EXPECT_TRUE(std::isnan(round_trip(std::numeric_limits<float>::quiet_NaN())));
  // A NaN whose payload sits only in the low 16 bits must not become an infinity.
  EXPECT_TRUE(std::isnan(round_trip(bits_float(0x7F800001u))));
}

TEST(Numerics, DropoutKeepsOneMinusPOfTheValuesAndDependsOnPositionOnly) {
  const float p = 0.1f;
  const std::uint64_t t = dropout_threshold(p);
  int kept = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) kept += dropout_keep(42, static_cast<std::uint64_t>(i), t) ? 1 : 0;
  EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - p, 0.003);
  EXPECT_EQ(dropout_keep(42, 12345, t), dropout_keep(42, 12345, t));
  int same = 0;
  for (int i = 0; i < 1000; ++i) same += dropout_keep(42, i, t) == dropout_keep(43, i, t) ? 1 : 0;
  EXPECT_LT(same, 1000);  // another key draws another mask
}

}  // namespace
}  // namespace loom::kernels
