#include "core/op_recompute.h"

namespace loom {

OpRecompute op_recompute(const ModelSpec& m) {
  int mm = 0;
  // Whether a linear layer's output is re-run: not an aten.mm, or an even one in the block's order.
  auto rerun = [&](bool bias) {
    if (bias) return 1.0;
    return ++mm % 2 == 0 ? 1.0 : 0.0;
  };
  const double q = static_cast<double>(m.q_dim()), kv = static_cast<double>(m.kv_dim());
  const bool qkv_bias = m.linear_bias || m.qkv_bias;
  OpRecompute r;
  // torchtitan's Attention: wq(x), wk(x), wv(x), SDPA, wo.
  const double wq = rerun(qkv_bias), wk = rerun(qkv_bias), wv = rerun(qkv_bias);
  r.qkv = (wq * q + wk * kv + wv * kv) / (q + 2.0 * kv);
  r.attn_out = rerun(m.linear_bias);
  // FeedForward: w2(silu(w1(x)) * w3(x)) evaluates w1, then w3, then w2; without a gate w1, then w2.
  if (m.activation == Activation::kSwiGLU) {
    const double w1 = rerun(m.linear_bias), w3 = rerun(m.linear_bias);
    r.mlp_up = (w1 + w3) / 2.0;
  } else {
    r.mlp_up = rerun(m.linear_bias);
  }
  r.mlp_down = rerun(m.linear_bias);
  return r;
}

}  // namespace loom
