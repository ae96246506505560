#include "exec/model/gpt_stage.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace loom::exec {

namespace {
constexpr MemoryCategory kAct = MemoryCategory::kActivations;
constexpr MemoryCategory kWork = MemoryCategory::kWorkspace;
}  // namespace

GptStage::GptStage(const ModelSpec& model, const ParallelConfig& config, const StageLayout& layout, int seq,
                   Backend& backend, TensorParallel& tp, ParameterSource& params, DropoutSettings dropout,
                   Tracer* tracer, Communicator* ep, Communicator* cp, AttentionKernel attention)
    : model_(model),
      config_(config),
      layout_(layout),
      cp_(cp, backend, seq, config.cp_comm),
      seq_(cp_.local_seq()),
      backend_(backend),
      tp_(tp),
      params_(params),
      dropout_(dropout),
      layer_(model, layout.dims, config.micro_batch, seq, backend, tp, dropout, tracer, ep, cp, config.cp_comm,
             attention),
      tracer_(tracer),
      wgrad_(params, backend, config.schedule == Schedule::kZeroBubble, tracer) {
  const int head = layout_.final_unit >= 0 ? head_unit() : -1;
  if (layout_.word_embedding_unit >= 0) forward_order_.push_back(layout_.word_embedding_unit);
  if (layout_.position_unit >= 0) forward_order_.push_back(layout_.position_unit);
  for (std::size_t i = 0; i < layout_.layer_units.size(); ++i) {
    forward_order_.push_back(layout_.layer_units[i]);
    if (expert_unit(i) >= 0) forward_order_.push_back(expert_unit(i));
  }
  if (layout_.final_unit >= 0) {
    for (auto* order : {&forward_order_, &backward_order_}) {
      order->push_back(layout_.final_unit);
      if (head != layout_.final_unit) order->push_back(head);
    }
  }
  // The embedding's backward needs no parameters: the backward pass ends with the first layer.
  for (std::size_t i = layout_.layer_units.size(); i-- > 0;) {
    backward_order_.push_back(layout_.layer_units[i]);
    if (expert_unit(i) >= 0) backward_order_.push_back(expert_unit(i));
  }
}

TensorRef GptStage::acquire_next(int unit) {
  if (pass_ == nullptr || pass_next_ >= pass_->size() || (*pass_)[pass_next_] != unit)
    throw std::logic_error("GptStage: unit " + std::to_string(unit) + " acquired out of the pass's order");
  TensorRef p = params_.acquire(unit);
  if (++pass_next_ < pass_->size()) params_.prefetch((*pass_)[pass_next_]);
  return p;
}

float* GptStage::unit_gradients(int unit) {
  float* g = params_.gradients(unit);
  wgrad_.set_unit(unit, g, layout_.units[unit].padded);
  return g;
}

int GptStage::head_unit() const {
  if (!model_.tied_embeddings) return layout_.final_unit;
  return layout_.tied_head_unit >= 0 ? layout_.tied_head_unit : layout_.word_embedding_unit;
}

std::int64_t GptStage::head_weight_offset() const {
  const Unit& u = layout_.units[head_unit()];
  return model_.tied_embeddings ? u.params.front().offset : u.param("head.weight").offset;
}

template <class F>
void GptStage::for_each_position_run(std::int64_t first, std::int64_t rows, F&& f) const {
  const auto position = [&](std::int64_t i) { return cp_.position(static_cast<int>((first + i) % seq_)); };
  for (std::int64_t i = 0; i < rows;) {
    const std::int64_t start = position(i);
    std::int64_t n = 1;
    while (i + n < rows && position(i + n) == start + n) ++n;
    f(i, n, start);
    i += n;
  }
}

Tensor GptStage::embed(const MicroBatch& mb, Cache& cache) {
  const std::int64_t T = tokens(), h = model_.hidden;
  const LocalDims& d = layout_.dims;
  Tensor e = backend_.alloc(T, h, tp_.size() > 1 ? kWork : kAct,
                            backend_.compute_dtype());  // rows of other ranks' tokens stay zero
  TensorRef wte = acquire_next(layout_.word_embedding_unit);
  // Slices named as the simulator's ops (sim/cost_model.cc), closed around the communication.
  OpSlices op(tracer_, kComputeLane);
  op.next("embedding");
  backend_.embedding_forward(e.ref(), wte, mb.tokens, T, h, d.vocab_start, d.vocab_local);
  params_.release(layout_.word_embedding_unit);
  op.end();
  Tensor x = tp_.reduce_rows(std::move(e), kAct);
  if (layout_.position_unit >= 0) {
    ConstTensorRef wpe = acquire_next(layout_.position_unit);
    op.next("embedding");
    const std::int64_t first = tp_.first_local_token(T);
    for_each_position_run(first, x.rows(), [&](std::int64_t i, std::int64_t n, std::int64_t position) {
      backend_.axpy(x.ref() + i * h, 1.0f, wpe + position * h, n * h);
    });
    params_.release(layout_.position_unit);
  }
  if (dropout_.p > 0) {
    op.next("embedding");
    cache.embed_mask = alloc_mask(backend_, x.numel());
    cp_.for_each_run(mb.first_sequence, tp_.first_local_token(T), x.rows(),
                     [&](std::int64_t offset, std::int64_t n, std::int64_t first_token) {
                       backend_.dropout_mask(mask_data(cache.embed_mask) + offset * h, n * h, dropout_.key(-1, 3),
                                             static_cast<std::uint64_t>(first_token * h), dropout_.p);
                     });
    backend_.apply_mask(x.ref(), x.ref(), mask_data(cache.embed_mask), x.numel(), dropout_.keep_scale());
  }
  return x;
}

void GptStage::embed_backward(const MicroBatch& mb, const Tensor& d_out, Cache& cache) {
  const std::int64_t T = tokens(), h = model_.hidden;
  const LocalDims& d = layout_.dims;
  OpSlices op(tracer_, kComputeLane);
  op.next("embedding_bwd");
  Tensor masked;
  if (dropout_.p > 0) {
    masked = act(d_out.rows(), d_out.cols(), kWork);
    backend_.apply_mask(masked.ref(), d_out.ref(), mask_data(cache.embed_mask), d_out.numel(), dropout_.keep_scale());
    cache.embed_mask.reset();
  }
  const Tensor& dx = dropout_.p > 0 ? masked : d_out;
  if (layout_.position_unit >= 0) {
    float* g = params_.gradients(layout_.position_unit);
    const std::int64_t first = tp_.first_local_token(T);
    for_each_position_run(first, dx.rows(), [&](std::int64_t i, std::int64_t n, std::int64_t position) {
      backend_.axpy(g + position * h, 1.0f, dx.ref() + i * h, n * h);
    });
    wgrad_.ready(layout_.position_unit);
  }
  op.end();
  Tensor gathered;
  ConstTensorRef d_full = tp_.gather_rows(dx, gathered);
  float* g = params_.gradients(layout_.word_embedding_unit);
  op.next("embedding_bwd");
  backend_.embedding_backward(g, d_full, mb.tokens, T, h, d.vocab_start, d.vocab_local);
  wgrad_.ready(layout_.word_embedding_unit);
}

Tensor GptStage::head_forward(Tensor x, Cache& c, const MicroBatch& mb, float loss_scale) {
  const std::int64_t T = tokens();
  const int h = model_.hidden;
  const LocalDims& d = layout_.dims;
  const Unit& fu = layout_.units[layout_.final_unit];
  c.final_in = std::move(x);
  TensorRef fp = acquire_next(layout_.final_unit);
  LayerWeights norm{};
  norm.ln1_w = fp + fu.param("lnf.weight").offset;
  norm.ln1_b = fu.find("lnf.bias") ? ConstTensorRef(fp + fu.param("lnf.bias").offset) : ConstTensorRef();
  OpSlices op(tracer_, kComputeLane);
  op.next("final_norm");
  c.final_norm = act(c.final_in.rows(), h, kAct);
  if (model_.norm == Norm::kLayerNorm) {
    c.final_stats = backend_.empty(2, c.final_in.rows(), kAct);
    backend_.layernorm_forward(c.final_norm.ref(), c.final_stats.data(), c.final_stats.data() + c.final_in.rows(),
                               c.final_in.ref(), norm.ln1_w, norm.ln1_b, c.final_in.rows(), h);
  } else {
    c.final_stats = backend_.empty(1, c.final_in.rows(), kAct);
    backend_.rmsnorm_forward(c.final_norm.ref(), c.final_stats.data(), c.final_in.ref(), norm.ln1_w, c.final_in.rows(),
                             h);
  }
  op.end();
  const int hu = head_unit();
  TensorRef hp = hu == layout_.final_unit ? fp : acquire_next(hu);
  Tensor gathered;
  ConstTensorRef xf = tp_.gather_rows(c.final_norm, gathered);
  // fp32 logits (the LM head GEMM accumulates and writes fp32): the cross-entropy and its gradient stay fp32.
  op.next("lm_head");
  c.dlogits = backend_.empty(T, d.vocab_local, kAct);
  backend_.gemm(false, true, static_cast<int>(T), d.vocab_local, h, 1.0f, xf, h, hp + head_weight_offset(), h, 0.0f,
                c.dlogits.ref(), d.vocab_local);
  gathered.reset();
  if (keep_logits) {
    logits.resize(static_cast<std::size_t>(c.dlogits.numel()));
    backend_.to_host(logits.data(), c.dlogits.ref(), c.dlogits.numel());
  }
  if (hu != layout_.final_unit) params_.release(hu);
  params_.release(layout_.final_unit);

  // Vocabulary-parallel cross-entropy (Megatron): max, sum of exponentials and the target's logit
  // are reduced over TP ranks, so no rank ever holds the full row of logits.
  op.next("cross_entropy");
  Tensor stats = backend_.empty(3, T, kWork);
  float *mx = stats.data(), *sum = mx + T, *target = sum + T;
  TensorRef logits = c.dlogits.ref();
  if (tp_.size() == 1) {  // whole rows here: the max and the sum from one pass
    backend_.row_max_sum_exp(mx, sum, logits, T, d.vocab_local, d.vocab_valid_local);
  } else {
    backend_.row_max(mx, logits, T, d.vocab_local, d.vocab_valid_local);
    op.end();
    tp_.all_reduce(mx, T, ReduceOp::kMax);
    op.next("cross_entropy");
    backend_.row_sum_exp(sum, logits, mx, T, d.vocab_local, d.vocab_valid_local);
  }
  backend_.target_logit(target, logits, mb.targets, T, d.vocab_local, d.vocab_start);
  op.end();
  tp_.all_reduce(sum, 2 * T, ReduceOp::kSum);  // sum and target are adjacent
  op.next("cross_entropy");
  backend_.loss_add(mx, sum, target, T);  // on a GPU queued, the step's total read once at its end
  op.next("cross_entropy_bwd");           // the logits' gradient, made here, where the statistics are at hand
  if (c.dlogits.dtype() == backend_.compute_dtype()) {
    backend_.cross_entropy_grad(logits, mx, sum, mb.targets, T, d.vocab_local, d.vocab_valid_local, d.vocab_start,
                                loss_scale);
  } else {  // in the compute dtype the head's GEMMs read (bf16), from one pass over the fp32 logits, which go
    Tensor grad = act(T, d.vocab_local, kWork);
    backend_.cross_entropy_grad_into(grad.ref(), logits, mx, sum, mb.targets, T, d.vocab_local, d.vocab_valid_local,
                                     d.vocab_start, loss_scale);
    c.dlogits = std::move(grad);
  }
  return {};
}

Tensor GptStage::head_backward(Cache& c) {
  const std::int64_t T = tokens();
  const int h = model_.hidden;
  const LocalDims& d = layout_.dims;
  const int hu = head_unit();
  const Unit& fu = layout_.units[layout_.final_unit];
  TensorRef fp = acquire_next(layout_.final_unit);
  float* fg = unit_gradients(layout_.final_unit);
  TensorRef hp = hu == layout_.final_unit ? fp : acquire_next(hu);
  float* hg = hu == layout_.final_unit ? fg : unit_gradients(hu);
  OpSlices op(tracer_, kComputeLane);
  op.next("lm_head_bwd");
  Tensor dxf = act(T, h, kWork);  // beside the logits' gradient, in the compute dtype since the forward
  {
    op.end();
    Tensor gathered;
    ConstTensorRef xf = tp_.gather_rows(c.final_norm, gathered);
    op.next("lm_head_bwd");
    backend_.gemm(false, false, static_cast<int>(T), h, d.vocab_local, 1.0f, c.dlogits.ref(), d.vocab_local,
                  hp + head_weight_offset(), h, 0.0f, dxf.ref(), h);
    wgrad_.put("lm_head_bwd", hg + head_weight_offset(),
               [b = &backend_, v = d.vocab_local, h, rows = static_cast<int>(T), dl = c.dlogits.ref(), xf](float* dst) {
                 b->gemm(true, false, v, h, rows, 1.0f, dl, v, xf, h, 1.0f, dst, h);
               });
    if (gathered.empty())
      wgrad_.keep(std::move(c.final_norm));  // xf
    else
      wgrad_.keep(std::move(gathered));
  }
  wgrad_.keep(std::move(c.dlogits));
  op.end();
  if (hu != layout_.final_unit) {
    params_.release(hu);
    if (hu == layout_.tied_head_unit) wgrad_.ready(hu);  // the first stage's copy is separate
  }
  Tensor dxf_local = tp_.reduce_rows(std::move(dxf), kWork);
  op.next("final_norm_bwd");
  Tensor dx = act(c.final_in.rows(), h, kWork);
  ConstTensorRef w = fp + fu.param("lnf.weight").offset;
  float* gw = fg + fu.param("lnf.weight").offset;
  if (model_.norm == Norm::kLayerNorm)
    backend_.layernorm_backward(dx.ref(), gw, fg + fu.param("lnf.bias").offset, dxf_local.ref(), c.final_in.ref(), w,
                                c.final_stats.data(), c.final_stats.data() + c.final_in.rows(), c.final_in.rows(), h);
  else
    backend_.rmsnorm_backward(dx.ref(), gw, dxf_local.ref(), c.final_in.ref(), w, c.final_stats.data(),
                              c.final_in.rows(), h);
  params_.release(layout_.final_unit);
  wgrad_.ready(layout_.final_unit);
  c.final_in.reset();
  c.final_norm.reset();
  c.final_stats.reset();
  return dx;
}

Tensor GptStage::forward(int micro_batch, const MicroBatch& mb, Tensor input, float loss_scale) {
  Cache& c = caches_[micro_batch];
  c.layers.resize(layout_.layer_units.size());
  pass_ = &forward_order_;
  pass_next_ = 0;
  const bool first = layout_.word_embedding_unit >= 0, last = layout_.final_unit >= 0;
  Tensor x = first ? embed(mb, c) : std::move(input);
  for (std::size_t i = 0; i < layout_.layer_units.size(); ++i) {
    const int u = layout_.layer_units[i], eu = expert_unit(i);
    TensorRef p = acquire_next(u);
    MoeWeights moe;
    if (eu >= 0) moe = moe_weights(layout_.units[u], p, layout_.units[eu], acquire_next(eu));
    x = layer_.forward(layer_weights(layout_.units[u], p), std::move(x), c.layers[i], config_.recompute,
                       layout_.first_layer + static_cast<int>(i), mb.first_sequence, eu >= 0 ? &moe : nullptr);
    params_.release(u);
    if (eu >= 0) params_.release(eu);
  }
  if (last) return head_forward(std::move(x), c, mb, loss_scale);
  return x;
}

Tensor GptStage::backward(int micro_batch, const MicroBatch& mb, Tensor dout) {
  Cache& c = caches_.at(micro_batch);
  const bool first = layout_.word_embedding_unit >= 0, last = layout_.final_unit >= 0;
  pass_ = &backward_order_;
  pass_next_ = 0;
  Tensor holder;
  if (last) {
    holder = head_backward(c);
    wgrad_.settle();
  }
  const Tensor* d = last ? &holder : &dout;
  for (std::size_t k = layout_.layer_units.size(); k-- > 0;) {
    const int u = layout_.layer_units[k], eu = expert_unit(k);
    const Unit& unit = layout_.units[u];
    TensorRef p = acquire_next(u);
    float* g = unit_gradients(u);
    MoeWeights moe;
    MoeGrads moe_g;
    if (eu >= 0) {
      moe = moe_weights(unit, p, layout_.units[eu], acquire_next(eu));
      moe_g = moe_grads(unit, g, layout_.units[eu], unit_gradients(eu));
    }
    // The layer takes the gradient it is given (the stage's own, or the layer above's) and frees it.
    Tensor dy = d == &dout ? std::move(dout) : std::move(holder);
    holder = layer_.backward(layer_weights(unit, p), layer_grads(unit, g), c.layers[k], std::move(dy),
                             config_.recompute, layout_.first_layer + static_cast<int>(k), wgrad_,
                             eu >= 0 ? &moe : nullptr, eu >= 0 ? &moe_g : nullptr);
    wgrad_.settle();
    params_.release(u);
    wgrad_.ready(u);
    if (eu >= 0) {
      params_.release(eu);
      wgrad_.ready(eu);
    }
    d = &holder;
  }
  if (first) embed_backward(mb, *d, c);
  caches_.erase(micro_batch);
  wgrad_.close(micro_batch);
  if (first) return {};
  if (d == &dout) {  // a stage without layers passes the gradient through
    Tensor copy = act(dout.rows(), dout.cols(), kWork);
    backend_.copy(copy.ref(), dout.ref(), dout.numel());
    return copy;
  }
  return holder;
}

}  // namespace loom::exec
