#include "exec/optimizer.h"

#include <algorithm>
#include <cmath>

namespace loom::exec {

float learning_rate_at(const OptimizerSettings& s, int step) {
  if (s.warmup_steps > 0 && step <= s.warmup_steps)
    return s.learning_rate * static_cast<float>(step) / static_cast<float>(s.warmup_steps);
  const int span = std::max(1, s.decay_steps - s.warmup_steps);
  const double progress = std::clamp(static_cast<double>(step - s.warmup_steps) / span, 0.0, 1.0);
  const double min_lr = s.learning_rate * s.min_lr_fraction;
  return static_cast<float>(min_lr + 0.5 * (1.0 + std::cos(M_PI * progress)) * (s.learning_rate - min_lr));
}

float clip_coefficient(const OptimizerSettings& s, double grad_norm) {
  if (s.grad_clip <= 0 || grad_norm <= s.grad_clip) return 1.0f;
  return static_cast<float>(s.grad_clip / (grad_norm + 1e-6));
}

}  // namespace loom::exec
