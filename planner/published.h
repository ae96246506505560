// Reproduction of published end-to-end training measurements with the simulator: Korthikanti
// et al. 2022, Table 5 (iteration time of 22B–1T GPT models on DGX A100 nodes, full recompute and
// sequence parallelism + selective recompute). Used by `loom validate --published` and its test.
#pragma once

#include <string>
#include <vector>

#include "core/cluster_spec.h"
#include "core/parallel_config.h"
#include "core/result.h"

namespace loom {

struct PublishedRow {
  std::string model;    // "22B", "175B", ...
  std::string setting;  // "full_recompute" | "sequence_parallel_plus_selective"
  ParallelConfig config;
  int gpus = 0;
  long long global_batch = 0;
  double published_s = 0;
  double predicted_s = 0;
  double error() const { return (predicted_s - published_s) / published_s; }
};

// Reads korthikanti2022.json and simulates each row on `cluster`.
Result<std::vector<PublishedRow>> reproduce_korthikanti_table5(const std::string& json_path,
                                                               const ClusterSpec& cluster);

}  // namespace loom
