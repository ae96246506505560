// Kernel measurements for `loom profile`: GEMMs in the shapes and transposes a transformer layer
// runs (forward, input gradient, weight gradient, per-head attention matmuls), memory-bound ops
// (STREAM-style copy/add, norms, GELU, softmax, residual adds) and the AdamW step, on one backend.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/model_spec.h"
#include "exec/backend.h"

namespace loom::exec::profile {

// One GEMM problem as the simulator queries it (m, n, k of sim::CostModel::gemm_s) and how the
// executor performs it: `calls` calls of op(A) call_m×call_k · op(B) call_k×call_n.
struct GemmCase {
  std::string op;  // "qkv", "mlp_up_dgrad", "attention_qk", "grid", ...
  std::int64_t m = 0, n = 0, k = 0;
  int calls = 1;
  int call_m = 0, call_n = 0, call_k = 0;
  bool trans_a = false, trans_b = false;
  // Added into C (beta = 1), as the executor adds weight gradients into the gradient buffer.
  bool accumulate = false;
  // A causal attention product, timed as the backend runs it (Backend::attention_query_block): over
  // blocks of query rows (m), each against the keys up to its last row — the keys are n for QKᵀ, k for PV.
  enum class Causal { kNone, kKeysAreN, kKeysAreK } causal = Causal::kNone;
};

struct GemmTiming {
  GemmCase shape;
  double seconds = 0;  // all `calls` together
  double flops_per_s() const { return 2.0 * shape.m * shape.n * shape.k / seconds; }
};

// A memory-bound op: `bytes` counted the way sim/cost_model.cc counts that op's traffic.
struct MemoryOpTiming {
  std::string op;
  double bytes = 0;
  double seconds = 0;
};

// The GEMMs of one layer (and the LM head) for `tokens` tokens per micro-batch on a TP rank of
// `tp`, with the executor's transposes (see exec/model/transformer_layer.cc): forward NT,
// input gradient NN, weight gradient TN; attention as one matmul per (sequence, head).
std::vector<GemmCase> transformer_gemm_cases(const ModelSpec& model, int seq, int micro_batch, int tp);
// A log-spaced grid (NT) covering sizes the presets' layers fall between.
std::vector<GemmCase> grid_gemm_cases(std::int64_t min_dim, std::int64_t max_dim);

struct TimingBudget {
  double min_batch_s = 2e-3;  // calls are batched to at least this long, so the clock's resolution is noise
  int batches = 5;            // the fastest of this many batches
  int sweeps = 3;             // GEMMs: passes over all shapes, the fastest per shape kept
};

// `progress(done, total)` is called after each case.
std::vector<GemmTiming> time_gemms(Backend& backend, const std::vector<GemmCase>& cases, const TimingBudget& budget,
                                   const std::function<void(std::size_t, std::size_t)>& progress = {});

// Element-wise and normalisation ops over the activations of `model` at micro-batch sizes
// `micro_batches`, TP 1, plus large copy/add sweeps; the bytes of each point are the simulator's.
std::vector<MemoryOpTiming> time_memory_ops(Backend& backend, const ModelSpec& model, int seq,
                                            const std::vector<int>& micro_batches, const TimingBudget& budget);

// Flash-style causal attention of one layer as the executor runs it on one rank (exec/parallel/
// context_parallel.cc, local_forward and local_backward: the backend's block ops): the forward (accumulators
// zeroed, the block, the finish) and the backward (dQKV zeroed, the block's backward, dQ copied in) timed
// apart, at each micro-batch. forward_flops is the simulator's count (sim::CostModel::attention_core_forward:
// Q·Kᵀ and P·V over the causal half of the square); the backward does 2.5 times as much.
struct FlashTiming {
  std::string model;
  int seq = 0, micro_batch = 0;
  double forward_flops = 0;
  double forward_s = 0, backward_s = 0;
};
std::vector<FlashTiming> time_flash_attention(Backend& backend, const ModelSpec& model, int seq,
                                              const std::vector<int>& micro_batches, const TimingBudget& budget);

// STREAM-style bandwidth: the best of copy (2 × 4 B per element) and add (3 × 4 B) over `bytes`.
double stream_bandwidth_bytes_per_s(Backend& backend, std::int64_t bytes, const TimingBudget& budget);

// The optimizer step over `params` values as the executor runs it (fp32 master, moments and main
// gradient; with a bf16 compute dtype the bf16 copy written too): gradient norm, AdamW, gradients zeroed.
// Seconds per step.
double time_optimizer_step(Backend& backend, std::int64_t params, const TimingBudget& budget);

// One large n×n×n GEMM in the compute dtype, back to back for `seconds`, timed in chunks of about 50 ms:
// the rate of the first chunk and of the last quarter. A GPU's clock falls under sustained load (power and
// thermal limits), so shapes timed one by one in short bursts run faster than a training step sustains.
struct SustainedRate {
  double burst_flops_per_s = 0;
  double sustained_flops_per_s = 0;
};
SustainedRate time_sustained_gemm(Backend& backend, int n, double seconds);

// Fastest seconds per call of `fn` over budget.batches batches (each batched to budget.min_batch_s;
// `fn` runs at least once to warm up), timed by the backend's clock (Backend::record_timed_event): on a
// GPU the kernels' time on the stream, without the host's launch and synchronisation latency.
double best_seconds(Backend& backend, const std::function<void()>& fn, const TimingBudget& budget);
// Fastest seconds of one call of `fn` with `evict` run (untimed) before each: as many calls as
// budget.batches batches of budget.min_batch_s would take, at least budget.batches. Likewise timed.
double best_cold_seconds(Backend& backend, const std::function<void()>& fn, const std::function<void()>& evict,
                         const TimingBudget& budget);

}  // namespace loom::exec::profile
