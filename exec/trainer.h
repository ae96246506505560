// Trainer: one rank's share of a training run — its pipeline stage of the GPT, its parameter shard,
// its slice of the data — and the step that ties them together: pipeline schedule, DP/ZeRO gradient
// reduction, global-norm clipping, AdamW with warmup + cosine, and the step's measurements.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/result.h"
#include "core/training_spec.h"
#include "exec/backend.h"
#include "exec/checkpoint.h"
#include "exec/data_loader.h"
#include "exec/model/gpt_layout.h"
#include "exec/model/gpt_stage.h"
#include "exec/optimizer.h"
#include "exec/parallel/pipeline.h"
#include "exec/parallel/tensor_parallel.h"
#include "exec/parallel/zero.h"
#include "exec/process_groups.h"
#include "exec/trace.h"

namespace loom::exec {

// Fault injection for tests: at step `step` a NaN goes into the loss (tensor "loss") or into the
// first gradient value of parameter `tensor` that each rank holds, after the gradients are reduced.
// `loom run` reads it from LOOM_TEST_INJECT_NAN=STEP:TENSOR (nan_injection_from_env).
struct NanInjection {
  int step = 0;  // 0: none
  std::string tensor;
};

// A test of the communication watchdog: world rank `rank` stops answering in step `step` — it
// sleeps, alive, before its first backward of that step, as a rank stuck in a kernel or a deadlock
// would. `loom run` reads it from LOOM_TEST_HANG=RANK:STEP (hang_injection_from_env).
struct HangInjection {
  int rank = -1;
  int step = 0;  // 0: none
};

struct TrainerOptions {
  ModelSpec model;
  TrainingSpec training;  // global_batch and seq_len are used
  ParallelConfig config;
  OptimizerSettings optimizer;
  std::uint64_t seed = 1234;
  // Hidden and attention dropout probability; < 0: 0.1 when the model trains with dropout
  // (ModelSpec::dropout, as GPT-3/Megatron), else 0.
  float dropout = -1;
  float dropout_probability() const { return dropout >= 0 ? dropout : (model.dropout ? 0.1f : 0.0f); }
  // The attention kernel the layers run (not training.attention, the planner's default): kUnfused keeps
  // the probabilities; kFlash the output and its log-sum-exp, the scores recomputed in the backward.
  // Context parallelism always runs flash style.
  AttentionKernel attention = AttentionKernel::kUnfused;
  NanInjection inject_nan{};
  HangInjection inject_hang{};
};

// LOOM_TEST_INJECT_NAN parsed and its tensor checked against the model's parameter names; no
// injection when the variable is unset.
Result<NanInjection> nan_injection_from_env(const ModelSpec& model, const ParallelConfig& config);
// LOOM_TEST_HANG parsed, its rank checked against the world; no injection when the variable is unset.
Result<HangInjection> hang_injection_from_env(int world_size);

struct StepMetrics {
  int step = 0;  // counting from 1
  double loss = 0;
  double grad_norm = 0;
  double learning_rate = 0;
  double step_time_s = 0;
  double tokens_per_s = 0;
  double tflops_per_gpu = 0;  // model FLOPs per rank (core/flops.h, as `loom sim` counts them)
  double mfu = 0;             // tflops_per_gpu over the device's dense peak (Backend::peak_flops); 0: unknown
  std::array<std::int64_t, kMemoryCategories> peak_bytes{};  // this rank, since the run began
  std::int64_t peak_total_bytes = 0;
  // MoE: the most rows this rank's experts received in one layer's dispatch, over the mean (tokens·k),
  // since the run began (1 is balanced; what `loom plan --moe-imbalance` assumes). 0 for a dense model.
  double moe_imbalance = 0;
  double moe_imbalance_min = 0;  // the fewest rows, likewise
  // Empty when the loss and the global gradient norm are finite (every rank sees the same, reduced
  // values). Otherwise where the first non-finite value is — "loss", or the first parameter, in the
  // order of pipeline stages and then each stage's units, whose gradient holds one — and the step's
  // update was not applied (the gradients are zeroed at the next step; the step still counts, its
  // update does not: the next applied one takes its learning rate and Adam step).
  std::string nonfinite;
};

class Trainer {
 public:
  Trainer(const TrainerOptions& options, ProcessGroups& groups, Backend& backend, const TokenFile& data,
          Tracer* tracer);
  StepMetrics step();
  int completed_steps() const { return completed_steps_; }
  int micro_batches() const { return micro_batches_; }
  int seq() const { return seq_; }
  const StageLayout& layout() const { return layout_.combined; }
  ParameterStore& parameters() { return *params_; }
  Backend& backend() { return backend_; }
  const TrainerOptions& options() const { return options_; }

  // Per-rank shard + manifest under dir/step_NNNNNNNN; `latest` names the newest complete one
  // (exec/checkpoint.h). Collective; on failure every rank returns the same error.
  Status save_checkpoint(const std::string& dir);
  Status load_checkpoint(const std::string& dir);
  const RunIdentity& identity() const { return identity_; }

 private:
  TrainerOptions options_;
  ProcessGroups& groups_;
  Backend& backend_;
  double peak_flops_;  // the device's, once (a CUDA device query is not free); 0: unknown
  Tracer* tracer_;
  int seq_;
  int micro_batches_;
  RankLayout layout_;
  TensorParallel tp_;
  std::unique_ptr<ParameterStore> params_;
  std::vector<std::unique_ptr<ChunkParameters>> chunk_params_;
  std::vector<std::unique_ptr<GptStage>> chunks_;
  std::unique_ptr<PipelineRunner> pipeline_;
  DataLoader data_;
  int completed_steps_ = 0;
  // Updates applied: a step whose update --on-nan skip dropped consumes its data but advances neither
  // Adam's step count (bias correction) nor the LR schedule, as Megatron-LM and apex do.
  int optimizer_updates_ = 0;
  RunIdentity identity_;

  Result<ShardEntry> write_shard(const std::string& path, int step, const std::vector<float>& parameters);
  void inject_nan(int step, double& loss_sum);
  void hang_if_requested(int step) const;
  std::string first_nonfinite_gradient();
};

}  // namespace loom::exec
