// ParallelConfig: one way of splitting a training run — the unit the planner enumerates,
// the simulator scores and the executor runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

// kOp: torchtitan's op-level selective activation checkpointing (core/op_recompute.h).
enum class Recompute { kNone, kSelective, kFull, kOp };
enum class Schedule { kGPipe, k1F1B, kInterleaved, kZeroBubble };
// How context-parallel ranks exchange keys and values (Megatron-core's cp_comm_type,
// transformer_config.py): kP2P passes KV blocks around the CP ring, overlapped with the attention
// tiles (TransformerEngine's AttnFuncWithCPAndKVP2P, Megatron's default); kA2A is DeepSpeed-Ulysses'
// all-to-all from sequence to head sharding and back; kAllGather gathers all KV before attention.
enum class CpComm { kP2P, kA2A, kAllGather };

// Megatron-LM's pipeline split settings (transformer_block.py get_num_layers_to_build): the layer
// count of the first and/or last pipeline stage pinned (--decoder-first/last-pipeline-num-layers),
// or the embedding and/or the loss counted as one layer each
// (--account-for-embedding/loss-in-pipeline-split); or every pipeline stage's layers listed
// (`--stage-layers a,b,...`: torchtitan's split points, Megatron-core's pipeline layout). All unset:
// the even split. core/pipeline_split.h turns them into layers per model chunk.
struct PipelineSplit {
  int first_stage_layers = 0;  // 0: not pinned
  int last_stage_layers = 0;   // 0: not pinned
  bool account_for_embedding = false;
  bool account_for_loss = false;
  std::vector<int> stage_layers{};  // empty: not listed; else the layers of each pipeline rank, in order
  bool pinned() const { return first_stage_layers != 0 || last_stage_layers != 0; }
  bool accounted() const { return account_for_embedding || account_for_loss; }
  bool listed() const { return !stage_layers.empty(); }
  bool even() const { return !pinned() && !accounted() && !listed(); }
  bool operator==(const PipelineSplit&) const = default;
};

struct ParallelConfig {
  int tp = 1;
  int pp = 1;
  int dp = 1;
  int zero = 0;  // ZeRO stage 0..3
  // HSDP (FSDP2's hybrid shard, DeepSpeed's hpZ): ZeRO-3 shards parameters, gradients and optimizer
  // states over groups of this many data-parallel ranks and replicates them across the dp/shard_group
  // groups (gather inside a group, reduce-scatter inside it, then all-reduce across). 0: one group
  // of all dp ranks, plain ZeRO-3.
  int shard_group = 0;
  int micro_batch = 1;  // sequences per micro-batch
  int vpp = 1;          // virtual pipeline chunks per stage (interleaved schedule)
  Recompute recompute = Recompute::kNone;
  bool sequence_parallel = false;
  Schedule schedule = Schedule::k1F1B;
  PipelineSplit split{};  // how layers spread over the pipeline stages
  // Context parallelism: each sequence's tokens split over cp ranks (2·cp chunks, rank r keeping
  // chunks r and 2·cp−1−r for causal load balance), only attention seeing the other ranks' tokens.
  int cp = 1;
  CpComm cp_comm = CpComm::kP2P;
  // Expert parallelism (Megatron-core's layout, rank order tp-cp-ep-dp-pp): an MoE layer's routed
  // experts split over ep ranks of the dp·cp group, each keeping experts/ep of them (still sharded over
  // TP: expert TP = TP), tokens dispatched to their experts' ranks and combined back by all-to-alls.
  // The experts' gradients reduce, and ZeRO shards their states, over the other dp·cp/ep ranks (the
  // expert-data-parallel group).
  int ep = 1;
  // Expert tensor parallelism (Megatron-core's --expert-tensor-parallel-size): 0 or tp, each expert split
  // over the TP ranks as above; 1, each expert whole on its rank and the TP ranks' own (sequence-parallel)
  // tokens routed apart, so the expert grid etp·ep·edp over tp·cp·dp ranks folds EP over TP ranks first
  // (Megatron-core's "MoE parallel folding").
  int etp = 0;

  int world_size() const { return tp * cp * pp * dp; }
  int expert_tp() const { return etp > 0 ? etp : tp; }
  // The ranks that hold the same parameters and reduce their gradients together: Megatron-core's
  // dp_cp group (distributed_data_parallel.py), the DP ranks times the CP ranks of each.
  int grad_ranks() const { return dp * cp; }
  // Ranks one parameter's ZeRO shards are spread over, and the replicas of each shard. Megatron's
  // distributed optimizer shards over the dp_cp group, and torchtitan folds cp into FSDP's shard
  // dimension (fsdp = dp_shard·cp), so CP ranks shard too: a shard group of g dp ranks is g·cp ranks.
  int zero_shards() const { return (shard_group > 0 ? shard_group : dp) * cp; }
  int shard_replicas() const { return grad_ranks() / zero_shards(); }
  // ZeRO-3 kept gathered through a pipeline, when the software does that (TrainingSpec::zero3_pp_keep_gathered):
  // only with a pipeline and more than one shard. The simulator and the memory model both ask here.
  bool zero3_gathered_through_pipeline(bool software_keeps) const {
    return software_keeps && zero >= 3 && pp > 1 && zero_shards() > 1;
  }
  // The expert-data-parallel group: the ranks holding the same experts (Megatron-core's expt_dp), edp =
  // tp·cp·dp / (etp·ep) of them (dp·cp/ep with expert TP = TP).
  int expert_grad_ranks() const { return tp * grad_ranks() / (expert_tp() * ep); }
  // Micro-batches per pipeline per step (gradient-accumulation steps).
  std::int64_t micro_batches(std::int64_t global_batch) const {
    return global_batch / (static_cast<std::int64_t>(dp) * micro_batch);
  }
  bool operator==(const ParallelConfig&) const = default;
};

// Rank placement shared by the simulator and the executor: TP fastest, then CP, then DP, then PP
// (Megatron-core's default order "tp-cp-ep-dp-pp", parallel_state.py), so the ranks of a TP group
// are neighbours (one node, the fast link) and a CP ring's ranks are tp apart.
struct RankCoords {
  int tp_rank = 0;
  int dp_rank = 0;
  int pp_rank = 0;
  int cp_rank = 0;  // last, so that {tp, dp, pp} initialisers keep their meaning
};
inline RankCoords rank_coords(const ParallelConfig& c, int rank) {
  return {rank % c.tp, (rank / (c.tp * c.cp)) % c.dp, rank / (c.tp * c.cp * c.dp), (rank / c.tp) % c.cp};
}
inline int rank_of(const ParallelConfig& c, RankCoords r) {
  return r.tp_rank + c.tp * (r.cp_rank + c.cp * (r.dp_rank + c.dp * r.pp_rank));
}

// A rank's place in the expert grid of its pipeline stage (Megatron-core's expert rank generator, order
// etp-ep-edp over the stage's tp·cp·dp ranks): its slice of each expert's width, which experts it holds,
// and its rank among those holding the same (the expert-data-parallel group). With etp = tp the EP ranks
// are dp·cp ranks tp apart; with etp = 1 they are consecutive ranks, the TP group's first.
struct ExpertCoords {
  int etp_rank = 0, ep_rank = 0, edp_rank = 0;
};
inline ExpertCoords expert_coords(const ParallelConfig& c, int rank) {
  const int local = rank % (c.tp * c.cp * c.dp), etp = c.expert_tp();
  return {local % etp, (local / etp) % c.ep, local / (etp * c.ep)};
}

const char* to_string(Recompute recompute);
const char* to_string(Schedule schedule);
std::optional<Recompute> parse_recompute(std::string_view text);
std::optional<Schedule> parse_schedule(std::string_view text);
const char* to_string(CpComm comm);
std::optional<CpComm> parse_cp_comm(std::string_view text);
// The canonical names, for error messages: "none, selective, full or op".
std::string recompute_names();
std::string schedule_names();
std::string cp_comm_names();

// "tp8 pp16 dp8 z1 mb1 v1 sel sp 1f1b" (cp and its kind shown when cp > 1): compact one-line label used in logs and
// explanations.
std::string describe(const ParallelConfig& config);

}  // namespace loom
