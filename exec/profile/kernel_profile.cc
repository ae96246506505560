// Kernel measurements for `loom profile`: each op runs on buffers allocated by the backend (so a
// CUDA backend measures device kernels), batched until the clock's resolution is negligible, and
// the fastest of several batches is kept: other work on a shared host only ever adds time.
#include "exec/profile/kernel_profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "core/partition.h"

namespace loom::exec::profile {

namespace {
// Seconds `fn` takes by the backend's clock.
double timed(Backend& backend, const std::function<void()>& fn) {
  const std::unique_ptr<TimedEvent> start = backend.record_timed_event();
  fn();
  const std::unique_ptr<TimedEvent> end = backend.record_timed_event();
  return 1e-6 * end->microseconds_since(*start);
}
}  // namespace

double best_seconds(Backend& backend, const std::function<void()>& fn, const TimingBudget& budget) {
  fn();  // warm-up: first-touch page faults, BLAS thread start-up, kernels loaded and algorithms chosen
  // Size the batch from one timed call.
  const double one = std::max(timed(backend, fn), 1e-9);
  const int calls = std::max(1, static_cast<int>(std::ceil(budget.min_batch_s / one)));
  std::vector<double> per_call;
  for (int b = 0; b < std::max(1, budget.batches); ++b)
    per_call.push_back(timed(backend,
                             [&] {
                               for (int i = 0; i < calls; ++i) fn();
                             }) /
                       calls);
  return *std::min_element(per_call.begin(), per_call.end());
}

double best_cold_seconds(Backend& backend, const std::function<void()>& fn, const std::function<void()>& evict,
                         const TimingBudget& budget) {
  fn();  // warm-up: first-touch page faults
  double best = std::numeric_limits<double>::infinity(), spent = 0;
  constexpr int kMostCalls = 1000;
  for (int i = 0; i <= kMostCalls && (i < std::max(1, budget.batches) || spent < budget.batches * budget.min_batch_s);
       ++i) {
    evict();
    const double s = timed(backend, fn);
    best = std::min(best, s);
    spent += s;
  }
  return best;
}

namespace {

// Tensors (their views and bytes) to drop from the caches before a timed call.
using Operands = std::vector<std::pair<ConstTensorRef, std::int64_t>>;
Operands operands_of(std::initializer_list<const Tensor*> tensors) {
  Operands out;
  for (const Tensor* t : tensors) out.emplace_back(t->ref(), t->bytes());
  return out;
}
// best_cold_seconds with `operands` out of the caches before each call.
double cold_seconds(Backend& backend, const std::function<void()>& fn, const Operands& operands,
                    const TimingBudget& budget) {
  return best_cold_seconds(
      backend, fn,
      [&] {
        for (const auto& [t, n] : operands) backend.evict_from_cache(t, n);
      },
      budget);
}

GemmCase nt(std::string op, std::int64_t m, std::int64_t n, std::int64_t k) {
  return {std::move(op), m, n, k, 1, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), false, true};
}
GemmCase nn(std::string op, std::int64_t m, std::int64_t n, std::int64_t k) {
  return {std::move(op), m, n, k, 1, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), false, false};
}
// Weight gradients: Aᵀ·B accumulated into the gradient.
GemmCase tn(std::string op, std::int64_t m, std::int64_t n, std::int64_t k) {
  return {std::move(op), m, n, k, 1, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), true, false, true};
}

}  // namespace

std::vector<GemmCase> transformer_gemm_cases(const ModelSpec& model, int seq, int micro_batch, int tp) {
  const std::int64_t T = static_cast<std::int64_t>(seq) * micro_batch;
  const std::int64_t h = model.hidden, hd = model.head_dim();
  const std::int64_t qkv = (model.heads + 2 * model.kv_heads) / tp * hd;
  const std::int64_t f = model.ffn_hidden / tp;
  const std::int64_t up = model.activation == Activation::kSwiGLU ? 2 * f : f;
  const std::int64_t ctx = model.q_dim() / tp;  // the attention output: heads·head_dim
  const std::int64_t v = padded_vocab(model.vocab, tp) / tp;
  // (m, n, k) as sim::CostModel asks: forward (T, out, in); input gradient (T, in, out); weight
  // gradient (out, in, T) for column-parallel layers and (h, in, T) for row-parallel ones.
  std::vector<GemmCase> c = {
      nt("qkv", T, qkv, h),      nn("qkv_dgrad", T, h, qkv),      tn("qkv_wgrad", qkv, h, T),
      nt("attn_out", T, h, ctx), nn("attn_out_dgrad", T, ctx, h), tn("attn_out_wgrad", h, ctx, T),
      nt("mlp_up", T, up, h),    nn("mlp_up_dgrad", T, h, up),    tn("mlp_up_wgrad", up, h, T),
      nt("mlp_down", T, h, f),   nn("mlp_down_dgrad", T, f, h),   tn("mlp_down_wgrad", h, f, T),
      nt("lm_head", T, v, h),    nn("lm_head_dgrad", T, h, v)};
  // The simulator asks for the LM head's weight gradient as (h, v, T); the executor computes its
  // transpose (v, h, T), which is what is timed.
  GemmCase head_wgrad = tn("lm_head_wgrad", h, v, T);
  head_wgrad.call_m = static_cast<int>(v);
  head_wgrad.call_n = static_cast<int>(h);
  c.push_back(head_wgrad);
  // Unfused attention (exec/cpu/cpu_attention.cc): one QKᵀ (seq×seq×hd, NT) and one PV
  // (seq×hd×seq, NN) per sequence and head; the simulator asks for them as one (T, seq, h/t)
  // and one (T, h/t, seq) matmul.
  const int heads_here = model.heads / tp;
  GemmCase qk{"attention_qk", T, seq, ctx, micro_batch * heads_here, seq, seq, static_cast<int>(hd), false, true};
  GemmCase av{"attention_av", T, ctx, seq, micro_batch * heads_here, seq, static_cast<int>(hd), seq, false, false};
  qk.causal = GemmCase::Causal::kKeysAreN;
  av.causal = GemmCase::Causal::kKeysAreK;
  c.push_back(qk);
  c.push_back(av);
  return c;
}

std::vector<GemmCase> grid_gemm_cases(std::int64_t min_dim, std::int64_t max_dim) {
  std::vector<GemmCase> c;
  for (std::int64_t m = min_dim; m <= max_dim; m *= 4)
    for (std::int64_t n = min_dim; n <= max_dim; n *= 4)
      for (std::int64_t k = min_dim; k <= max_dim; k *= 4) c.push_back(nt("grid", m, n, k));
  return c;
}

std::vector<GemmTiming> time_gemms(Backend& backend, const std::vector<GemmCase>& cases, const TimingBudget& budget,
                                   const std::function<void(std::size_t, std::size_t)>& progress) {
  std::vector<GemmTiming> out;
  for (const GemmCase& g : cases) out.push_back({g, std::numeric_limits<double>::infinity()});
  // Whole sweeps over the shapes, each keeping its fastest: a burst of other work on the host
  // then spoils one sweep of a shape, not a run of neighbouring shapes.
  const int sweeps = std::max(1, budget.sweeps);
  for (int sweep = 0; sweep < sweeps; ++sweep) {
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const GemmCase& g = cases[i];
      // Row-major op(A) m×k and op(B) k×n; stored transposed when trans is set.
      const int lda = g.trans_a ? g.call_m : g.call_k;
      const int ldb = g.trans_b ? g.call_k : g.call_n;
      // Each of a case's calls has operands of its own, as attention's products over (sequence, head)
      // do: b·heads score matrices pass through the caches, not one that stays in them.
      const std::int64_t a_n = static_cast<std::int64_t>(g.trans_a ? g.call_k : g.call_m) * lda;
      const std::int64_t b_n = static_cast<std::int64_t>(g.trans_b ? g.call_n : g.call_k) * ldb;
      const std::int64_t c_n = static_cast<std::int64_t>(g.call_m) * g.call_n;
      // In the dtypes training uses (exec/model): operands in the compute dtype; weight gradients
      // accumulate into the fp32 main gradients and the LM head writes fp32 logits; other outputs in the
      // compute dtype.
      const DType compute = backend.compute_dtype();
      const DType out_dtype = g.accumulate || g.op == "lm_head" ? DType::kF32 : compute;
      Tensor a = backend.alloc(g.calls, a_n, MemoryCategory::kWorkspace, compute);
      Tensor b = backend.alloc(g.calls, b_n, MemoryCategory::kWorkspace, compute);
      Tensor c = backend.alloc(g.calls, c_n, MemoryCategory::kWorkspace, out_dtype);
      const float beta = g.accumulate ? 1.0f : 0.0f;
      // A causal product the backend blocks: query rows [i0, i0 + rows) against keys [0, i0 + rows).
      const int block = g.causal == GemmCase::Causal::kNone ? 0 : backend.attention_query_block();
      // Operands start out of the caches, as in a step, where a layer's weights and the activation it
      // reads were last touched many megabytes of other work earlier (see time_memory_ops).
      const double s = cold_seconds(
          backend,
          [&] {
            for (int r = 0; r < g.calls; ++r) {
              const TensorRef ar = a.ref() + r * a_n, br = b.ref() + r * b_n, cr = c.ref() + r * c_n;
              if (block <= 0) {
                backend.gemm(g.trans_a, g.trans_b, g.call_m, g.call_n, g.call_k, 1.0f, ar, lda, br, ldb, beta, cr,
                             g.call_n);
                continue;
              }
              for (int i0 = 0; i0 < g.call_m; i0 += block) {
                const int rows = std::min(block, g.call_m - i0), keys = i0 + rows;
                const bool keys_n = g.causal == GemmCase::Causal::kKeysAreN;
                backend.gemm(g.trans_a, g.trans_b, rows, keys_n ? keys : g.call_n, keys_n ? g.call_k : keys, 1.0f,
                             ar + static_cast<std::int64_t>(i0) * lda, lda, br, ldb, beta,
                             cr + static_cast<std::int64_t>(i0) * g.call_n, g.call_n);
              }
            }
          },
          operands_of({&a, &b, &c}), budget);
      out[i].seconds = std::min(out[i].seconds, s);
      if (progress) progress(sweep * cases.size() + i + 1, sweeps * cases.size());
    }
  }
  return out;
}

SustainedRate time_sustained_gemm(Backend& backend, int n, double seconds) {
  const DType compute = backend.compute_dtype();
  Tensor a = backend.alloc(n, n, MemoryCategory::kWorkspace, compute);
  Tensor b = backend.alloc(n, n, MemoryCategory::kWorkspace, compute);
  Tensor c = backend.alloc(n, n, MemoryCategory::kWorkspace, compute);
  const auto gemm = [&] { backend.gemm(false, true, n, n, n, 1.0f, a.ref(), n, b.ref(), n, 0.0f, c.ref(), n); };
  const double flops = 2.0 * n * n * static_cast<double>(n);
  for (int i = 0; i < 3; ++i) gemm();  // kernels loaded, the algorithm chosen
  backend.synchronize();
  const double one = std::max(timed(backend, gemm), 1e-9);
  const int calls = std::max(1, static_cast<int>(0.05 / one));
  std::vector<double> rates;  // per chunk
  for (double spent = 0; spent < seconds || rates.size() < 4;) {
    const double s = timed(backend, [&] {
      for (int i = 0; i < calls; ++i) gemm();
    });
    rates.push_back(calls * flops / s);
    spent += s;
  }
  double sustained = 0;
  const std::size_t tail = rates.size() - rates.size() / 4;
  for (std::size_t i = tail; i < rates.size(); ++i) sustained += rates[i];
  return {rates.front(), sustained / static_cast<double>(rates.size() - tail)};
}

double stream_bandwidth_bytes_per_s(Backend& backend, std::int64_t bytes, const TimingBudget& budget) {
  const std::int64_t n = bytes / 4;
  Tensor a = backend.alloc(1, n, MemoryCategory::kWorkspace);
  Tensor b = backend.alloc(1, n, MemoryCategory::kWorkspace);
  Tensor c = backend.alloc(1, n, MemoryCategory::kWorkspace);
  const double copy_s = best_seconds(
      backend, [&] { backend.copy(c.data(), a.data(), n); }, budget);
  const double add_s = best_seconds(
      backend, [&] { backend.add(c.data(), a.data(), b.data(), n); }, budget);
  return std::max(8.0 * n / copy_s, 12.0 * n / add_s);
}

double time_optimizer_step(Backend& backend, std::int64_t params, const TimingBudget& budget) {
  Tensor p = backend.alloc(1, params, MemoryCategory::kWorkspace);
  Tensor g = backend.alloc(1, params, MemoryCategory::kWorkspace);
  Tensor m = backend.alloc(1, params, MemoryCategory::kWorkspace);
  Tensor v = backend.alloc(1, params, MemoryCategory::kWorkspace);
  // Mixed precision: the fp32 master above and the compute-dtype copy the step writes (exec/parallel/zero.cc).
  const bool copy = backend.compute_dtype() != DType::kF32;
  Tensor p_copy = copy ? backend.alloc(1, params, MemoryCategory::kWorkspace, backend.compute_dtype()) : Tensor();
  int step = 0;
  // The executor's step (exec/trainer.cc): the gradient norm, AdamW, then the gradients zeroed
  // for the next step's accumulation.
  return best_seconds(
      backend,
      [&] {
        volatile double norm = backend.sum_squares(g.data(), params);
        (void)norm;
        backend.adamw(p.data(), g.data(), m.data(), v.data(), params, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++step,
                      copy ? p_copy.ref() : TensorRef());
        backend.zero(g.data(), params);
      },
      budget);
}

std::vector<FlashTiming> time_flash_attention(Backend& backend, const ModelSpec& model, int seq,
                                              const std::vector<int>& micro_batches, const TimingBudget& budget) {
  std::vector<FlashTiming> out;
  const DType act = backend.compute_dtype();
  for (int b : micro_batches) {
    const AttentionShape s{b, seq, model.heads, model.kv_heads, static_cast<int>(model.head_dim())};
    const std::int64_t T = static_cast<std::int64_t>(seq) * b, q_cols = s.heads * s.head_dim,
                       rows = static_cast<std::int64_t>(b) * s.heads * seq;
    // Values of unit scale (a zeroed qkv would make every softmax row uniform, which times the same but
    // says nothing if the kernels ever branch on values): the backend's own dropout mask bytes reused.
    Tensor qkv = backend.alloc(T, s.qkv_cols(), MemoryCategory::kWorkspace, act);
    std::vector<float> values(static_cast<std::size_t>(T * s.qkv_cols()));
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.0f;
    backend.from_host(qkv.ref(), values.data(), T * s.qkv_cols());
    Tensor ctx = backend.alloc(T, q_cols, MemoryCategory::kWorkspace, act);
    Tensor dctx = backend.alloc(T, q_cols, MemoryCategory::kWorkspace, act);
    Tensor dqkv = backend.alloc(T, s.qkv_cols(), MemoryCategory::kWorkspace, act);
    Tensor acc = backend.alloc(T, q_cols, MemoryCategory::kWorkspace);
    Tensor dq = backend.alloc(T, q_cols, MemoryCategory::kWorkspace);
    Tensor stats = backend.alloc(2, rows, MemoryCategory::kWorkspace);
    Tensor lse = backend.alloc(1, rows, MemoryCategory::kWorkspace);
    backend.from_host(dctx.ref(), values.data(), T * q_cols);
    const int ld = static_cast<int>(s.qkv_cols());
    const AttentionDropout none{};
    auto forward = [&] {
      backend.zero(acc.ref(), T * q_cols);
      backend.zero(stats.ref(), 2 * rows);
      backend.attention_block_forward(acc.data(), stats.data(), stats.data() + rows, qkv.ref(), qkv.ref() + q_cols, ld,
                                      0, s, none);
      backend.attention_block_finish(ctx.ref(), lse.data(), acc.data(), stats.data(), stats.data() + rows, s);
    };
    auto backward = [&] {
      backend.zero(dqkv.ref(), T * s.qkv_cols());
      backend.zero(dq.ref(), T * q_cols);
      backend.attention_block_backward(dq.data(), dqkv.ref() + q_cols, dctx.ref(), ctx.ref(), lse.data(), qkv.ref(),
                                       qkv.ref() + q_cols, ld, 0, s, none);
      backend.copy_rows(dqkv.ref(), s.qkv_cols(), dq.ref(), q_cols, T, q_cols);
    };
    // Each pass starts with its operands out of the caches, as in a step (see time_memory_ops): timed in a
    // loop over the same buffers the kernels ran from cache, 22–25 % faster than `loom run --trace` showed
    // them in the step on the CPU (flash_attention 11.1 against 14.2 ms, its backward 27.9 against 36.9).
    FlashTiming t{model.name, seq, b, 2.0 * static_cast<double>(T) * seq * static_cast<double>(model.q_dim()), 0, 0};
    t.forward_s = cold_seconds(backend, forward, operands_of({&qkv, &acc, &stats, &ctx, &lse}), budget);
    t.backward_s = cold_seconds(backend, backward, operands_of({&qkv, &dqkv, &dq, &dctx, &ctx, &lse}), budget);
    out.push_back(t);
  }
  return out;
}

namespace {

// The first stage's embedding and the last stage's loss at TP 1, each op as exec/model/gpt_stage.cc runs it
// and named as its trace names it (the loss's gradient is made in the forward, where the statistics are), so
// the cost file holds them as measured instead of at the fitted memory-bound efficiency: on the CPU the loss
// is exp-bound (`loom run --trace`: 1.3 ms a step against 0.08 the fitted efficiency gives, the gradient 1.0
// against 0.15, the embedding's backward 0.52 against 0.12 on the validation model), on a GPU its passes
// over the fp32 logits ran at half the card's bandwidth (docs/gpu-validation.md). Bytes as sim/cost_model.cc
// charges them: the embedding 3·ab·T·h, its backward (ab + 4)·T·h, the loss 4 bytes a logit, its gradient
// 4 + ab.
template <typename TimeOp>
void time_embedding_and_loss(Backend& backend, const ModelSpec& model, int seq, int b, const TimeOp& time_op) {
  const DType act = backend.compute_dtype();
  const double ab = static_cast<double>(dtype_bytes(act));
  const std::int64_t T = static_cast<std::int64_t>(seq) * b, h = model.hidden, v = model.vocab;
  const std::int64_t cols = padded_vocab(model.vocab, 1);
  std::vector<int> tokens(static_cast<std::size_t>(T));
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int>((i * 2654435761u) % v);
  const bool positions = model.position == PositionEmbedding::kLearned;
  Tensor table = backend.alloc(cols, h, MemoryCategory::kWorkspace, act);
  Tensor dtable = backend.alloc(cols, h, MemoryCategory::kWorkspace);  // fp32, as the parameters' gradients
  Tensor wpe = backend.alloc(positions ? seq : 1, h, MemoryCategory::kWorkspace, act);
  Tensor dwpe = backend.alloc(positions ? seq : 1, h, MemoryCategory::kWorkspace);
  Tensor x = backend.alloc(T, h, MemoryCategory::kWorkspace, act);
  Tensor dx = backend.alloc(T, h, MemoryCategory::kWorkspace, act);
  backend.zero(table.ref(), cols * h);
  backend.zero(dx.ref(), T * h);
  time_op(
      "embedding", 3 * ab * T * h,
      [&] {
        backend.embedding_forward(x.ref(), table.ref(), tokens.data(), T, h, 0, cols);
        if (positions)
          for (int s = 0; s < b; ++s) backend.axpy(x.ref() + s * seq * h, 1.0f, wpe.ref(), seq * h);
      },
      operands_of({&table, &x, &wpe}));
  time_op(
      "embedding_bwd", (ab + 4) * T * h,
      [&] {
        if (positions)
          for (int s = 0; s < b; ++s) backend.axpy(dwpe.ref(), 1.0f, dx.ref() + s * seq * h, seq * h);
        backend.embedding_backward(dtable.data(), dx.ref(), tokens.data(), T, h, 0, cols);
      },
      operands_of({&dtable, &dx, &dwpe}));

  // The logits of unit scale, fp32 as the LM head writes them; in place (the CPU's fp32 path) the gradient
  // overwrites them, which leaves values that time the same.
  Tensor logits = backend.alloc(T, cols, MemoryCategory::kWorkspace);
  std::vector<float> values(static_cast<std::size_t>(T * cols));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.0f;
  backend.from_host(logits.ref(), values.data(), T * cols);
  Tensor grad =
      backend.alloc(act == DType::kF32 ? 1 : T, act == DType::kF32 ? 1 : cols, MemoryCategory::kWorkspace, act);
  Tensor stats = backend.alloc(3, T, MemoryCategory::kWorkspace);
  float *mx = stats.data(), *sum = mx + T, *target = sum + T;
  const Operands head = operands_of({&logits, &grad, &stats});
  time_op(
      "cross_entropy", 4.0 * T * cols,
      [&] {
        backend.row_max_sum_exp(mx, sum, logits.ref(), T, cols, v);
        backend.target_logit(target, logits.ref(), tokens.data(), T, cols, 0);
        backend.loss_add(mx, sum, target, T);
      },
      head);
  time_op(
      "cross_entropy_bwd", (4.0 + ab) * T * cols,
      [&] {
        if (act == DType::kF32)
          backend.cross_entropy_grad(logits.ref(), mx, sum, tokens.data(), T, cols, v, 0, 1.0f);
        else
          backend.cross_entropy_grad_into(grad.ref(), logits.ref(), mx, sum, tokens.data(), T, cols, v, 0, 1.0f);
      },
      head);
  backend.loss_reset();
}

}  // namespace

std::vector<MemoryOpTiming> time_memory_ops(Backend& backend, const ModelSpec& model, int seq,
                                            const std::vector<int>& micro_batches, const TimingBudget& budget) {
  std::vector<MemoryOpTiming> out;
  // Activations, weights and their gradients in the executor's compute dtype (the simulator's activation
  // bytes: 4 on the CPU, 2 in bf16 on a GPU); statistics and main gradients in fp32.
  const DType act = backend.compute_dtype();
  const double ab = static_cast<double>(dtype_bytes(act));
  const std::int64_t h = model.hidden, f = model.ffn_hidden;
  for (int b : micro_batches) {
    const std::int64_t T = static_cast<std::int64_t>(seq) * b;
    Tensor x = backend.alloc(T, std::max(h, f), MemoryCategory::kWorkspace, act);
    Tensor y = backend.alloc(T, std::max(h, f), MemoryCategory::kWorkspace, act);
    Tensor dy = backend.alloc(T, std::max(h, f), MemoryCategory::kWorkspace, act);
    Tensor w = backend.alloc(1, h, MemoryCategory::kWorkspace, act);
    Tensor bias = backend.alloc(1, std::max(h, f), MemoryCategory::kWorkspace, act);
    Tensor dw = backend.alloc(1, h, MemoryCategory::kWorkspace);
    Tensor db = backend.alloc(1, h, MemoryCategory::kWorkspace);
    Tensor mean = backend.alloc(1, T, MemoryCategory::kWorkspace);
    Tensor rstd = backend.alloc(1, T, MemoryCategory::kWorkspace);
    const std::vector<float> ones(static_cast<std::size_t>(h), 1.0f);  // unit weights keep the norm finite
    backend.from_host(w.ref(), ones.data(), h);
    // Times `body` (then a synchronize) and records it as `op` moving `bytes`. Each call starts with
    // its operands out of the caches: in a training step an element-wise op reads activations written
    // many ops (and megabytes) earlier, and one timed in a loop over the same buffers would run from
    // cache — several times faster than the step sees it (loom run --trace against loom sim --trace:
    // residual adds 12×, GELU 2.4–2.8×, LayerNorm 2–2.5× with warm operands).
    auto time_op = [&](const char* op, double bytes, const auto& body, const Operands& operands) {
      out.push_back({op, bytes,
                     cold_seconds(
                         backend, [&] { body(); }, operands, budget)});
    };
    // Byte counts as sim/cost_model.cc charges each op.
    const Operands rows = {{x.ref(), x.bytes()}, {y.ref(), y.bytes()}, {dy.ref(), dy.bytes()}};
    time_op(
        "norm", 2 * ab * T * h,
        [&] { backend.layernorm_forward(y.ref(), mean.data(), rstd.data(), x.ref(), w.ref(), bias.ref(), T, h); },
        rows);
    time_op(
        "norm_bwd", 3 * ab * T * h,
        [&] {
          backend.layernorm_backward(dy.ref(), dw.data(), db.data(), y.ref(), x.ref(), w.ref(), mean.data(),
                                     rstd.data(), T, h);
        },
        rows);
    time_op(
        "gelu", 2 * ab * T * f, [&] { backend.gelu_forward(y.ref(), x.ref(), T * f); }, rows);
    time_op(
        "gelu_bwd", 3 * ab * T * f, [&] { backend.gelu_backward(dy.ref(), x.ref(), y.ref(), T * f); }, rows);
    // The residual add as the transformer layer runs it: x + dropout(branch + bias), the row-parallel
    // layer's bias and the dropout mask (one byte a value) included when the model has them, so the CUDA
    // backend's fused pass and the CPU backend's three are timed as training runs them. The keep scale
    // is 1 here: the branch (dy) may be written in place, and 1/(1−p) a call would overflow it.
    Tensor mask = backend.alloc((T * h + 3) / 4, 1, MemoryCategory::kWorkspace);  // T·h bytes
    auto* mask_bytes = reinterpret_cast<std::uint8_t*>(mask.data());
    if (model.dropout) backend.dropout_mask(mask_bytes, T * h, 1, 0, 0.1f);
    time_op("residual", (3 * ab + (model.dropout ? 1 : 0)) * T * h,
            [&] {
              backend.bias_dropout_add(y.ref(), x.ref(), dy.ref(), model.linear_bias ? bias.ref() : ConstTensorRef{},
                                       model.dropout ? mask_bytes : nullptr, T, h, 1.0f);
            },
            {{x.ref(), x.bytes()}, {y.ref(), y.bytes()}, {dy.ref(), dy.bytes()}, {mask.ref(), mask.bytes()}});
    time_op(
        "residual_bwd", 3 * ab * T * h, [&] { backend.axpy(y.ref(), 1.0f, x.ref(), T * h); }, rows);
    // A linear layer's bias, added in a pass of its own after the GEMM (sim::CostModel::bias_s).
    time_op(
        "bias", 2 * ab * T * f, [&] { backend.add_bias(y.ref(), bias.ref(), T, f); }, rows);
    // Whole unfused attention cores (matmuls + causal softmax): `loom profile` subtracts the
    // per-head matmuls timed by time_gemms to leave the softmax, charged as the simulator does.
    const AttentionShape shape{b, seq, model.heads, model.kv_heads, static_cast<int>(model.head_dim())};
    Tensor qkv = backend.alloc(T, shape.qkv_cols(), MemoryCategory::kWorkspace, act);
    Tensor dqkv = backend.alloc(T, shape.qkv_cols(), MemoryCategory::kWorkspace, act);
    Tensor ctx = backend.alloc(T, model.q_dim(), MemoryCategory::kWorkspace, act);  // heads·head_dim wide
    Tensor probs = backend.alloc(1, shape.probs_numel(), MemoryCategory::kWorkspace, act);
    const double scores = static_cast<double>(shape.probs_numel());
    const Operands attention = {
        {qkv.ref(), qkv.bytes()}, {dqkv.ref(), dqkv.bytes()}, {ctx.ref(), ctx.bytes()}, {probs.ref(), probs.bytes()}};
    time_op(
        "attention_core", 2 * ab * scores, [&] { backend.attention_forward(ctx.ref(), probs.ref(), qkv.ref(), shape); },
        attention);
    time_op(
        "attention_core_bwd", 3 * ab * scores,
        [&] { backend.attention_backward(dqkv.ref(), ctx.ref(), probs.ref(), qkv.ref(), shape); }, attention);
    time_embedding_and_loss(backend, model, seq, b, time_op);
  }
  return out;
}

}  // namespace loom::exec::profile
