// torchtitan's op-level selective activation checkpointing, `--recompute op` (torchtitan's
// activation_checkpoint mode "selective" with selective_ac_option "op", its Llama 3 configs' setting;
// _apply_ac_to_transformer_block in parallelize.py). Each transformer block's forward runs under a
// checkpoint whose policy keeps the outputs of the ops on its _save_list — aten.mm, scaled-dot-product
// attention, the TP reduce-scatters (_c10d_functional.reduce_scatter_tensor) and aten.max (FP8 scales)
// — except every second aten.mm of the block (the policy counts them afresh each forward, as its
// context_fn makes a new counter per call), and re-runs every other op in the backward: norms, the
// activation function, residual adds, FP8 casts, the TP all-gathers. A linear layer with a bias runs
// as aten.addmm, not on the list: it re-runs and is not counted. A torchao Float8Linear multiplies its
// float8 tensor subclasses with aten.mm, which the policy (a dispatch mode, ahead of the subclass's own
// dispatch to aten._scaled_mm) sees and counts as in bf16. For Llama's wq, wk, wv, wo, w1, w3, w2:
// wk, wo and w3 re-run.
#pragma once

#include "core/model_spec.h"

namespace loom {

// Which of a layer's linear layers op-level SAC re-runs in the backward (true) or keeps the output of
// (false), in torchtitan's order: wq, wk, wv, wo, then w1 (the gate, or the one up projection without
// SwiGLU), w3 (SwiGLU's up projection; equal to gate without SwiGLU), w2.
struct OpRerun {
  bool q = true, k = true, v = true, attn_out = true, gate = true, up = true, down = true;
};
OpRerun op_rerun(const ModelSpec& model);

// Of each of a layer's GEMMs as Loom fuses them — QKV, the attention output, MLP up (gate and up under
// SwiGLU) and MLP down — the share of its output columns that op-level SAC re-runs in the backward; the
// rest it keeps.
struct OpRecompute {
  double qkv = 0, attn_out = 0, mlp_up = 0, mlp_down = 0;
};
OpRecompute op_recompute(const ModelSpec& model);

}  // namespace loom
