// The spec flags every subcommand that takes specs shares (--model, --cluster, --gpus,
// --global-batch, --seq, --tokens, ...) and the parallel-config flags (--tp ... --schedule),
// which take one value or, in `plan`, a comma list.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/cluster_spec.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/training_spec.h"
#include "planner/enumerate.h"

namespace loom::cli {

struct Specs {
  ModelSpec model;
  ClusterSpec cluster;
  TrainingSpec training;
  std::string cluster_name;  // as given on the command line (preset name or path)
};

struct SpecFlags {
  std::string model;
  std::string cluster;
  long long gpus = 0;
  long long global_batch = 0;
  long long seq = 0;
  double tokens = 0;
  std::string attention = "flash";
  bool allow_cross_node_tp = false;
  int grad_bytes = 0;  // 0: the default of TrainingSpec
  bool sync_pipeline_sends = false;

  // `required` makes --model/--gpus/--global-batch mandatory; defaults fill the rest.
  void add_to(CLI::App& app, const std::string& default_model, const std::string& default_cluster,
              bool required);
  // Loads and validates; throws InputError with one clear line.
  Specs resolve() const;
};

struct ConfigLists {
  std::vector<int> tp, pp, dp, zero, micro_batch, vpp;
  std::vector<Recompute> recompute;
  std::vector<bool> sequence_parallel;
  std::vector<Schedule> schedule;
};

// The planner's search restrictions from the command-line lists.
SearchSpace to_search_space(const ConfigLists& lists);

struct ConfigFlags {
  std::string tp, pp, dp, zero, micro_batch, vpp, recompute, sp, schedule;

  void add_to(CLI::App& app, bool lists);
  ConfigLists lists() const;  // throws InputError
  // One configuration; unset flags take the defaults given (tp/pp default 1, dp = gpus/(tp·pp)).
  ParallelConfig single(int gpus) const;  // throws InputError
};

}  // namespace loom::cli
