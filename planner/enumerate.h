// Enumeration of parallel configurations: every (tp, cp, pp, dp) with tp·cp·pp·dp = GPUs and every
// ZeRO stage, micro-batch, interleave, recompute, sequence-parallel and schedule that is legal
// for the model and cluster (core/config_rules.h, checked level by level so a broken tp rule
// skips its micro-batches). Illegal combinations are kept with the reason they were dropped.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/cluster_spec.h"
#include "core/config_rules.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/result.h"
#include "core/training_spec.h"

namespace loom {

// Restrictions from the command line; an empty list means "every legal value".
struct SearchSpace {
  std::vector<int> tp, pp, dp, zero, micro_batch, vpp;
  // Context parallelism; empty: 1, and for long sequences the sizes of default_cp_sizes.
  std::vector<int> cp;
  std::vector<CpComm> cp_comm;  // empty: p2p (the ring)
  // Expert parallelism; empty: 1 for dense models, and for MoE models every size that divides both
  // the routed experts and dp·cp.
  std::vector<int> ep;
  // Expert tensor parallelism; empty: tp, and for MoE models with tp > 1 also 1 (experts whole).
  std::vector<int> etp;
  std::vector<Recompute> recompute;
  std::vector<bool> sequence_parallel;
  std::vector<Schedule> schedule;
  std::vector<int> shard_group = {};  // ZeRO-3 shard groups (0: all dp ranks); other stages ignore it
  // The pipeline split; unset: the even split and every split of candidate_splits that is legal
  // (core/pipeline_split.h).
  std::optional<PipelineSplit> split = std::nullopt;
};

// The context-parallel sizes searched when --cp is not given: 1, and the powers of two that leave
// each rank at least kMinCpTokensPerRank tokens of a `seq`-token sequence (and split it into 2·cp
// chunks). See enumerate.cc for why.
inline constexpr int kMinCpTokensPerRank = 4096;
std::vector<int> default_cp_sizes(int seq);

struct Rejection {
  ParallelConfig config;  // fields past the level where the rule applies keep their defaults
  std::string reason;     // "heads 96 not divisible by tp 64"
  std::string rule;       // the reason's rule, for grouping (a rule:: key of core/config_rules.h, or the search's)
  std::string framework;  // the software stack searched under (TrainingSpec::framework; "" none)
};

struct Enumeration {
  std::vector<ParallelConfig> legal;
  std::vector<Rejection> rejected;
};

// Fails only when no (tp, pp, dp) layout can use the GPUs at all.
Result<Enumeration> enumerate_configs(const ModelSpec& model, const TrainingSpec& training, const ClusterSpec& cluster,
                                      const SearchSpace& space);

}  // namespace loom
