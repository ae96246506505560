// The rules of a legal parallel configuration, each with one message and a short rule key, written
// once for the planner (which checks them level by level as it enumerates), the simulator and the
// executor. check_config runs them all in the enumerator's order, so both name the same first rule.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/cluster_spec.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/result.h"
#include "core/training_spec.h"

namespace loom {

// Rule keys: short, stable, for grouping rejections (`loom plan --explain`, the GUI).
namespace rule {
inline constexpr std::string_view kSizes = "sizes below 1";
inline constexpr std::string_view kWorldSize = "tp·cp·pp·dp is not the GPU count";
inline constexpr std::string_view kHeadsTp = "heads not divisible by tp";
inline constexpr std::string_view kKvHeadsTp = "kv heads not divisible by tp";
inline constexpr std::string_view kFfnTp = "ffn not divisible by tp";
inline constexpr std::string_view kTpSpansNodes = "tp spans nodes";
inline constexpr std::string_view kCpSeq = "sequence not divisible by 2·cp";
inline constexpr std::string_view kCpNeedsFlash = "context parallelism needs flash attention";
inline constexpr std::string_view kCpA2aHeads = "a2a context parallelism needs heads divisible by tp·cp";
inline constexpr std::string_view kCpPyTorchA2a = "PyTorch's context parallelism has no a2a exchange";
inline constexpr std::string_view kCpSlidingWindow = "context parallelism under sliding-window attention";
inline constexpr std::string_view kLayersPp = "layers not divisible by pp";
inline constexpr std::string_view kStagesExceedLayers = "more pipeline stages than layers";
inline constexpr std::string_view kBatchDp = "global batch not divisible by dp";
inline constexpr std::string_view kBatchMicroBatch = "global batch not divisible by dp·micro-batch";
inline constexpr std::string_view kTooManyPasses = "more micro-batch passes in a step than Loom simulates";
inline constexpr std::string_view kVppNeedsInterleaved = "vpp needs the interleaved schedule";
inline constexpr std::string_view kInterleavedNeedsPp = "interleaving needs pp > 1";
inline constexpr std::string_view kLayersPpVpp = "layers not divisible by pp·vpp";
inline constexpr std::string_view kChunksExceedLayers = "more model chunks than layers";
inline constexpr std::string_view kInterleavedMicroBatches = "interleaving needs micro-batches divisible by pp";
inline constexpr std::string_view kSplitExclusive = "pinned stage layers with embedding/loss accounting";
inline constexpr std::string_view kPinnedNeedsPp = "pinned stage layers need pp > 1";
inline constexpr std::string_view kPinnedLayers = "pinned stage layers leave the middle stages uneven";
inline constexpr std::string_view kPinnedVpp = "pinned stage layers not divisible by vpp";
inline constexpr std::string_view kAccountedLayers = "layers + embedding/loss not divisible by pp·vpp";
inline constexpr std::string_view kEmptyChunk = "a model chunk with no layers";
inline constexpr std::string_view kListedExclusive = "stage layers listed with other split settings";
inline constexpr std::string_view kListedStages = "stage layers not one count per pipeline stage";
inline constexpr std::string_view kListedLayers = "stage layers do not add up to the model's layers";
inline constexpr std::string_view kZeroStage = "no such ZeRO stage";
inline constexpr std::string_view kShardGroup = "shard group not a proper divisor of dp under ZeRO-3";
inline constexpr std::string_view kSpNeedsTp = "sequence parallelism needs tp > 1";
inline constexpr std::string_view kSpTokens = "sequence parallelism needs tokens divisible by tp";
inline constexpr std::string_view kFramework = "not run by the --framework";
inline constexpr std::string_view kEpNeedsMoe = "expert parallelism needs a mixture-of-experts model";
inline constexpr std::string_view kEpExperts = "experts not divisible by ep";
inline constexpr std::string_view kEpGradRanks = "dp·cp not divisible by ep";
inline constexpr std::string_view kEpZero3 = "expert parallelism with ZeRO-3 or HSDP";
inline constexpr std::string_view kEtp = "expert tensor parallelism neither tp nor 1";
inline constexpr std::string_view kEtpNeedsSp = "expert tensor parallelism below tp needs sequence parallelism";
inline constexpr std::string_view kOpRecomputeDense = "op-level recompute on a mixture-of-experts or MLA model";
inline constexpr std::string_view kOpRecomputeFlash = "op-level recompute with unfused attention";
}  // namespace rule

struct RuleViolation {
  std::string rule;     // one of the rule:: keys
  std::string message;  // one line: "heads 96 not divisible by tp 64"
};

// Ok, or the first rule a configuration breaks. Converts to a Status carrying the message.
class [[nodiscard]] RuleStatus {
 public:
  RuleStatus() = default;
  RuleStatus(RuleViolation violation) : violation_(std::move(violation)) {}  // NOLINT(google-explicit-constructor)
  bool ok() const { return !violation_.has_value(); }
  explicit operator bool() const { return ok(); }
  const RuleViolation& violation() const { return *violation_; }
  operator Status() const { return ok() ? Status{} : Status{make_error(violation_->message)}; }  // NOLINT

 private:
  std::optional<RuleViolation> violation_;
};

// How strictly layers must split over pipeline stages (core/pipeline_split.h). kEven: exactly as
// the config's split settings say (the even split needs layers divisible by pp·vpp), what the
// planner and the simulator accept; kUneven: what the executor also runs, the default split
// with leftover layers on the earliest model chunks, each of which then needs one layer.
enum class StageSplit { kEven, kUneven };

// The rules level by level, as the enumerator meets them. Each checks only its own level's fields.
// tp, cp, pp, dp, micro-batch and vpp at least 1; pinned stage layers not negative.
RuleStatus check_sizes(const ParallelConfig& config);
// tp·cp·pp·dp = training.gpus.
RuleStatus check_world_size(const TrainingSpec& training, const ParallelConfig& config);
// Heads, key/value heads and the MLP split evenly over tp.
RuleStatus check_tp(const ModelSpec& model, int tp);
// Context parallelism (Megatron-core/TransformerEngine): the sequence in 2·cp chunks, a fused
// attention kernel, and for the all-to-all kind query and key/value heads split over tp·cp.
RuleStatus check_cp(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& config);
// A tensor-parallel group inside one node, unless training.allow_cross_node_tp.
RuleStatus check_tp_placement(const ClusterSpec& cluster, const TrainingSpec& training, int tp);
// Layers over pp stages (the split's stage-level rules); the global batch over dp replicas.
RuleStatus check_layout(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& config,
                        StageSplit split = StageSplit::kEven);
// Forward passes a step may hold (micro-batches × pp × vpp): the step graph's size.
inline constexpr std::int64_t kMaxSimulatedPasses = std::int64_t{1} << 21;
// Each replica's batch over micro-batches, and the step's passes within kMaxSimulatedPasses.
RuleStatus check_micro_batch(const TrainingSpec& training, const ParallelConfig& config);
// Schedule and vpp against pp, the layers (the split's chunk-level rules) and the micro-batches per step.
RuleStatus check_schedule(const ModelSpec& model, const ParallelConfig& config, std::int64_t micro_batches,
                          StageSplit split = StageSplit::kEven);
RuleStatus check_zero(const ParallelConfig& config);
RuleStatus check_sequence_parallel(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& config);
// A configuration the named software stack (training.framework, core/framework.h) can run.
RuleStatus check_framework(const TrainingSpec& training, const ParallelConfig& config);
// --recompute op (core/op_recompute.h) is modelled for dense layers with GPT/LLaMA attention, and keeps
// scaled-dot-product attention's output and log-sum-exp: a fused (flash) kernel's.
RuleStatus check_recompute(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& config);
// Expert parallelism: an MoE model whose routed experts divide by ep, and ep ranks inside the dp·cp
// group (Megatron-core builds EP groups from it), or with etp 1 inside tp·dp·cp; expert TP either tp or 1;
// not with ZeRO-3 or HSDP, which Loom does not model for experts (Megatron-core shards expert states with
// its distributed optimizer, ZeRO-1/2 here).
RuleStatus check_ep(const ModelSpec& model, const ParallelConfig& config);

// Every rule above but the placement one (which needs a cluster), in the enumerator's order.
RuleStatus check_config(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& config,
                        StageSplit split = StageSplit::kEven);
// ...and on a cluster: every rule, placement included.
RuleStatus check_config(const ModelSpec& model, const TrainingSpec& training, const ClusterSpec& cluster,
                        const ParallelConfig& config);

}  // namespace loom
