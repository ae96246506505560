#include "exec/model/mlp.h"

namespace loom::exec {

void Mlp::forward(OpSlices& op, const MlpWeights& w, ConstTensorRef x, std::int64_t rows, const MlpActivations& a,
                  const float* scales, TensorRef scaled, TensorRef out) {
  const int r = static_cast<int>(rows), h = hidden_;
  op.next("mlp_up");
  backend_.gemm(false, true, r, ffn_in_, h, 1.0f, x, h, w.fc_w, h, 0.0f, a.fc, ffn_in_);
  if (!w.fc_b.null()) backend_.add_bias(a.fc, w.fc_b, rows, ffn_in_);
  op.next(activation_ == Activation::kSwiGLU ? "swiglu" : "gelu");
  activation(a, rows);
  if (scales != nullptr) backend_.scale_rows(scaled, a.act, scales, rows, ffn_);
  op.next("mlp_down");
  backend_.gemm(false, true, r, h, ffn_, 1.0f, scales != nullptr ? scaled : a.act, ffn_, w.proj_w, ffn_, 0.0f, out, h);
}

void Mlp::activation(const MlpActivations& a, std::int64_t rows) {
  if (activation_ == Activation::kSwiGLU)
    backend_.swiglu_forward(a.act, a.fc, rows, ffn_);
  else
    backend_.gelu_forward(a.act, a.fc, rows * ffn_in_);
}

void Mlp::backward_down(OpSlices& op, WeightGradStore& wg, const MlpWeights& w, const MlpGrads& g, ConstTensorRef dy,
                        std::int64_t rows, const MlpActivations& a, const float* scales, float* dscales,
                        TensorRef scaled, TensorRef dact, TensorRef dfc) {
  const int r = static_cast<int>(rows), h = hidden_, f = ffn_;
  backend_.gemm(false, false, r, ffn_, h, 1.0f, dy, h, w.proj_w, ffn_, 0.0f, dact, ffn_);
  // proj_w's gradient reads the scaled activation the forward multiplied (with scales), else the activation.
  const ConstTensorRef in = scales != nullptr ? ConstTensorRef(scaled) : ConstTensorRef(a.act);
  if (scales != nullptr) backend_.scale_rows(scaled, a.act, scales, rows, ffn_);
  wg.put("mlp_down_bwd", g.proj_w, [b = &backend_, r, h, f, dy, in](float* dst) {
    b->gemm(true, false, h, f, r, 1.0f, dy, h, in, f, 1.0f, dst, f);
  });
  if (scales != nullptr) {
    // The scales' gradients are the unscaled activation against dact; the activation's gradient is dact scaled.
    backend_.row_dots(dscales, dact, a.act, rows, ffn_);
    backend_.scale_rows(dact, dact, scales, rows, ffn_);
  }
  const bool swiglu = activation_ == Activation::kSwiGLU;
  op.next(swiglu ? "swiglu_bwd" : "gelu_bwd");
  if (swiglu)
    backend_.swiglu_backward(dfc, a.fc, dact, rows, ffn_);
  else
    backend_.gelu_backward(dfc, a.fc, dact, rows * ffn_in_);
}

void Mlp::backward_up(OpSlices& op, WeightGradStore& wg, const MlpWeights& w, const MlpGrads& g, ConstTensorRef dfc,
                      ConstTensorRef x, std::int64_t rows, TensorRef dx) {
  const int r = static_cast<int>(rows), h = hidden_, f_in = ffn_in_;
  op.next("mlp_up_bwd");
  if (g.fc_b != nullptr) backend_.bias_grad(g.fc_b, dfc, rows, ffn_in_);
  wg.put("mlp_up_bwd", g.fc_w, [b = &backend_, r, h, f_in, dfc, x](float* dst) {
    b->gemm(true, false, f_in, h, r, 1.0f, dfc, f_in, x, h, 1.0f, dst, h);
  });
  backend_.gemm(false, false, r, h, ffn_in_, 1.0f, dfc, ffn_in_, w.fc_w, h, 0.0f, dx, h);
}

}  // namespace loom::exec
