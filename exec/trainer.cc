#include "exec/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/flops.h"
#include "exec/comm_activity.h"

namespace loom::exec {

Trainer::Trainer(const TrainerOptions& options, ProcessGroups& groups, Backend& backend, const TokenFile& data,
                 Tracer* tracer)
    : options_(options),
      groups_(groups),
      backend_(backend),
      peak_flops_(backend.peak_flops()),
      tracer_(tracer),
      seq_(options.training.seq_len > 0 ? options.training.seq_len : options.model.seq_len),
      micro_batches_(static_cast<int>(options.config.micro_batches(options.training.global_batch))),
      layout_(make_rank_layout(options.model, options.config, groups.coords.tp_rank, groups.coords.pp_rank,
                               groups.ep_rank())),
      tp_(*groups.tp, backend, options.config.sequence_parallel, tracer),
      data_(data, seq_, options.config.micro_batch, micro_batches_, options.config.dp, groups.coords.dp_rank,
            options.config.cp, groups.coords.cp_rank),
      identity_(run_identity(options, data)) {
  for (std::unique_ptr<Communicator>* c : groups_.all())
    if (*c != nullptr) (*c)->use_backend(backend_);
  params_ = std::make_unique<ParameterStore>(layout_.combined, groups_, backend_, tracer_);
  params_->initialize(options_.seed);
  const DropoutSettings dropout{options_.dropout_probability(), options_.seed};
  std::vector<GptStage*> chunks;
  for (std::size_t c = 0; c < layout_.chunks.size(); ++c) {
    chunk_params_.push_back(std::make_unique<ChunkParameters>(*params_, layout_.unit_offset[c]));
    chunks_.push_back(std::make_unique<GptStage>(options_.model, options_.config, layout_.chunks[c], seq_, backend_,
                                                 tp_, *chunk_params_.back(), dropout, tracer_, groups_.ep.get(),
                                                 groups_.cp.get(), options_.attention));
    chunks.push_back(chunks_.back().get());
  }
  pipeline_ = std::make_unique<PipelineRunner>(std::move(chunks), groups_, backend_, tracer_);
}

StepMetrics Trainer::step() {
  const auto start = std::chrono::steady_clock::now();
  const int step_number = completed_steps_ + 1;
  CommActivity::process().set_step(step_number);
  const std::int64_t tokens_per_micro_batch = chunks_.front()->tokens();
  const double tokens_per_rank = static_cast<double>(tokens_per_micro_batch) * micro_batches_;
  // The loss is the mean over every token of the step: the dp·cp ranks' local sums over their count.
  const double tokens_per_step = tokens_per_rank * options_.config.grad_ranks();
  const float loss_scale = static_cast<float>(1.0 / tokens_per_step);

  std::vector<std::vector<int>> tokens(micro_batches_), targets(micro_batches_);
  auto load = [&](int i) {
    if (tokens[i].empty()) data_.load(completed_steps_, i, tokens[i], targets[i]);
    return MicroBatch{tokens[i].data(), targets[i].data(), data_.first_sequence(completed_steps_, i)};
  };
  params_->begin_step(micro_batches_);
  double loss_sum = pipeline_->run(micro_batches_, loss_scale, load, [&](int i) {
    if (i == 0) hang_if_requested(step_number);
    params_->begin_micro_batch(i);
  });
  params_->finish_gradients();
  inject_nan(step_number, loss_sum);

  // One world reduction carries the squared gradient norm and the loss (counted on the last
  // stage's first TP rank of every DP replica and CP rank): a NaN or Inf anywhere reaches every rank in it.
  const bool counts_loss = groups_.last_stage() && groups_.coords.tp_rank == 0;
  double totals[2] = {params_->owned_grad_squares(), counts_loss ? loss_sum : 0.0};
  groups_.world->all_reduce(totals, 2, ReduceOp::kSum);
  StepMetrics m;
  m.step = step_number;
  m.grad_norm = std::sqrt(totals[0]);
  m.loss = totals[1] / tokens_per_step;
  const int update = optimizer_updates_ + 1;
  m.learning_rate = learning_rate_at(options_.optimizer, update);
  if (!std::isfinite(m.loss))
    m.nonfinite = "loss";
  else if (!std::isfinite(m.grad_norm))
    m.nonfinite = first_nonfinite_gradient();  // a collective, entered by every rank alike
  if (m.nonfinite.empty()) {
    params_->optimizer_step(options_.optimizer, static_cast<float>(m.learning_rate),
                            clip_coefficient(options_.optimizer, m.grad_norm), update);
    optimizer_updates_ = update;
  }
  backend_.synchronize();
  completed_steps_ = step_number;

  m.step_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (tracer_ != nullptr) tracer_->resolve();  // after the clock stops: it waits for nothing more, but takes time
  const double global_tokens = static_cast<double>(options_.training.global_batch) * seq_;
  m.tokens_per_s = global_tokens / m.step_time_s;
  m.tflops_per_gpu = tflops_per_gpu(model_flops_per_step(options_.model, options_.training.global_batch, seq_),
                                    m.step_time_s, options_.config.world_size());
  if (peak_flops_ > 0) m.mfu = m.tflops_per_gpu * 1e12 / peak_flops_;
  for (int c = 0; c < kMemoryCategories; ++c)
    m.peak_bytes[c] = backend_.memory().peak_bytes(static_cast<MemoryCategory>(c));
  m.peak_total_bytes = backend_.memory().peak_total_bytes();
  for (const auto& chunk : chunks_) {
    m.moe_imbalance = std::max(m.moe_imbalance, chunk->moe_imbalance());
    const double least = chunk->moe_imbalance_min();
    if (least > 0) m.moe_imbalance_min = m.moe_imbalance_min > 0 ? std::min(m.moe_imbalance_min, least) : least;
  }
  return m;
}

void Trainer::hang_if_requested(int step) const {
  if (options_.inject_hang.step != step || options_.inject_hang.rank != groups_.world_rank) return;
  std::fprintf(stderr, "loom: rank %d: LOOM_TEST_HANG: stops answering in step %d\n", groups_.world_rank, step);
  std::fflush(stderr);
  while (true) std::this_thread::sleep_for(std::chrono::hours(1));  // until the job is ended from outside
}

void Trainer::inject_nan(int step, double& loss_sum) {
  if (options_.inject_nan.step != step) return;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (options_.inject_nan.tensor == "loss") {
    loss_sum = nan;  // the ranks that do not count the loss send 0 whatever it is
    return;
  }
  for (const auto& span : params_->owned_gradients())
    if (layout_.combined.units[span.unit].params[span.slot].name == options_.inject_nan.tensor) {
      backend_.scale(span.values, nan, 1);
      return;
    }
}

std::string Trainer::first_nonfinite_gradient() {
  // Each rank's first non-finite parameter gradient in its layout order, keyed so that the smallest
  // key over the world is the first in stage order: (((pp · kUnits + unit) · kSlots + slot) · ep + ep
  // rank) · tp + tp rank (the ep rank tells whose routed experts the unit holds).
  constexpr std::int64_t kUnits = 1 << 16, kSlots = 1 << 10;  // far above any stage's counts; exact in a double
  const std::int64_t tp = options_.config.tp, ep = options_.config.ep;
  double key = std::numeric_limits<double>::max();
  for (const auto& span : params_->owned_gradients())
    if (!std::isfinite(backend_.sum_squares(span.values, span.count))) {
      key = static_cast<double>(
          (((groups_.coords.pp_rank * kUnits + span.unit) * kSlots + span.slot) * ep + groups_.ep_rank()) * tp +
          groups_.coords.tp_rank);
      break;
    }
  double negated = -key;  // the world's maximum of the negated keys: its minimum key
  groups_.world->all_reduce(&negated, 1, ReduceOp::kMax);
  if (-negated == std::numeric_limits<double>::max()) return "gradient norm";  // no single tensor holds it
  auto k = static_cast<std::int64_t>(-negated);
  const int tp_rank = static_cast<int>(k % tp);
  k /= tp;
  const int ep_rank = static_cast<int>(k % ep);
  k /= ep;
  const auto slot = static_cast<std::size_t>(k % kSlots);
  k /= kSlots;
  const auto unit = static_cast<std::size_t>(k % kUnits);
  const int pp_rank = static_cast<int>(k / kUnits);
  return make_rank_layout(options_.model, options_.config, tp_rank, pp_rank, ep_rank)
      .combined.units[unit]
      .params[slot]
      .name;
}

Result<HangInjection> hang_injection_from_env(int world_size) {
  const char* value = std::getenv("LOOM_TEST_HANG");
  if (value == nullptr) return HangInjection{};
  HangInjection hang;
  char tail = 0;
  if (std::sscanf(value, "%d:%d%c", &hang.rank, &hang.step, &tail) != 2 || hang.rank < 0 || hang.rank >= world_size ||
      hang.step < 1)
    return make_error(
        fmt::format("LOOM_TEST_HANG: '{}' is not RANK:STEP (a rank below {}, a step from 1)", value, world_size));
  return hang;
}

Result<NanInjection> nan_injection_from_env(const ModelSpec& model, const ParallelConfig& config) {
  const char* value = std::getenv("LOOM_TEST_INJECT_NAN");
  if (value == nullptr) return NanInjection{};
  const std::string text = value;
  const auto colon = text.find(':');
  NanInjection injection;
  char* end = nullptr;
  injection.step = colon == std::string::npos ? 0 : static_cast<int>(std::strtol(text.c_str(), &end, 10));
  if (injection.step < 1 || end != text.c_str() + colon || colon + 1 == text.size())
    return make_error(
        fmt::format("LOOM_TEST_INJECT_NAN: '{}' is not STEP:TENSOR (a step from 1, then 'loss' or a "
                    "parameter name)",
                    text));
  injection.tensor = text.substr(colon + 1);
  if (injection.tensor == "loss") return injection;
  std::string example;
  for (int pp = 0; pp < config.pp; ++pp)
    for (int tp = 0; tp < config.tp; ++tp)
      for (int ep = 0; ep < config.ep; ++ep)
        for (const Unit& unit : make_rank_layout(model, config, tp, pp, ep).combined.units)
          for (const ParamSlot& slot : unit.params) {
            if (slot.name == injection.tensor) return injection;
            if (example.empty()) example = slot.name;
          }
  return make_error(fmt::format("LOOM_TEST_INJECT_NAN: {} has no parameter '{}' (names look like '{}')", model.name,
                                injection.tensor, example));
}

}  // namespace loom::exec
