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
  // Rows whose settings are partly unpublished (Narayanan et al.): the slowest configuration that fits
  // with what is published, and its settings. A published time above it is slower than any run Loom
  // can cost with those settings: a cost is missing, whatever was run. 0 where the row is fully given.
  double slowest_s = 0;
  std::string slowest_setting;
  double error() const { return (predicted_s - published_s) / published_s; }
};

// Reads korthikanti2022.json and simulates each row on `cluster`.
Result<std::vector<PublishedRow>> reproduce_korthikanti_table5(const std::string& json_path,
                                                               const ClusterSpec& cluster);

// Narayanan et al. 2021, Table 1 (narayanan2021_table1.json: GPT 1.7B–1T on 32–3,072 A100s): each
// row planned with its published TP and PP under `framework` (megatron-lm-2021: the behaviours and
// the features of the software that ran it, core/framework.h) and full recompute; micro-batch,
// schedule and interleaving are not published, so the planner picks them and the row reports the
// fastest configuration that fits (`setting` holds it, e.g. "mb2 vpp5 interleaved"), and the slowest.
Result<std::vector<PublishedRow>> reproduce_narayanan_table1(const std::string& json_path, const ClusterSpec& cluster,
                                                             const std::string& framework, int threads = 0);

}  // namespace loom
