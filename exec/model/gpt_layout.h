// Where every parameter of one pipeline stage and one tensor-parallel rank lives: parameters are
// grouped into units (word embedding, position embedding, each transformer layer, final norm + LM
// head), each unit one flat range that ZeRO shards across data-parallel ranks and gathers per unit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config_rules.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/schedule.h"
#include "core/training_spec.h"

namespace loom::exec {

// The local rows [local_row, local_row + count) hold full rows [full_row, full_row + count).
struct RowBlock {
  std::int64_t local_row = 0, full_row = 0, count = 0;
};

enum class ParamInit { kNormal, kOnes, kZeros };

struct ParamSlot {
  std::string name;         // "layers.3.attn.qkv.weight"
  std::uint64_t id = 0;     // seeds the parameter's initial values (same on every layout)
  std::int64_t offset = 0;  // within the unit
  std::int64_t rows = 0, cols = 0;
  ParamInit init = ParamInit::kZeros;
  float init_std = 0;
  // How the local block maps into the full (unsharded) tensor, for initialisation and checkpoints.
  std::int64_t full_cols = 0, col_offset = 0;
  std::vector<RowBlock> row_blocks;
  std::int64_t zero_from_full_row = -1;  // rows at or past this (vocabulary padding) start and stay zero
  bool weight_decay = false;             // 2-D weights decay; biases and norm gains do not
  bool tp_replicated = false;            // the same values on every TP rank
  bool sequence_partial = false;         // with sequence parallelism its gradient is a partial sum over TP
  bool tp_partial = false;               // its gradient is a partial sum over TP at any TP size (per-head QK-norm)
  bool tied_copy = false;                // the last stage's copy of the tied word embedding
  std::int64_t numel() const { return rows * cols; }
};

// kExperts: an MoE layer's routed experts held by this rank (experts/ep of them), a unit of their own
// because their gradients reduce, and ZeRO shards them, over the expert-data-parallel group only.
enum class UnitKind { kWordEmbedding, kPositionEmbedding, kLayer, kFinal, kTiedHead, kExperts };

struct Unit {
  std::string name;
  UnitKind kind = UnitKind::kLayer;
  int layer = -1;  // global layer index for kLayer
  std::vector<ParamSlot> params;
  std::int64_t size = 0;    // values held
  std::int64_t padded = 0;  // size rounded up to a multiple of its shard count (ZeRO shards are equal)
  bool experts() const { return kind == UnitKind::kExperts; }
  const ParamSlot& param(const std::string& suffix) const;
  const ParamSlot* find(const std::string& suffix) const;
};

struct LocalDims {
  int tp = 1, tp_rank = 0;
  int hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0;  // heads/kv_heads/ffn: this rank's share
  int ffn_in = 0;             // columns of the first MLP matrix (ffn, or 2·ffn for SwiGLU)
  std::int64_t qkv_cols = 0;  // (heads + 2·kv_heads)·head_dim
  int vocab = 0, vocab_padded = 0, vocab_local = 0, vocab_start = 0, vocab_valid_local = 0;
  // Mixture of experts (this rank's TP share of each expert's width, as ffn/ffn_in): routed experts in
  // all and this rank's [first_expert, first_expert + local_experts) of them; the shared expert's width.
  int experts = 0, experts_per_token = 0, local_experts = 0, first_expert = 0;
  int expert_ffn = 0, expert_ffn_in = 0, shared_ffn = 0, shared_ffn_in = 0;
  bool experts_whole = false;  // expert TP 1 under TP > 1: each rank routes its own rows to whole experts
};

struct StageLayout {
  LocalDims dims;
  int first_layer = 0, end_layer = 0;  // this stage's transformer layers [first, end)
  std::vector<Unit> units;             // in forward order
  int word_embedding_unit = -1, position_unit = -1, final_unit = -1, tied_head_unit = -1;
  std::vector<int> layer_units;   // per local layer
  std::vector<int> expert_units;  // per local layer: its routed experts' unit, -1 for a dense layer
  std::int64_t total_padded() const;
  std::int64_t total_params() const;  // values held (without padding)
};

// Where a unit's ZeRO shards live: over `holders` ranks, rank `world_rank` holding shard `index`. Routed
// experts under expert parallelism or expert TP 1 shard over the expert-data-parallel group
// (`over_expert_dp`); every other unit over the dp ranks (HSDP: a shard group of them).
struct ShardPlace {
  int holders = 1, index = 0;
  bool over_expert_dp = false;
};
ShardPlace shard_place(const Unit& unit, const ParallelConfig& config, int world_rank);

// Layers [first, end) of virtual stage `virtual_stage` (chunk·pp + pp rank): the split of
// core/pipeline_split.h, which the simulator costs too.
std::pair<int, int> stage_layers(const ModelSpec& model, const ParallelConfig& config, int virtual_stage);

// What the executor runs: the rules of core/config_rules.h with uneven stages allowed (the default
// split's leftover layers on the earliest chunks, core/pipeline_split.h), then the executor's own
// limits, keyed by the rule:: names below.
RuleStatus check_runnable(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& config);

namespace rule {
inline constexpr std::string_view kModelShape = "executor: model shape";
inline constexpr std::string_view kSeqLen = "executor: sequence beyond the model's";
inline constexpr std::string_view kExecutorPrecision = "executor: no fp8";
}  // namespace rule

// Model chunk `pp_rank` of the pp·vpp virtual stages (with vpp 1, pipeline rank `pp_rank`); `ep_rank`
// picks the routed experts an MoE model's layers hold (ProcessGroups::ep_rank()).
StageLayout make_stage_layout(const ModelSpec& model, const ParallelConfig& config, int tp_rank, int pp_rank,
                              int ep_rank = 0);

// Interleaved pipelines (vpp > 1): chunk c of stage s is virtual stage c·pp + s of a pp·vpp-stage
// pipeline, virtual_stage() in core/schedule.h (Megatron-LM; the simulator's numbering and trace names).
// Every model chunk a rank holds, and all of them in one layout (units concatenated chunk by
// chunk, chunk c's units from unit_offset[c]) for the parameter store, checkpoints and memory checks.
struct RankLayout {
  std::vector<StageLayout> chunks;
  std::vector<int> unit_offset;
  StageLayout combined;
};
RankLayout make_rank_layout(const ModelSpec& model, const ParallelConfig& config, int tp_rank, int pp_rank,
                            int ep_rank = 0);

// The initial value of element (full_row, full_col) of a parameter: a counter-based normal draw
// (splitmix64 + Box-Muller), so every layout initialises the same full tensor.
float initial_value(std::uint64_t seed, std::uint64_t param_id, std::uint64_t full_index);
void initialize_slot(float* data, const ParamSlot& slot, std::uint64_t seed);

}  // namespace loom::exec
