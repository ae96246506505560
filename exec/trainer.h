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
};

struct StepMetrics {
  int step = 0;  // counting from 1
  double loss = 0;
  double grad_norm = 0;
  double learning_rate = 0;
  double step_time_s = 0;
  double tokens_per_s = 0;
  double tflops_per_gpu = 0;  // model FLOPs per rank (core/flops.h, as `loom sim` counts them)
  std::array<std::int64_t, kMemoryCategories> peak_bytes{};  // this rank, since the run began
  std::int64_t peak_total_bytes = 0;
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

  // Per-rank shard + manifest under dir/step_NNNNNNNN; `latest` names the newest complete one.
  Status save_checkpoint(const std::string& dir);
  Status load_checkpoint(const std::string& dir);

 private:
  TrainerOptions options_;
  ProcessGroups& groups_;
  Backend& backend_;
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
};

}  // namespace loom::exec
