#include "core/op_recompute.h"

namespace loom {

OpRerun op_rerun(const ModelSpec& m) {
  int mm = 0;
  // Whether a linear layer's output is re-run: not an aten.mm, or an even one in the block's order.
  auto rerun = [&](bool bias) { return bias || ++mm % 2 == 0; };
  const bool qkv_bias = m.linear_bias || m.qkv_bias;
  OpRerun r;
  // torchtitan's Attention: wq(x), wk(x), wv(x), SDPA, wo.
  r.q = rerun(qkv_bias);
  r.k = rerun(qkv_bias);
  r.v = rerun(qkv_bias);
  r.attn_out = rerun(m.linear_bias);
  // FeedForward: w2(silu(w1(x)) * w3(x)) evaluates w1, then w3, then w2; without a gate w1, then w2.
  r.gate = rerun(m.linear_bias);
  r.up = m.activation == Activation::kSwiGLU ? rerun(m.linear_bias) : r.gate;
  r.down = rerun(m.linear_bias);
  return r;
}

OpRecompute op_recompute(const ModelSpec& m) {
  const OpRerun r = op_rerun(m);
  auto share = [](bool rerun) { return rerun ? 1.0 : 0.0; };
  const double q = static_cast<double>(m.q_dim()), kv = static_cast<double>(m.kv_dim());
  OpRecompute s;
  s.qkv = (share(r.q) * q + share(r.k) * kv + share(r.v) * kv) / (q + 2.0 * kv);
  s.attn_out = share(r.attn_out);
  s.mlp_up = (share(r.gate) + share(r.up)) / 2.0;
  s.mlp_down = share(r.down);
  return s;
}

}  // namespace loom
