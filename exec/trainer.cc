#include "exec/trainer.h"

#include <chrono>
#include <cmath>
#include <vector>

#include "core/flops.h"

namespace loom::exec {

Trainer::Trainer(const TrainerOptions& options, ProcessGroups& groups, Backend& backend, const TokenFile& data,
                 Tracer* tracer)
    : options_(options),
      groups_(groups),
      backend_(backend),
      tracer_(tracer),
      seq_(options.training.seq_len > 0 ? options.training.seq_len : options.model.seq_len),
      micro_batches_(static_cast<int>(options.config.micro_batches(options.training.global_batch))),
      layout_(make_rank_layout(options.model, options.config, groups.coords.tp_rank, groups.coords.pp_rank)),
      tp_(*groups.tp, backend, options.config.sequence_parallel, tracer),
      data_(data, seq_, options.config.micro_batch, micro_batches_, options.config.dp, groups.coords.dp_rank) {
  for (Communicator* c : {groups_.world.get(), groups_.tp.get(), groups_.dp.get(), groups_.pp.get(),
                          groups_.embedding.get(), groups_.shard.get(), groups_.replica.get()})
    if (c != nullptr) c->use_backend(backend_);
  params_ = std::make_unique<ParameterStore>(layout_.combined, groups_, backend_, tracer_);
  params_->initialize(options_.seed);
  const DropoutSettings dropout{options_.dropout_probability(), options_.seed};
  std::vector<GptStage*> chunks;
  for (std::size_t c = 0; c < layout_.chunks.size(); ++c) {
    chunk_params_.push_back(std::make_unique<ChunkParameters>(*params_, layout_.unit_offset[c]));
    chunks_.push_back(std::make_unique<GptStage>(options_.model, options_.config, layout_.chunks[c], seq_, backend_,
                                                 tp_, *chunk_params_.back(), dropout, tracer_));
    chunks.push_back(chunks_.back().get());
  }
  pipeline_ = std::make_unique<PipelineRunner>(std::move(chunks), groups_, backend_, tracer_);
}

StepMetrics Trainer::step() {
  const auto start = std::chrono::steady_clock::now();
  const int step_number = completed_steps_ + 1;
  const std::int64_t tokens_per_micro_batch = chunks_.front()->tokens();
  const double tokens_per_rank = static_cast<double>(tokens_per_micro_batch) * micro_batches_;
  const float loss_scale = static_cast<float>(1.0 / (tokens_per_rank * options_.config.dp));

  std::vector<std::vector<int>> tokens(micro_batches_), targets(micro_batches_);
  auto load = [&](int i) {
    if (tokens[i].empty()) data_.load(completed_steps_, i, tokens[i], targets[i]);
    return MicroBatch{tokens[i].data(), targets[i].data(), data_.first_sequence(completed_steps_, i)};
  };
  params_->begin_step(micro_batches_);
  const double loss_sum =
      pipeline_->run(micro_batches_, loss_scale, load, [&](int i) { params_->begin_micro_batch(i); });
  params_->finish_gradients();

  // One world reduction carries the squared gradient norm and the loss (counted on the last
  // stage's first TP rank of every DP replica).
  const bool counts_loss = groups_.last_stage() && groups_.coords.tp_rank == 0;
  double totals[2] = {params_->owned_grad_squares(), counts_loss ? loss_sum : 0.0};
  groups_.world->all_reduce(totals, 2, ReduceOp::kSum);
  StepMetrics m;
  m.step = step_number;
  m.grad_norm = std::sqrt(totals[0]);
  m.loss = totals[1] / (tokens_per_rank * options_.config.dp);
  m.learning_rate = learning_rate_at(options_.optimizer, step_number);
  params_->optimizer_step(options_.optimizer, static_cast<float>(m.learning_rate),
                          clip_coefficient(options_.optimizer, m.grad_norm), step_number);
  backend_.synchronize();
  completed_steps_ = step_number;

  m.step_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double global_tokens = static_cast<double>(options_.training.global_batch) * seq_;
  m.tokens_per_s = global_tokens / m.step_time_s;
  m.tflops_per_gpu = tflops_per_gpu(model_flops_per_step(options_.model, options_.training.global_batch, seq_),
                                    m.step_time_s, options_.config.world_size());
  for (int c = 0; c < kMemoryCategories; ++c)
    m.peak_bytes[c] = backend_.memory().peak_bytes(static_cast<MemoryCategory>(c));
  m.peak_total_bytes = backend_.memory().peak_total_bytes();
  return m;
}

}  // namespace loom::exec
