// The on-machine validation matrix of `loom validate --profile`: each configuration is simulated
// with the measured cost file and run for real by `loom run` under mpirun, and the two step times
// and per-rank memory peaks are set side by side. Two matrices: the CPU one (fp32, a small GPT, one
// core per rank) and the GPU one (`--backend cuda`: bf16 mixed precision, GPU-sized models, one GPU
// per rank).
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

enum class MatrixBackend { kCpu, kCuda };
const char* to_string(MatrixBackend b);

struct MatrixConfig {
  std::string name;  // "dp2-zero1", "pp2-1f1b-m8", ...
  ParallelConfig config;
  std::int64_t global_batch = 8;
  std::string model = "gpt-validate";  // the name of one of matrix_models(backend)
  int seq_len = 160;                   // tokens per sequence the configuration trains
  AttentionKernel attention = AttentionKernel::kUnfused;
  int ranks() const { return config.world_size(); }
};

// A GPT big enough that a step takes a measurable fraction of a second on one core, and whose
// GEMM shapes (seq 160 against widths 96..768) never coincide with its attention matmul shapes,
// so each has its own entry in the measured GEMM table.
ModelSpec validation_model();

// The models a matrix trains: the validation model on the CPU; on a GPU, GPT-2 small, a 350M and a
// 1.3B GPT and a 1B Llama (RMSNorm, SwiGLU, RoPE, grouped-query attention).
std::vector<ModelSpec> matrix_models(MatrixBackend backend);
ModelSpec matrix_model(MatrixBackend backend, const std::string& name);  // one of matrix_models

// CPU: ≥ 10 configurations of at most 2 ranks: one rank; DP2 with ZeRO 0-3; TP2; PP2 GPipe and 1F1B
// at 4 and 8 micro-batches; full recompute; gradient accumulation.
// GPU: ≥ 12 single-GPU configurations over model size, micro-batch, gradient accumulation, recompute
// none/selective/full, sequence length and flash/unfused attention, each fitting an 80 GB GPU; then 2-GPU layouts (DP
// with ZeRO-1 and 3, TP with SP, PP), run where the machine has two GPUs.
std::vector<MatrixConfig> validation_matrix(MatrixBackend backend = MatrixBackend::kCpu);

// What the executor runs: fp32 on the CPU; bf16 mixed precision on a GPU (bf16 weights and
// activations, fp32 main gradients, master weights and Adam moments: 2 + 4 + 12 bytes a parameter).
// Both: the configuration's attention kernel (unfused unless it says flash), DP gradient buckets
// overlapped with the backward, TP collectives after their GEMMs (not beside them).
TrainingSpec executor_training(const MatrixConfig& c, MatrixBackend backend = MatrixBackend::kCpu);

// The simulator's step time and the memory model's per-stage totals for one configuration.
struct MatrixPrediction {
  double step_time_s = 0;
  std::vector<double> stage_gib;  // everything the executor's tensors hold, per pipeline stage
  bool fits = false;              // within the device's memory, the framework reserve included
  double peak_gib() const;
};
Result<MatrixPrediction> predict_matrix_config(const MatrixConfig& c, const ClusterSpec& cluster,
                                               MatrixBackend backend);

struct MatrixOptions {
  MatrixBackend backend = MatrixBackend::kCpu;
  std::string loom_binary;                // this program
  std::string run_cluster = "local-cpu";  // `loom run --cluster`: the device's capacity (the profile on a GPU)
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

// Writes each model of the matrix and a token file for it into options.work_dir (created if missing):
// model.json and tokens.bin for the CPU matrix; model-NAME.json and tokens-NAME.bin on a GPU.
Status prepare_matrix_inputs(const MatrixOptions& options, const std::vector<MatrixConfig>& configs);

// Simulates `c` and runs it with `loom run`; an error names the config and the run's last stderr line.
Result<MatrixRow> run_matrix_config(const MatrixConfig& c, const ClusterSpec& cluster, const MatrixOptions& options);

}  // namespace loom::cli
