// How a model's parameters split over tensor-parallel ranks and pipeline stages (Megatron-LM
// placement): the counts the memory model, the simulator's communication volumes and the
// executor's shards all agree on.
#pragma once

#include <vector>

#include "core/model_spec.h"
#include "core/parallel_config.h"

namespace loom {

// Parameters one TP rank holds for one transformer layer: column-parallel QKV/up projections
// (and their biases) and row-parallel out/down weights split t ways; row-parallel biases, the norms
// and an MoE layer's router replicated. With MoE layers among dense ones: the mean over the layers.
double layer_params_per_tp_rank(const ModelSpec& model, int tp);

// The dense and MoE layers among a pipeline stage's (all its chunks) or one model chunk's, by the
// model's pattern (MoeSpec::first_dense_layers, layer_freq): where the pattern is uneven (DeepSeek's
// leading dense layers) stages hold different mixes, and their parameters, activations and compute differ.
struct LayerMix {
  int dense = 0, moe = 0;
  int total() const { return dense + moe; }
  double moe_fraction() const { return total() > 0 ? static_cast<double>(moe) / total() : 0.0; }
};
LayerMix chunk_layer_mix(const ModelSpec& model, const ParallelConfig& config, int stage, int chunk);
// A model chunk's layers in order as runs of one kind (Qwen2-MoE's alternate, DeepSeek's dense layers lead).
struct LayerRun {
  bool moe = false;
  int count = 0;
};
std::vector<LayerRun> chunk_layer_runs(const ModelSpec& model, const ParallelConfig& config, int stage, int chunk);
LayerMix stage_layer_mix(const ModelSpec& model, const ParallelConfig& config, int stage);

struct StageParams {
  double layers = 0;     // transformer layers on the stage (all its chunks)
  double experts = 0;    // of `layers` and `mtp`: the routed experts this rank holds (1/ep of the stage's)
  double embedding = 0;  // vocab-parallel word embedding (+ learned positions): first stage
  double head = 0;       // final norm + LM head, or the tied embedding's copy: last stage
  // Multi-token prediction (ModelSpec::mtp_layers), last stage: its modules, and where the embedding is not
  // already there (untied, pp > 1) the word embedding's copy they look up, whose gradient Megatron-core
  // all-reduces with the first stage's as a tied embedding's (finalize_model_grads.py,
  // _allreduce_word_embedding_grads).
  double mtp = 0;
  double total() const { return layers + embedding + head + mtp; }
};
// Of StageParams::mtp, the routed experts of the modules' MoE layers this rank holds.
double mtp_expert_params_per_rank(const ModelSpec& model, const ParallelConfig& config);

// One layer's routed experts per TP rank (the mean over the layers, as layer_params_per_tp_rank), and
// one layer's parameters on a rank that holds 1/ep of the experts, each split etp ways (0: tp ways).
double routed_expert_params_per_tp_rank(const ModelSpec& model, int tp);
double layer_params_per_rank(const ModelSpec& model, int tp, int ep, int etp = 0);
// The routed experts one rank holds per layer: 1/ep of them, each split over expert TP.
double routed_expert_params_per_rank(const ModelSpec& model, const ParallelConfig& config);
// The same for the layers of a mix (a stage's or a chunk's), counted layer by layer: the parameters of
// those layers on a rank, and of them the routed experts.
double layers_params_per_rank(const ModelSpec& model, const ParallelConfig& config, const LayerMix& mix);
double routed_expert_params_per_rank(const ModelSpec& model, const ParallelConfig& config, const LayerMix& mix);

// Parameters one TP rank of `stage` holds (its own layers, core/pipeline_split.h).
StageParams stage_params(const ModelSpec& model, const ParallelConfig& config, int stage);

}  // namespace loom
