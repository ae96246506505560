// The on-machine validation matrix of `loom validate --profile`: each configuration is simulated
// with the measured cost file and run for real by `loom run` under mpirun, and the two step times
// and per-rank memory peaks are set side by side.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/cluster_spec.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/result.h"
#include "core/training_spec.h"

namespace loom::cli {

struct MatrixConfig {
  std::string name;  // "dp2-zero1", "pp2-1f1b-m8", ...
  ParallelConfig config;
  std::int64_t global_batch = 8;
  int ranks() const { return config.world_size(); }
};

// A GPT big enough that a step takes a measurable fraction of a second on one core, and whose
// GEMM shapes (seq 160 against widths 96..768) never coincide with its attention matmul shapes,
// so each has its own entry in the measured GEMM table.
ModelSpec validation_model();

// ≥ 10 configurations of at most 2 ranks: one rank; DP2 with ZeRO 0-3; TP2; PP2 GPipe and 1F1B at
// 4 and 8 micro-batches; full recompute; gradient accumulation.
std::vector<MatrixConfig> validation_matrix();

// The executor trains in fp32 with unfused attention and overlapped DP gradient buckets.
TrainingSpec executor_training(const ModelSpec& model, const MatrixConfig& c);

struct MatrixOptions {
  std::string loom_binary;  // this program
  std::string mpirun = "mpirun";
  std::string work_dir;  // model JSON, token file, logs
  int steps = 8;
  int warmup_steps = 3;      // dropped before the median
  int threads_per_rank = 1;  // the cost file's device is one core
  int timeout_s = 600;
};

struct RankMemory {
  int rank = 0;
  double predicted_gib = 0;
  double measured_gib = 0;  // peak of everything the rank allocated
};

struct MatrixRow {
  MatrixConfig config;
  double predicted_step_time_s = 0;
  double measured_step_time_s = 0;
  std::vector<double> measured_step_times_s;  // every step after warm-up (of the kept round)
  std::vector<double> round_step_times_s;     // the median step of every round (validate --rounds)
  double predicted_peak_memory_gib = 0;       // most loaded rank
  double measured_peak_memory_gib = 0;
  std::vector<RankMemory> ranks;
  bool oversubscribed = false;  // more threads than cores: the measurement shares cores
  // CPU time the run's processes received / (wall time × ranks × threads): below 1 when other
  // work on the host (or oversubscription) took cores from the measured ranks.
  double cpu_share = 0;
  double step_error() const { return predicted_step_time_s / measured_step_time_s - 1.0; }
  double memory_error() const;  // worst rank, against the measured total
};

// Writes the model and a token file into options.work_dir (created if missing).
Status prepare_matrix_inputs(const MatrixOptions& options);

// Simulates `c` and runs it with `loom run`; an error names the config and the run's last stderr line.
Result<MatrixRow> run_matrix_config(const MatrixConfig& c, const ClusterSpec& cluster, const MatrixOptions& options);

}  // namespace loom::cli
