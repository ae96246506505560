// The MLP block's GEMMs and activation (column-parallel up projection, GELU or SwiGLU, row-parallel down
// projection) on `rows` token rows, shared by the dense layer, the shared expert and the routed experts.
// Callers own the storage (views in the backend's compute dtype): a dense layer allocates per call, an MoE
// layer one buffer for all its experts' rows (as a grouped GEMM does), of which each expert takes a slice.
// Optional row scales (a routed copy's router probability) multiply the activation's output before the
// down projection, as Megatron-core's experts apply the probabilities (moe_utils.py, experts.py): each
// scale's gradient is then a dot product of two rows the backward has anyway.
#pragma once

#include "core/model_spec.h"
#include "exec/backend.h"
#include "exec/model/weight_grad_store.h"
#include "exec/trace.h"

namespace loom::exec {

struct MlpWeights {
  ConstTensorRef fc_w, fc_b, proj_w;  // [ffn_in, h], [ffn_in] or null, [h, ffn]
};
struct MlpGrads {
  float *fc_w = nullptr, *fc_b = nullptr, *proj_w = nullptr;
};
// What the backward reads: the activation function's input [rows, ffn_in] and its unscaled output [rows, ffn].
struct MlpActivations {
  TensorRef fc, act;
};

class Mlp {
 public:
  // ffn: this rank's inner width (ffn_in = 2·ffn for SwiGLU).
  Mlp(Backend& backend, Activation activation, int hidden, int ffn)
      : backend_(backend),
        activation_(activation),
        hidden_(hidden),
        ffn_(ffn),
        ffn_in_(activation == Activation::kSwiGLU ? 2 * ffn : ffn) {}
  int ffn() const { return ffn_; }
  int ffn_in() const { return ffn_in_; }

  // out [rows, h] ← proj(scales · act(fc(x))), partial sums over TP, keeping a.fc and a.act. Opens the op
  // slices "mlp_up", the activation's and "mlp_down". With `scales` (fp32 backend memory, [rows]),
  // `scaled` [rows, ffn] holds the scaled activation.
  void forward(OpSlices& op, const MlpWeights& w, ConstTensorRef x, std::int64_t rows, const MlpActivations& a,
               const float* scales, TensorRef scaled, TensorRef out);
  // a.act ← act(a.fc), in the caller's op slice (op-level recompute rebuilds it alone).
  void activation(const MlpActivations& a, std::int64_t rows);
  // From the output's gradient dy [rows, h] (all rows) through the down projection and the activation:
  // accumulates proj_w's gradient, writes dfc [rows, ffn_in] (dact [rows, ffn] is scratch) and, with
  // scales, the scales' gradients (partial over TP) into dscales, `scaled` [rows, ffn] being scratch too.
  // Runs in the caller's current op slice, then the activation's. proj_w's gradient goes through `wg`
  // (zero-bubble defers it: the caller keeps dy and the activation, or `scaled`, until it runs).
  void backward_down(OpSlices& op, WeightGradStore& wg, const MlpWeights& w, const MlpGrads& g, ConstTensorRef dy,
                     std::int64_t rows, const MlpActivations& a, const float* scales, float* dscales, TensorRef scaled,
                     TensorRef dact, TensorRef dfc);
  // Through the up projection, opening "mlp_up_bwd": accumulates fc's gradients from x (the block's
  // input, all rows) and writes dx [rows, h] (partial over TP). fc_w's gradient goes through `wg` (the
  // caller keeps dfc and x until it runs).
  void backward_up(OpSlices& op, WeightGradStore& wg, const MlpWeights& w, const MlpGrads& g, ConstTensorRef dfc,
                   ConstTensorRef x, std::int64_t rows, TensorRef dx);

 private:
  Backend& backend_;
  Activation activation_;
  int hidden_, ffn_, ffn_in_;
};

}  // namespace loom::exec
