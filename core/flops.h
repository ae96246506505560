// FLOPs of one training step over the whole cluster, defined once for the simulator (`loom sim`,
// `loom plan`) and the executor (`loom run`): model FLOPs as Megatron counts them, and the extra
// forward work recomputation adds (hardware FLOPs = model + recompute).
#pragma once

#include <cstdint>

#include "core/model_spec.h"
#include "core/parallel_config.h"

namespace loom {

// 3× the forward matmuls (backward = 2× forward), the full attention square, and the LM head over
// the model's own vocabulary V (not the TP-padded one: padding is an implementation choice, not
// work the model needs, so it must not raise MFU). DESIGN.md's 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h))
// for a GPT model.
double model_flops_per_step(const ModelSpec& model, std::int64_t global_batch, int seq);

// The forward work recompute repeats in the backward: the attention core (selective), the whole
// layer (full) or the GEMMs op-level SAC re-runs (op: core/op_recompute.h); nothing for the LM
// head, which is never recomputed.
double recompute_flops_per_step(const ModelSpec& model, std::int64_t global_batch, int seq, Recompute recompute);

// FLOPs per second per GPU, in TFLOP/s.
double tflops_per_gpu(double flops_per_step, double step_time_s, int gpus);

}  // namespace loom
