// How a model's parameters split over tensor-parallel ranks and pipeline stages (Megatron-LM
// placement): the counts the memory model, the simulator's communication volumes and the
// executor's shards all agree on.
#pragma once

#include "core/model_spec.h"
#include "core/parallel_config.h"

namespace loom {

// Parameters one TP rank holds for one transformer layer: column-parallel QKV/up projections
// (and their biases) and row-parallel out/down weights split t ways; row-parallel biases, the norms
// and an MoE layer's router replicated. With MoE layers among dense ones: the mean over the layers.
double layer_params_per_tp_rank(const ModelSpec& model, int tp);

struct StageParams {
  double layers = 0;     // transformer layers on the stage (all its chunks)
  double experts = 0;    // of `layers`: the routed experts this rank holds (1/ep of the stage's)
  double embedding = 0;  // vocab-parallel word embedding (+ learned positions): first stage
  double head = 0;       // final norm + LM head, or the tied embedding's copy: last stage
  double total() const { return layers + embedding + head; }
};

// One layer's routed experts per TP rank (the mean over the layers, as layer_params_per_tp_rank), and
// one layer's parameters on a rank that holds 1/ep of the experts, each split etp ways (0: tp ways).
double routed_expert_params_per_tp_rank(const ModelSpec& model, int tp);
double layer_params_per_rank(const ModelSpec& model, int tp, int ep, int etp = 0);
// The routed experts one rank holds per layer: 1/ep of them, each split over expert TP.
double routed_expert_params_per_rank(const ModelSpec& model, const ParallelConfig& config);

// Parameters one TP rank of `stage` holds (its own layers, core/pipeline_split.h).
StageParams stage_params(const ModelSpec& model, const ParallelConfig& config, int stage);

}  // namespace loom
