// The element-wise math shared by the CPU reference and the CUDA kernels, against the textbook
// formulas in double precision (and finite differences for the derivatives).
#include "kernels/activations.h"

#include <gtest/gtest.h>

#include <cmath>

namespace loom::kernels {
namespace {

double gelu_exact_tanh_form(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double silu(double g) { return g / (1.0 + std::exp(-g)); }

// Central difference, h chosen so its O(h²) error stays far below float precision.
template <class F>
double derivative(F f, double x) {
  const double h = 1e-4;
  return (f(x + h) - f(x - h)) / (2 * h);
}

TEST(Activations, GeluIsTheTanhFormOfGpt2) {
  for (double x = -6.0; x <= 6.0; x += 0.125)
    EXPECT_NEAR(gelu(static_cast<float>(x)), gelu_exact_tanh_form(x), 2e-6 * (1 + std::abs(x))) << x;
}

TEST(Activations, GeluDerivativeMatchesAFiniteDifference) {
  for (double x = -6.0; x <= 6.0; x += 0.125)
    EXPECT_NEAR(gelu_derivative(static_cast<float>(x)), derivative(gelu_exact_tanh_form, x), 2e-6) << x;
}

TEST(Activations, SwigluIsSiluOfTheGateTimesUp) {
  for (double g = -5.0; g <= 5.0; g += 0.25)
    for (double u : {-1.5, 0.3, 2.0})
      EXPECT_NEAR(swiglu(static_cast<float>(g), static_cast<float>(u)), silu(g) * u, 2e-6) << g << " " << u;
}

TEST(Activations, SwigluDerivativesMatchFiniteDifferences) {
  for (double g = -5.0; g <= 5.0; g += 0.25)
    for (double u : {-1.5, 0.3, 2.0}) {
      const float gf = static_cast<float>(g), uf = static_cast<float>(u);
      EXPECT_NEAR(swiglu_gate_derivative(gf, uf), derivative([&](double x) { return silu(x) * u; }, g), 2e-6);
      EXPECT_NEAR(swiglu_up_derivative(gf), silu(g), 2e-6);
    }
}

TEST(Activations, AdamWUpdateFollowsLoshchilovAndHutter) {
  const AdamW h{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f - std::pow(0.9f, 3.0f), 1.0f - std::pow(0.95f, 3.0f)};
  float m = 0.02f, v = 0.003f;
  const float p = adamw_update(0.5f, -0.25f, m, v, h);
  const double m_want = 0.9 * 0.02 + 0.1 * -0.25, v_want = 0.95 * 0.003 + 0.05 * 0.0625;
  const double mhat = m_want / (1 - std::pow(0.9, 3)), vhat = v_want / (1 - std::pow(0.95, 3));
  const double p_want = 0.5 - 1e-3 * (mhat / (std::sqrt(vhat) + 1e-8) + 0.1 * 0.5);
  EXPECT_NEAR(m, m_want, 1e-8);
  EXPECT_NEAR(v, v_want, 1e-9);
  EXPECT_NEAR(p, p_want, 1e-7);
  EXPECT_NE(p, 0.5f);
}

TEST(Activations, RopeAngleIsPositionTimesTenThousandToTheMinusTwoIOverD) {
  EXPECT_DOUBLE_EQ(rope_angle(7, 0, 64), 7.0);
  EXPECT_NEAR(rope_angle(1, 16, 64), 0.01, 1e-15);  // 10000^(−32/64) = 1/100
  EXPECT_NEAR(rope_angle(4096, 31, 64), 4096 * std::pow(10000.0, -62.0 / 64), 1e-12);
}

}  // namespace
}  // namespace loom::kernels
