// Optimizer settings and the learning-rate schedule: AdamW with global gradient-norm clipping, linear
// warmup then cosine decay to a floor (GPT-3 / Megatron-LM / llm.c).
#pragma once

namespace loom::exec {

struct OptimizerSettings {
  float learning_rate = 1e-3f;
  float min_lr_fraction = 0.1f;  // the cosine ends at learning_rate · this
  int warmup_steps = 0;
  int decay_steps = 0;  // steps of the whole schedule (usually --steps)
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;  // 0: no clipping
};

// Learning rate of step `step` (counting from 1).
float learning_rate_at(const OptimizerSettings& s, int step);

// Multiplier that brings the gradient's global norm down to the clip value (1 when already below).
float clip_coefficient(const OptimizerSettings& s, double grad_norm);

}  // namespace loom::exec
