#include "exec/model/transformer_layer.h"

#include <array>
#include <stdexcept>

namespace loom::exec {

namespace {
constexpr MemoryCategory kAct = MemoryCategory::kActivations;
constexpr MemoryCategory kWork = MemoryCategory::kWorkspace;

template <class P>
P at(const Unit& unit, P base, const char* suffix) {
  const ParamSlot* s = unit.find(suffix);
  return s == nullptr ? P{} : base + s->offset;
}

template <class P>
LayerSlots<P> slots(const Unit& u, P base) {
  return {at(u, base, "ln1.weight"),         at(u, base, "ln1.bias"),          at(u, base, "attn.qkv.weight"),
          at(u, base, "attn.qkv.bias"),      at(u, base, "attn.proj.weight"),  at(u, base, "attn.proj.bias"),
          at(u, base, "ln2.weight"),         at(u, base, "ln2.bias"),          at(u, base, "mlp.fc.weight"),
          at(u, base, "mlp.fc.bias"),        at(u, base, "mlp.proj.weight"),   at(u, base, "mlp.proj.bias"),
          at(u, base, "attn.q_norm.weight"), at(u, base, "attn.k_norm.weight")};
}
}  // namespace

LayerWeights layer_weights(const Unit& unit, ConstTensorRef base) { return slots(unit, base); }
LayerGrads layer_grads(const Unit& unit, float* base) { return slots(unit, base); }

Tensor alloc_mask(Backend& backend, std::int64_t n) { return backend.empty((n + 3) / 4, 1, kAct); }

Tensor TransformerLayer::row_mask(std::int64_t rows, std::int64_t cols, int layer, int site,
                                  std::int64_t first_sequence) {
  Tensor mask = alloc_mask(backend_, rows * cols);
  cp_.for_each_run(first_sequence, tp_.first_local_token(tokens()), rows,
                   [&](std::int64_t offset, std::int64_t n, std::int64_t first_token) {
                     backend_.dropout_mask(mask_data(mask) + offset * cols, n * cols, dropout_.key(layer, site),
                                           static_cast<std::uint64_t>(first_token * cols), dropout_.p);
                   });
  return mask;
}

void TransformerLayer::attention_mask(LayerCache& c, int layer) {
  const AttentionShape s = attention_shape();
  c.attn_mask = backend_.empty((s.probs_numel() + 3) / 4, 1, c.probs.category());
  const std::int64_t per_sequence = static_cast<std::int64_t>(s.heads) * s.seq * s.seq;
  for (int b = 0; b < s.batch; ++b) {
    const std::int64_t global_head0 =
        (c.first_sequence + b) * model_.heads + static_cast<std::int64_t>(tp_.rank()) * s.heads;
    backend_.dropout_mask(mask_data(c.attn_mask) + b * per_sequence, per_sequence, dropout_.key(layer, 0),
                          static_cast<std::uint64_t>(global_head0 * s.seq * s.seq), dropout_.p);
  }
  c.dropped = act(s.probs_numel(), 1, c.probs.category());
  backend_.apply_mask(c.dropped.ref(), c.probs.ref(), mask_data(c.attn_mask), s.probs_numel(), dropout_.keep_scale());
}

AttentionShape TransformerLayer::attention_shape() const {
  return cp_.shape(batch_, dims_.heads, dims_.kv_heads, dims_.head_dim);
}

AttentionDropout TransformerLayer::ring_dropout(const LayerCache& c, int layer) const {
  if (dropout_.p <= 0) return {};
  const std::uint64_t S = static_cast<std::uint64_t>(cp_.seq());
  const std::int64_t global_head0 =
      c.first_sequence * model_.heads + static_cast<std::int64_t>(tp_.rank()) * dims_.heads;
  return {dropout_.p, dropout_.key(layer, 0), static_cast<std::uint64_t>(global_head0) * S * S, model_.heads};
}

void TransformerLayer::norm_forward(Tensor& out, Tensor& stats, const Tensor& x, ConstTensorRef w, ConstTensorRef b) {
  const std::int64_t rows = x.rows(), h = x.cols();
  out = act(rows, h, kAct);
  if (model_.norm == Norm::kLayerNorm) {
    stats = backend_.empty(2, rows, kAct);
    backend_.layernorm_forward(out.ref(), stats.data(), stats.data() + rows, x.ref(), w, b, rows, h);
  } else {
    stats = backend_.empty(1, rows, kAct);
    backend_.rmsnorm_forward(out.ref(), stats.data(), x.ref(), w, rows, h);
  }
}

void TransformerLayer::norm_backward(TensorRef dx, float* dw, float* db, ConstTensorRef dout, const Tensor& x,
                                     ConstTensorRef w, const Tensor& stats) {
  const std::int64_t rows = x.rows(), h = x.cols();
  if (model_.norm == Norm::kLayerNorm)
    backend_.layernorm_backward(dx, dw, db, dout, x.ref(), w, stats.data(), stats.data() + rows, rows, h);
  else
    backend_.rmsnorm_backward(dx, dw, dout, x.ref(), w, stats.data(), rows, h);
}

// A TP sum over all rows reduced to this rank's, plus a part already whole for them (an MoE layer's
// routed output under expert TP 1, the router's input gradient); either may be empty.
Tensor TransformerLayer::combine_local(Tensor partial, Tensor whole) {
  if (partial.empty()) return whole;
  Tensor local = tp_.reduce_rows(std::move(partial), kWork);
  if (!whole.empty()) backend_.axpy(local.ref(), 1.0f, whole.ref(), local.numel());
  return local;
}

std::vector<TransformerLayer::ColumnBlock> TransformerLayer::qkv_blocks() const {
  const int q = dims_.heads * dims_.head_dim, kv = dims_.kv_heads * dims_.head_dim;
  return {{0, q, rerun_.q}, {q, kv, rerun_.k}, {q + kv, kv, rerun_.v}};
}

std::vector<TransformerLayer::ColumnBlock> TransformerLayer::mlp_up_blocks() const {
  if (model_.activation == Activation::kSwiGLU)
    return {{0, dims_.ffn, rerun_.gate}, {dims_.ffn, dims_.ffn, rerun_.up}};  // [gate | up]
  return {{0, dims_.ffn_in, rerun_.gate}};
}

Tensor TransformerLayer::kept_copy(const Tensor& t) {
  Tensor kept = act(t.rows(), t.cols(), kAct);
  backend_.copy(kept.ref(), t.ref(), t.numel());
  return kept;
}

Tensor TransformerLayer::keep_columns(const Tensor& src, int ld, const std::vector<ColumnBlock>& blocks) {
  int cols = 0;
  for (const ColumnBlock& b : blocks) cols += b.rerun ? 0 : b.cols;
  if (cols == 0) return {};
  Tensor kept = act(src.rows(), cols, kAct);
  int at = 0;
  for (const ColumnBlock& b : blocks) {
    if (b.rerun) continue;
    backend_.copy_rows(kept.ref() + at, cols, src.ref() + b.first, ld, src.rows(), b.cols);
    at += b.cols;
  }
  return kept;
}

void TransformerLayer::rebuild_columns(Tensor& dst, int ld, const std::vector<ColumnBlock>& blocks, const Tensor* kept,
                                       ConstTensorRef x, int k, ConstTensorRef w) {
  const int rows = static_cast<int>(dst.rows());
  int at = 0;  // the next kept block's first column in `kept`
  for (std::size_t i = 0; i < blocks.size();) {
    const ColumnBlock& b = blocks[i];
    if (kept != nullptr && !b.rerun) {
      backend_.copy_rows(dst.ref() + b.first, ld, kept->ref() + at, kept->cols(), rows, b.cols);
      at += b.cols;
      ++i;
      continue;
    }
    int cols = 0;
    for (; i < blocks.size() && (kept == nullptr || blocks[i].rerun); ++i) cols += blocks[i].cols;
    backend_.gemm(false, true, rows, cols, k, 1.0f, x, k, w + static_cast<std::int64_t>(b.first) * k, k, 0.0f,
                  dst.ref() + b.first, ld);
  }
}

void TransformerLayer::attention_input(const LayerWeights& w, LayerCache& c, OpSlices& op, const Tensor* kept,
                                       bool keep) {
  const int h = dims_.hidden, qkv_cols = static_cast<int>(dims_.qkv_cols);
  op.next("norm");
  norm_forward(c.ln1, c.stats1, c.x, w.ln1_w, w.ln1_b);
  {
    Tensor gathered;
    op.end();
    ConstTensorRef a_in = tp_.gather_rows(c.ln1, gathered);
    op.next("qkv");
    c.qkv = act(tokens(), qkv_cols, kAct);
    rebuild_columns(c.qkv, qkv_cols, qkv_blocks(), kept, a_in, h, w.qkv_w);
  }
  // A bias makes its linear layer an aten.addmm, which op-level SAC re-runs (all three, with a QKV bias).
  if (!w.qkv_b.null()) backend_.add_bias(c.qkv.ref(), w.qkv_b, tokens(), qkv_cols);
  if (keep) c.op.qkv = keep_columns(c.qkv, qkv_cols, qkv_blocks());
  if (model_.qk_norm != QkNorm::kNone) {
    op.next("norm");
    qk_norm_forward(w, c);
    op.next("qkv");
  }
  if (model_.position == PositionEmbedding::kRotary) backend_.rope(c.qkv.ref(), attention_shape(), false);
}

std::array<TransformerLayer::QkPart, 2> TransformerLayer::qk_parts(LayerCache& c) const {
  const int q = dims_.heads * dims_.head_dim, kv = dims_.kv_heads * dims_.head_dim;
  const bool per_head = model_.qk_norm == QkNorm::kPerHead;
  return {QkPart{0, q, per_head ? dims_.head_dim : q, &c.q_in, &c.q_rstd},
          QkPart{q, kv, per_head ? dims_.head_dim : kv, &c.k_in, &c.k_rstd}};
}

void TransformerLayer::qk_norm_forward(const LayerWeights& w, LayerCache& c) {
  const std::int64_t T = tokens(), ld = dims_.qkv_cols;
  const std::array<QkPart, 2> parts = qk_parts(c);
  const ConstTensorRef gains[] = {w.q_norm_w, w.k_norm_w};
  for (int i = 0; i < 2; ++i) {
    const QkPart& p = parts[i];
    *p.in = act(T, p.cols, kAct);
    backend_.copy_rows(p.in->ref(), p.cols, c.qkv.ref() + p.first, ld, T, p.cols);
    *p.rstd = backend_.empty(1, p.rows(T), kAct);
    Tensor out = act(T, p.cols, kWork);
    backend_.rmsnorm_forward(out.ref(), p.rstd->data(), p.in->ref(), gains[i], p.rows(T), p.width);
    backend_.copy_rows(c.qkv.ref() + p.first, ld, out.ref(), p.cols, T, p.cols);
  }
}

void TransformerLayer::qk_norm_backward(const LayerWeights& w, const LayerGrads& g, LayerCache& c, Tensor& dqkv) {
  const std::int64_t T = tokens(), ld = dims_.qkv_cols;
  const std::array<QkPart, 2> parts = qk_parts(c);
  const ConstTensorRef gains[] = {w.q_norm_w, w.k_norm_w};
  float* const grads[] = {g.q_norm_w, g.k_norm_w};
  for (int i = 0; i < 2; ++i) {
    const QkPart& p = parts[i];
    Tensor dout = act(T, p.cols, kWork), din = act(T, p.cols, kWork);
    backend_.copy_rows(dout.ref(), p.cols, dqkv.ref() + p.first, ld, T, p.cols);
    backend_.rmsnorm_backward(din.ref(), grads[i], dout.ref(), p.in->ref(), gains[i], p.rstd->data(), p.rows(T),
                              p.width);
    backend_.copy_rows(dqkv.ref() + p.first, ld, din.ref(), p.cols, T, p.cols);
    p.in->reset();
    p.rstd->reset();
  }
}

Tensor TransformerLayer::add_residual(const Tensor& x, Tensor branch, ConstTensorRef bias, Tensor& mask, int layer,
                                      int site, std::int64_t first_sequence) {
  const int h = dims_.hidden;
  if (dropout_.p > 0) mask = row_mask(branch.rows(), h, layer, site, first_sequence);
  Tensor sum = act(x.rows(), h, kAct);
  backend_.bias_dropout_add(sum.ref(), x.ref(), branch.ref(), bias, dropout_.p > 0 ? mask_data(mask) : nullptr,
                            branch.rows(), h, dropout_.keep_scale());
  return sum;
}

Tensor TransformerLayer::forward(const LayerWeights& w, Tensor x, LayerCache& c, Recompute recompute, int layer,
                                 std::int64_t first_sequence, const MoeWeights* moe) {
  const std::int64_t T = tokens();
  const int h = dims_.hidden;
  const int ctx_cols = dims_.heads * dims_.head_dim;
  c.x = std::move(x);
  c.first_sequence = first_sequence;
  const bool dropout = dropout_.p > 0;
  const bool sac = recompute == Recompute::kOp;
  // check_recompute refuses op-level recompute without a fused kernel: its policy keeps SDPA's output.
  if (sac && !fused()) throw std::logic_error("op-level recompute runs flash attention only");
  OpSlices op(tracer_, kComputeLane);
  attention_input(w, c, op, nullptr, sac);
  c.ctx = act(T, ctx_cols, kAct);
  if (fused()) {
    // Flash style, as TransformerEngine runs CP: the output and its log-sum-exp are kept, the scores
    // recomputed in the backward (so selective recomputation has nothing more to drop).
    if (ring())
      op.end();  // the ring traces its steps as the simulator names them
    else
      op.next("flash_attention");
    const AttentionShape s = attention_shape();
    c.lse = backend_.empty(1, static_cast<std::int64_t>(s.batch) * s.heads * s.seq, kAct);
    cp_.attention_forward(c.ctx.ref(), c.lse.data(), c.qkv.ref(), s, ring_dropout(c, layer));
  } else {
    c.probs = act(attention_shape().probs_numel(), 1, recompute == Recompute::kSelective ? kWork : kAct);
    // One call computes QKᵀ and the softmax (the simulator's "qk" and "softmax"); the dropout's mask and
    // its application are the simulator's "attn_dropout".
    op.next("qk softmax");
    backend_.attention_probs(c.probs.ref(), c.qkv.ref(), attention_shape());
    if (dropout) {
      op.next("attn_dropout");
      attention_mask(c, layer);
    }
    op.next("av");
    backend_.attention_context(c.ctx.ref(), dropout ? c.dropped.ref() : c.probs.ref(), c.qkv.ref(), attention_shape());
  }
  if (recompute == Recompute::kSelective) {
    c.probs.reset();
    c.dropped.reset();
    c.attn_mask.reset();
  }
  // Op-level SAC frees what it does not keep as soon as nothing reads it, as PyTorch's eager forward
  // under a checkpoint does: the norm's output and Q, K, V after RoPE once attention has run.
  if (sac) {
    c.ln1.reset();
    c.stats1.reset();
    c.qkv.reset();
    c.q_in.reset();
    c.k_in.reset();
    c.q_rstd.reset();
    c.k_rstd.reset();
  }

  op.next("attn_out");
  Tensor o = act(T, h, kWork);
  backend_.gemm(false, true, static_cast<int>(T), h, ctx_cols, 1.0f, c.ctx.ref(), ctx_cols, w.proj_w, ctx_cols, 0.0f,
                o.ref(), h);
  op.end();
  if (sac && !rerun_.attn_out) c.op.attn_out = kept_copy(o);
  Tensor o_local = tp_.reduce_rows(std::move(o), kWork);
  if (sac && sequence_parallel()) c.op.attn_rs = kept_copy(o_local);
  op.next("residual");
  c.x2 = add_residual(c.x, std::move(o_local), w.proj_b, c.proj_mask, layer, 1, first_sequence);

  op.next("norm");
  norm_forward(c.ln2, c.stats2, c.x2, w.ln2_w, w.ln2_b);
  MoeOutput f2;  // a dense MLP's output is all partial
  {
    Tensor gathered;
    op.end();
    ConstTensorRef m_in = tp_.gather_rows(c.ln2, gathered);
    if (moe != nullptr) {
      f2 = moe_.forward(op, *moe, m_in, c.ln2, T, c.moe);
    } else {
      c.fc = act(T, dims_.ffn_in, kAct);
      c.act = act(T, dims_.ffn, kAct);
      f2.partial = act(T, h, kWork);
      mlp_.forward(op, {w.fc_w, w.fc_b, w.fc2_w}, m_in, T, {c.fc.ref(), c.act.ref()}, nullptr, nullptr,
                   f2.partial.ref());
    }
  }
  op.end();
  if (sac && !rerun_.down) c.op.mlp_down = kept_copy(f2.partial);
  if (sac) {
    c.op.mlp_up = keep_columns(c.fc, dims_.ffn_in, mlp_up_blocks());
    c.ln2.reset();
    c.stats2.reset();
    c.fc.reset();
    c.act.reset();
  }
  Tensor f2_local = combine_local(std::move(f2.partial), std::move(f2.local));
  if (sac && sequence_parallel()) c.op.mlp_rs = kept_copy(f2_local);
  op.next("residual");
  Tensor y = add_residual(c.x2, std::move(f2_local), w.fc2_b, c.mlp_mask, layer, 2, first_sequence);
  op.end();

  if (recompute == Recompute::kFull) {
    Tensor input = std::move(c.x);
    c = LayerCache{};
    c.x = std::move(input);
    c.first_sequence = first_sequence;
  } else if (sac) {
    LayerCache kept;
    kept.x = std::move(c.x);
    kept.ctx = std::move(c.ctx);
    kept.lse = std::move(c.lse);
    kept.op = std::move(c.op);
    kept.first_sequence = first_sequence;
    c = std::move(kept);
  }
  return y;
}

Tensor TransformerLayer::backward(const LayerWeights& w, const LayerGrads& g, LayerCache& c, Tensor dy_in,
                                  Recompute recompute, int layer, WeightGradStore& wg, const MoeWeights* moe,
                                  const MoeGrads* moe_grads) {
  if (!c.complete() && recompute == Recompute::kOp) {
    rebuild(w, c, layer);
  } else if (!c.complete()) {
    // Full recomputation: run the block forward again from its stored input, its ops traced as
    // "recompute <op>".
    Tensor input = act(c.x.rows(), c.x.cols(), kAct);
    backend_.copy(input.ref(), c.x.ref(), c.x.numel());
    c.x.reset();
    OpPrefix again(tracer_, "recompute ");
    Tensor y = forward(w, std::move(input), c, Recompute::kNone, layer, c.first_sequence, moe);
  }
  const bool dropout = dropout_.p > 0;
  // Through the MLP's dropout: the residual path takes dy_in, the MLP branch the masked gradient.
  Tensor dy_masked;
  if (dropout) {
    dy_masked = act(dy_in.rows(), dy_in.cols(), kWork);
    backend_.apply_mask(dy_masked.ref(), dy_in.ref(), mask_data(c.mlp_mask), dy_in.numel(), dropout_.keep_scale());
  }
  const Tensor& dy = dropout ? dy_masked : dy_in;
  // Whether a weight gradient reads dy, and the attention projection's output gradient, in place (not
  // an all-gathered copy): zero-bubble then keeps them for the W pass.
  bool reads_dy = moe != nullptr, reads_do = false;
  bool reads_ln2 = moe != nullptr, reads_ln1 = false;  // the same for the MLP's and QKV's inputs
  // Under sequence parallelism a backward GEMM op's slice also holds the all-gather of its input
  // (between its bias gradient and its GEMMs); the all-gather has its own slice on the comm lane.
  OpSlices op(tracer_, kComputeLane);
  const std::int64_t T = tokens();
  const int h = dims_.hidden, qkv_cols = static_cast<int>(dims_.qkv_cols);
  const int ctx_cols = dims_.heads * dims_.head_dim, Ti = static_cast<int>(T);

  // MLP: y = x2 + fc2(act(fc(ln2(x2)))).
  op.next("mlp_down_bwd");
  if (g.fc2_b != nullptr) backend_.bias_grad(g.fc2_b, dy.ref(), dy.rows(), h);
  Tensor dx2 = act(dy_in.rows(), h, kWork);
  {
    MoeOutput dm;  // a dense MLP's input gradient is all partial
    if (moe != nullptr) {
      dm = moe_.backward(op, wg, *moe, *moe_grads, dy, c.ln2, T, c.moe);
    } else {
      const MlpWeights mw{w.fc_w, w.fc_b, w.fc2_w};
      const MlpGrads mg{g.fc_w, g.fc_b, g.fc2_w};
      Tensor dfc = act(T, dims_.ffn_in, kWork);
      {
        Tensor gathered;
        ConstTensorRef dy_full = tp_.gather_rows(dy, gathered);
        Tensor dact = act(T, dims_.ffn, kWork);
        mlp_.backward_down(op, wg, mw, mg, dy_full, T, {c.fc.ref(), c.act.ref()}, nullptr, nullptr, nullptr, dact.ref(),
                           dfc.ref());
        reads_dy = gathered.empty();
        wg.keep(std::move(gathered));  // dy_full (the all-gathered dy), or dy itself: kept below
      }
      Tensor gathered;
      ConstTensorRef m_in = tp_.gather_rows(c.ln2, gathered);
      dm.partial = act(T, h, kWork);
      mlp_.backward_up(op, wg, mw, mg, dfc.ref(), m_in, T, dm.partial.ref());
      wg.keep(std::move(dfc));
      reads_ln2 = gathered.empty();
      wg.keep(std::move(gathered));  // m_in (the all-gathered c.ln2), or c.ln2 itself
    }
    op.end();
    Tensor dm_local = combine_local(std::move(dm.partial), std::move(dm.local));
    op.next("norm_bwd");
    norm_backward(dx2.ref(), g.ln2_w, g.ln2_b, dm_local.ref(), c.x2, w.ln2_w, c.stats2);
    op.next("residual_bwd");
    backend_.axpy(dx2.ref(), 1.0f, dy_in.ref(), dy_in.numel());
    op.end();
  }
  wg.keep(std::move(c.act));
  c.fc.reset();
  c.moe = MoeCache{};
  if (reads_ln2)
    wg.keep(std::move(c.ln2));
  else
    c.ln2.reset();
  c.stats2.reset();
  c.x2.reset();

  // Attention: x2 = x + dropout(proj(attn(qkv(ln1(x))))).
  Tensor do_masked;
  if (dropout) {
    do_masked = act(dx2.rows(), h, kWork);
    backend_.apply_mask(do_masked.ref(), dx2.ref(), mask_data(c.proj_mask), dx2.numel(), dropout_.keep_scale());
  }
  const Tensor& d_o = dropout ? do_masked : dx2;
  op.next("attn_out_bwd");
  if (g.proj_b != nullptr) backend_.bias_grad(g.proj_b, d_o.ref(), d_o.rows(), h);
  Tensor dqkv = act(T, qkv_cols, kWork);
  {
    Tensor gathered;
    ConstTensorRef do_full = tp_.gather_rows(d_o, gathered);
    Tensor dctx = act(T, ctx_cols, kWork);
    backend_.gemm(false, false, Ti, ctx_cols, h, 1.0f, do_full, h, w.proj_w, ctx_cols, 0.0f, dctx.ref(), ctx_cols);
    wg.put("attn_out_bwd", g.proj_w, [b = &backend_, Ti, h, ctx_cols, do_full, ctx = c.ctx.ref()](float* dst) {
      b->gemm(true, false, h, ctx_cols, Ti, 1.0f, do_full, h, ctx, ctx_cols, 1.0f, dst, ctx_cols);
    });
    reads_do = gathered.empty();
    if (fused()) {
      if (ring())
        op.end();
      else
        op.next("flash_attention_bwd");
      cp_.attention_backward(dqkv.ref(), dctx.ref(), c.ctx.ref(), c.lse.data(), c.qkv.ref(), attention_shape(),
                             ring_dropout(c, layer));
    } else {
      if (c.probs.empty()) {  // selective recomputation of the attention core
        op.next("recompute qk softmax");
        c.probs = act(attention_shape().probs_numel(), 1, kWork);
        backend_.attention_probs(c.probs.ref(), c.qkv.ref(), attention_shape());
        if (dropout) {
          op.next("recompute attn_dropout");
          attention_mask(c, layer);
        }
      }
      // One call for the simulator's "av_bwd", "softmax_bwd" and "qk_bwd".
      op.next("attention_bwd");
      backend_.attention_backward(dqkv.ref(), dctx.ref(), c.probs.ref(), dropout ? c.dropped.ref() : nullptr,
                                  dropout ? mask_data(c.attn_mask) : nullptr, dropout_.keep_scale(), c.qkv.ref(),
                                  attention_shape());
    }
    wg.keep(std::move(gathered));  // do_full (the all-gathered d_o), or d_o itself: kept below
  }
  c.lse.reset();
  c.probs.reset();
  c.dropped.reset();
  c.attn_mask.reset();
  wg.keep(std::move(c.ctx));
  op.next("qkv_bwd");
  if (model_.position == PositionEmbedding::kRotary) backend_.rope(dqkv.ref(), attention_shape(), true);
  if (model_.qk_norm != QkNorm::kNone) {
    op.next("norm_bwd");
    qk_norm_backward(w, g, c, dqkv);
    op.next("qkv_bwd");
  }
  if (g.qkv_b != nullptr) backend_.bias_grad(g.qkv_b, dqkv.ref(), T, qkv_cols);
  Tensor da;
  {
    Tensor gathered;
    ConstTensorRef a_in = tp_.gather_rows(c.ln1, gathered);
    wg.put("qkv_bwd", g.qkv_w, [b = &backend_, Ti, h, qkv_cols, dq = dqkv.ref(), a_in](float* dst) {
      b->gemm(true, false, qkv_cols, h, Ti, 1.0f, dq, qkv_cols, a_in, h, 1.0f, dst, h);
    });
    da = act(T, h, kWork);
    backend_.gemm(false, false, Ti, h, qkv_cols, 1.0f, dqkv.ref(), qkv_cols, w.qkv_w, h, 0.0f, da.ref(), h);
    reads_ln1 = gathered.empty();
    wg.keep(std::move(gathered));  // a_in (the all-gathered c.ln1), or c.ln1 itself: kept below
  }
  wg.keep(std::move(dqkv));
  c.qkv.reset();
  op.end();
  Tensor da_local = tp_.reduce_rows(std::move(da), kWork);
  op.next("norm_bwd");
  Tensor dx = act(dy_in.rows(), h, kWork);
  norm_backward(dx.ref(), g.ln1_w, g.ln1_b, da_local.ref(), c.x, w.ln1_w, c.stats1);
  op.next("residual_bwd");
  backend_.axpy(dx.ref(), 1.0f, dx2.ref(), dx.numel());
  op.end();
  // What the deferred weight gradients read beyond their own buffers: the output gradient (the MLP's down
  // projection), the attention projection's (dx2 or its masked copy) and the QKV input.
  if (reads_dy) wg.keep(std::move(dropout ? dy_masked : dy_in));
  if (reads_do) wg.keep(std::move(dropout ? do_masked : dx2));
  if (reads_ln1) wg.keep(std::move(c.ln1));
  c = LayerCache{};
  return dx;
}

void TransformerLayer::rebuild(const LayerWeights& w, LayerCache& c, int layer) {
  const std::int64_t T = tokens();
  const int h = dims_.hidden;
  const int ctx_cols = dims_.heads * dims_.head_dim;
  LayerCache::OpKept kept = std::move(c.op);
  c.op = {};
  OpPrefix again(tracer_, "recompute ");  // outlives `op`, whose last slice it names
  OpSlices op(tracer_, kComputeLane);
  attention_input(w, c, op, &kept.qkv, false);
  kept.qkv.reset();
  // Attention's output and log-sum-exp are kept (c.ctx, c.lse). The projection re-runs where the policy
  // says so, even under SP, whose reduce-scatter output is kept: torchtitan's recompute runs it too.
  Tensor o;
  if (rerun_.attn_out) {
    op.next("attn_out");
    o = act(T, h, kWork);
    backend_.gemm(false, true, static_cast<int>(T), h, ctx_cols, 1.0f, c.ctx.ref(), ctx_cols, w.proj_w, ctx_cols, 0.0f,
                  o.ref(), h);
  } else {
    o = std::move(kept.attn_out);
  }
  op.end();
  Tensor o_local = sequence_parallel() ? std::move(kept.attn_rs) : tp_.reduce_rows(std::move(o), kWork);
  o.reset();
  op.next("residual");
  c.x2 = add_residual(c.x, std::move(o_local), w.proj_b, c.proj_mask, layer, 1, c.first_sequence);

  op.next("norm");
  norm_forward(c.ln2, c.stats2, c.x2, w.ln2_w, w.ln2_b);
  {
    Tensor gathered;
    op.end();
    ConstTensorRef m_in = tp_.gather_rows(c.ln2, gathered);
    op.next("mlp_up");
    c.fc = act(T, dims_.ffn_in, kAct);
    rebuild_columns(c.fc, dims_.ffn_in, mlp_up_blocks(), &kept.mlp_up, m_in, h, w.fc_w);
    kept.mlp_up.reset();
    if (!w.fc_b.null()) backend_.add_bias(c.fc.ref(), w.fc_b, T, dims_.ffn_in);
    op.next(model_.activation == Activation::kSwiGLU ? "swiglu" : "gelu");
    c.act = act(T, dims_.ffn, kAct);
    mlp_.activation({c.fc.ref(), c.act.ref()}, T);
  }
  // The down projection re-runs where not kept (its output is not needed: the recompute then stops).
  if (rerun_.down) {
    op.next("mlp_down");
    Tensor out = act(T, h, kWork);
    backend_.gemm(false, true, static_cast<int>(T), h, dims_.ffn, 1.0f, c.act.ref(), dims_.ffn, w.fc2_w, dims_.ffn,
                  0.0f, out.ref(), h);
  }
  op.end();
  if (dropout_.p > 0) c.mlp_mask = row_mask(c.x.rows(), h, layer, 2, c.first_sequence);
}

}  // namespace loom::exec
