#include "core/flops.h"

#include "core/op_recompute.h"

namespace loom {

double model_flops_per_step(const ModelSpec& m, std::int64_t global_batch, int seq) {
  const double tokens = static_cast<double>(global_batch) * seq;
  const double forward = m.layers * (m.layer_linear_flops_fwd(tokens) + m.layer_attention_flops_fwd(tokens, seq)) +
                         m.lm_head_flops_fwd(tokens, m.vocab) + m.mtp_flops_fwd(tokens, seq, m.vocab);
  return 3.0 * forward;  // backward = 2× forward
}

double recompute_flops_per_step(const ModelSpec& m, std::int64_t global_batch, int seq, Recompute recompute) {
  const double tokens = static_cast<double>(global_batch) * seq;
  switch (recompute) {
    case Recompute::kNone: return 0.0;
    // The multi-token-prediction modules' layers are recomputed as the decoder's are.
    case Recompute::kSelective:
      return m.layers * m.layer_attention_flops_fwd(tokens, seq) +
             m.mtp_layers * m.mtp_attention_flops_fwd(tokens, seq);
    case Recompute::kFull:
      return m.layers * (m.layer_linear_flops_fwd(tokens) + m.layer_attention_flops_fwd(tokens, seq)) +
             m.mtp_layers * m.mtp_layer_flops_fwd(tokens, seq);
    case Recompute::kOp: {
      // The re-run share of each GEMM's columns (MoE and MLA layers are not modelled under op: config_rules).
      const OpRecompute r = op_recompute(m);
      const double h = m.hidden, q = static_cast<double>(m.q_dim()), kv = static_cast<double>(m.kv_dim());
      const double up = (m.activation == Activation::kSwiGLU ? 2.0 : 1.0) * m.ffn_hidden;
      const double params =
          r.qkv * h * (q + 2.0 * kv) + r.attn_out * q * h + r.mlp_up * h * up + r.mlp_down * m.ffn_hidden * h;
      return (m.layers + m.mtp_layers) * 2.0 * tokens * params;
    }
  }
  return 0.0;
}

double tflops_per_gpu(double flops_per_step, double step_time_s, int gpus) {
  return flops_per_step / step_time_s / gpus / 1e12;
}

}  // namespace loom
