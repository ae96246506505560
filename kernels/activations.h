// Element-wise math of the model's ops, written once as __host__ __device__ functions so the CUDA
// kernels and the CPU reference compute the same formulas: GELU (tanh form, GPT-2), SiLU/SwiGLU,
// the AdamW update of one value and the rotary-embedding angle. Plain C++ without nvcc.
#pragma once

#include <math.h>

#include "kernels/numerics.h"

namespace loom::kernels {

// GELU, tanh approximation (Hendrycks & Gimpel 2016, eq. in §2; GPT-2's `gelu`):
// gelu(x) = ½·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
constexpr float kGeluScale = 0.7978845608028654f;  // √(2/π)
constexpr float kGeluCubic = 0.044715f;

// The argument of the tanh; callers take tanh of it with whatever tanh they have.
LOOM_HD float gelu_tanh_argument(float x) { return kGeluScale * (x + kGeluCubic * x * x * x); }
LOOM_HD float gelu_from_tanh(float x, float t) { return 0.5f * x * (1.0f + t); }
// d gelu / dx given t = tanh(gelu_tanh_argument(x)).
LOOM_HD float gelu_derivative_from_tanh(float x, float t) {
  const float dt = (1.0f - t * t) * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * dt;
}
LOOM_HD float gelu(float x) { return gelu_from_tanh(x, tanhf(gelu_tanh_argument(x))); }
LOOM_HD float gelu_derivative(float x) { return gelu_derivative_from_tanh(x, tanhf(gelu_tanh_argument(x))); }

// SiLU (swish) g·σ(g) and SwiGLU's out = silu(gate)·up (Shazeer 2020).
LOOM_HD float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }
LOOM_HD float swiglu(float gate, float up) { return gate * sigmoid(gate) * up; }
// ∂out/∂gate = up·σ(g)·(1 + g·(1 − σ(g))); ∂out/∂up = silu(g).
LOOM_HD float swiglu_gate_derivative(float gate, float up) {
  const float s = sigmoid(gate);
  return up * s * (1.0f + gate * (1.0f - s));
}
LOOM_HD float swiglu_up_derivative(float gate) { return gate * sigmoid(gate); }

// AdamW (Loshchilov & Hutter 2019, Algorithm 2) on one value: the moments are updated in place and the
// new parameter returned. bias1/bias2 are the corrections 1 − β₁^t and 1 − β₂^t of step t (from 1).
struct AdamW {
  float lr, beta1, beta2, eps, weight_decay, bias1, bias2;
};
LOOM_HD float adamw_update(float param, float grad, float& m, float& v, const AdamW& h) {
  m = h.beta1 * m + (1.0f - h.beta1) * grad;
  v = h.beta2 * v + (1.0f - h.beta2) * grad * grad;
  const float mhat = m / h.bias1, vhat = v / h.bias2;
  return param - h.lr * (mhat / (sqrtf(vhat) + h.eps) + h.weight_decay * param);
}

// Rotary position embedding (Su et al. 2021, RoFormer eq. 15, GPT-NeoX's half-split layout): value i
// of the first half of a head pairs with value i + d/2 and turns by pos·10000^(−2i/d). In double: at
// pos ~ 10⁴ a float angle is off by ~10⁻³ rad.
LOOM_HD double rope_angle(int pos, int i, int head_dim) { return pos * pow(10000.0, -2.0 * i / head_dim); }

}  // namespace loom::kernels
