// Memory per GPU for one parallel configuration, per pipeline stage: parameters, gradients and
// optimizer states under ZeRO 0-3, activations (Korthikanti et al. 2022, Table 2, generalised to
// GQA and SwiGLU shapes) times the micro-batches each schedule keeps in flight, communication
// buffers, the workspace of one layer's backward, and the framework reserve of the cost file.
// `loom run` measures the same categories (tests/exec/memory_test.cc holds the two side by side).
#pragma once

#include <vector>

#include "core/cluster_spec.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/plan.h"
#include "core/training_spec.h"

namespace loom {

struct StageMemory {
  int stage = 0;
  int layers = 0;          // transformer layers held by this stage (all its chunks)
  double param_count = 0;  // parameters held before ZeRO-3 sharding
  double params_bytes = 0;
  double grads_bytes = 0;
  double optimizer_bytes = 0;
  double activations_bytes = 0;
  double buffers_bytes = 0;               // ZeRO's unsharded gradients and gathered units, p2p, SP and CP buffers
  double p2p_bytes = 0;                   // the pipeline's send/receive buffers, part of buffers_bytes
  double workspace_bytes = 0;             // temporaries of one layer's backward, part of reserve_bytes
  double reserve_bytes = 0;               // framework reserve plus the workspace (inside buffers in the GiB view)
  double activation_bytes_per_layer = 0;  // one micro-batch, one layer
  double micro_batches_in_flight = 0;     // in units of the stage's full set of layers
  double weight_pass_kept_bytes = 0;      // zero-bubble: what one micro-batch's W pass reads, kept from its B
  double total_bytes() const {
    return params_bytes + grads_bytes + optimizer_bytes + activations_bytes + buffers_bytes + reserve_bytes;
  }
};

struct MemoryReport {
  std::vector<StageMemory> stages;
  int most_loaded_stage = 0;
  double capacity_bytes = 0;
  bool fits = false;
  const StageMemory& most_loaded() const { return stages[most_loaded_stage]; }
  double most_loaded_total_bytes() const { return most_loaded().total_bytes(); }
  MemoryBreakdownGiB most_loaded_gib() const;  // buffers include the reserve
};

// Model states of `params` parameters on one GPU under ZeRO stage `zero` sharded over `dp` ranks
// (Rajbhandari et al. 2020, §5: 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N with 2 + 2 + 12 bytes). Under
// HSDP, N is the shard group (ParallelConfig::zero_shards), not the whole data-parallel group;
// under context parallelism N counts the CP ranks too (Megatron's distributed optimizer shards
// over the dp·cp group).
struct ModelStateBytes {
  double params = 0, grads = 0, optimizer = 0;
  double total() const { return params + grads + optimizer; }
};
ModelStateBytes model_state_bytes(double params, const TrainingSpec& training, int zero, int dp);

// Bytes of activations one transformer layer keeps for the backward pass, for one micro-batch
// (Korthikanti et al. 2022, §4: sbh(34 + 5as/h) and its TP/SP/recompute variants).
double activation_bytes_per_layer(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& config);
// The same averaged over layers of which `moe_fraction` are MoE layers (a stage's own mix, core/partition.h).
double activation_bytes_per_layer_of(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& config,
                                     double moe_fraction);

// The largest set of temporaries one layer's backward (or the head's) holds at once on `stage`:
// gradients of the layer's intermediate tensors, which live only until the next op consumes them.
double workspace_bytes(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& config, int stage);

// How many micro-batches' worth of a stage's activations are alive at the peak on `stage`.
double micro_batches_in_flight(const ParallelConfig& config, int stage, long long micro_batches);

// Zero-bubble (ZB-H1) splits each backward into B and W: W reads each linear layer's input and output
// gradient, kept from B (Qi et al. 2024, §2). At a stage's peak, after its last steady forward, this many
// W passes are pending (0 for other schedules), each keeping zero_bubble_kept_bytes.
double zero_bubble_pending_w(const ParallelConfig& config, int stage, long long micro_batches);
double zero_bubble_kept_bytes(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& config,
                              int stage);
struct ZeroBubbleKept {
  double layers = 0, head = 0;  // the stage's transformer layers', and on the last stage the LM head's
};
ZeroBubbleKept zero_bubble_kept(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& config,
                                int stage);

MemoryReport estimate_memory(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& config,
                             const ClusterSpec& cluster);

}  // namespace loom
