#include "core/flops.h"

namespace loom {

double model_flops_per_step(const ModelSpec& m, std::int64_t global_batch, int seq) {
  const double tokens = static_cast<double>(global_batch) * seq;
  const double forward = m.layers * (m.layer_linear_flops_fwd(tokens) + m.layer_attention_flops_fwd(tokens, seq)) +
                         m.lm_head_flops_fwd(tokens, m.vocab);
  return 3.0 * forward;  // backward = 2× forward
}

double recompute_flops_per_step(const ModelSpec& m, std::int64_t global_batch, int seq, Recompute recompute) {
  const double tokens = static_cast<double>(global_batch) * seq;
  switch (recompute) {
    case Recompute::kNone: return 0.0;
    case Recompute::kSelective: return m.layers * m.layer_attention_flops_fwd(tokens, seq);
    case Recompute::kFull:
      return m.layers * (m.layer_linear_flops_fwd(tokens) + m.layer_attention_flops_fwd(tokens, seq));
  }
  return 0.0;
}

double tflops_per_gpu(double flops_per_step, double step_time_s, int gpus) {
  return flops_per_step / step_time_s / gpus / 1e12;
}

}  // namespace loom
