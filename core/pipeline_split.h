// One definition of how a model's transformer layers spread over pipeline stages and their model
// chunks, from the config's split settings (Megatron-LM's first/last stage layer counts, embedding
// and loss as layer-equivalents): the planner, the simulator and the executor all read it here.
#pragma once

#include <string>
#include <vector>

#include "core/config_rules.h"
#include "core/parallel_config.h"

namespace loom {

// The split's rules at the pipeline level (pp known, vpp not yet chosen) and at the chunk level
// (vpp known). kEven: the settings must split the layers exactly as Megatron-LM asserts; kUneven
// (the executor) also runs the default split when layers do not divide, leftover layers one each
// to the earliest model chunks (torchtitan's rule), while every chunk has a layer.
RuleStatus check_split_stages(const ModelSpec& model, const ParallelConfig& config, StageSplit mode);
RuleStatus check_split_chunks(const ModelSpec& model, const ParallelConfig& config, StageSplit mode);

// Layers of every virtual stage v = chunk·pp + pp_rank (virtual_stage() in core/schedule.h), for a
// config that passes the checks above.
std::vector<int> virtual_stage_layers(int layers, const ParallelConfig& config);
int virtual_stage_layer_count(int layers, const ParallelConfig& config, int v);
// Layers of local chunk `chunk` on pipeline rank `stage`.
int chunk_layers(int layers, const ParallelConfig& config, int stage, int chunk);
// Layers of pipeline rank `stage`, all its chunks together; and of every rank.
int stage_layer_count(int layers, const ParallelConfig& config, int stage);
std::vector<int> stage_layer_counts(int layers, const ParallelConfig& config);
// The largest count of stage_layer_counts: the bottleneck stage.
int max_stage_layers(int layers, const ParallelConfig& config);
// The first layer (global index) of virtual stage `v`.
int first_layer_of(int layers, const ParallelConfig& config, int v);

// "8x16" for an even split, "7/8x14/7" for one with lighter ends: each pipeline rank's layers, runs
// of equal counts folded (no commas or spaces, so one cell in every output format).
std::string stage_layers_label(const std::vector<int>& counts);

// The settings in a word ("first7,last7", "embedding+loss", "stages7/9x2/7" for a list), "even" when none.
std::string describe(const PipelineSplit& split);

// The splits the planner tries for `pp` stages: the even one first, the embedding and/or loss
// counted as a layer, and the first and/or last stage with fewer layers than the middle ones (the
// same count on both ends when both are pinned), with the fewest middle layers that allow it (and
// one more). Settings only: callers check each against the rules.
std::vector<PipelineSplit> candidate_splits(int layers, int pp);

}  // namespace loom
