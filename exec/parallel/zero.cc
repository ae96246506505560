#include "exec/parallel/zero.h"

#include <algorithm>

#include "core/trace_names.h"

namespace loom::exec {

namespace {
constexpr MemoryCategory kBuf = MemoryCategory::kBuffers;
}

ParameterStore::ParameterStore(const StageLayout& layout, ProcessGroups& groups, Backend& backend, Tracer* tracer)
    : layout_(layout),
      groups_(groups),
      backend_(backend),
      tracer_(tracer),
      zero_(groups.config.zero),
      dp_(groups.config.zero_shards()),
      buckets_(groups.grads(), tracer) {
  // Expert parallelism: routed experts reduce and shard over the expert-data-parallel group.
  if (groups.config.ep > 1 || groups.config.expert_tp() != groups.config.tp)
    expert_buckets_ = std::make_unique<GradientBuckets>(*groups.expert_dp, tracer);
  std::int64_t full = 0, sharded = 0;
  for (const Unit& u : layout_.units) {
    offset_.push_back(full);
    shard_offset_.push_back(sharded);
    full += u.padded;
    sharded += shard(u);
  }
  const std::size_t n = layout_.units.size();
  gathered_.resize(n);
  grad_bucket_.resize(n);
  gather_count_.assign(n, 0);
  prefetching_.resize(n);
  prefetch_start_us_.assign(n, 0.0);
  compute_ = backend_.compute_dtype();
  params_ = backend_.alloc(zero_ >= 3 ? sharded : full, 1, MemoryCategory::kParams, compute_);
  grads_ = backend_.alloc(zero_ >= 2 ? sharded : full, 1, MemoryCategory::kGrads);
  adam_m_ = backend_.alloc(zero_ >= 1 ? sharded : full, 1, MemoryCategory::kOptimizer);
  adam_v_ = backend_.alloc(zero_ >= 1 ? sharded : full, 1, MemoryCategory::kOptimizer);
  if (compute_ != DType::kF32) master_ = backend_.alloc(zero_ >= 1 ? sharded : full, 1, MemoryCategory::kOptimizer);
}

bool ParameterStore::expert_sharded(const Unit& u) const {
  return shard_place(u, groups_.config, groups_.world_rank).over_expert_dp;
}
int ParameterStore::shards_of(const Unit& u) const {
  return shard_place(u, groups_.config, groups_.world_rank).holders;
}
int ParameterStore::rank_in(const Unit& u) const { return shard_place(u, groups_.config, groups_.world_rank).index; }
Communicator& ParameterStore::comm_of(const Unit& u) {
  return expert_sharded(u) ? *groups_.expert_dp : groups_.zero_shards();
}

void ParameterStore::initialize(std::uint64_t seed) {
  for (std::size_t u = 0; u < layout_.units.size(); ++u) {
    const Unit& unit = layout_.units[u];
    std::vector<float> host(static_cast<std::size_t>(unit.padded), 0.0f);
    for (const ParamSlot& slot : unit.params) initialize_slot(host.data() + slot.offset, slot, seed);
    if (zero_ >= 3)
      backend_.from_host(params_.ref() + shard_offset_[u], host.data() + rank_in(unit) * shard(unit), shard(unit));
    else
      backend_.from_host(params_.ref() + offset_[u], host.data(), unit.padded);
    if (!master_.empty()) {
      if (zero_ >= 1)
        backend_.from_host(master_.ref() + shard_offset_[u], host.data() + rank_in(unit) * shard(unit), shard(unit));
      else
        backend_.from_host(master_.ref() + offset_[u], host.data(), unit.padded);
    }
  }
}

void ParameterStore::begin_step(int micro_batches) {
  micro_batches_ = micro_batches;
  backend_.zero(grads_.data(), grads_.numel());
}

void ParameterStore::prefetch(int u) {
  if (zero_ < 3 || gather_count_[u] > 0 || prefetching_[u] != nullptr) return;
  const Unit& unit = layout_.units[u];
  if (tracer_ != nullptr) prefetch_start_us_[u] = tracer_->now_us();
  gathered_[u] = backend_.empty(unit.padded, 1, kBuf, compute_);  // the gather writes every value
  prefetching_[u] = comm_of(unit).all_gather_async(params_.ref() + shard_offset_[u], gathered_[u].ref(), shard(unit));
}

TensorRef ParameterStore::acquire(int u) {
  if (zero_ < 3) return params_.ref() + offset_[u];
  if (gather_count_[u]++ == 0) {
    if (prefetching_[u] != nullptr) {
      prefetching_[u]->wait();
      prefetching_[u].reset();
      // One slice from the start of the gather to the moment the unit is needed.
      if (tracer_ != nullptr)
        tracer_->add(trace_names::collective(Collective::kAllGather, "dp"), "comm", prefetch_start_us_[u],
                     tracer_->now_us(), kCommLane);
    } else {
      const Unit& unit = layout_.units[u];
      TraceScope scope(tracer_, trace_names::collective(Collective::kAllGather, "dp"), "comm", kCommLane);
      gathered_[u] = backend_.alloc(unit.padded, 1, kBuf, compute_);
      comm_of(unit).all_gather(params_.ref() + shard_offset_[u], gathered_[u].ref(), shard(unit));
    }
  }
  return gathered_[u].ref();
}

void ParameterStore::release(int u) {
  if (zero_ < 3) return;
  if (--gather_count_[u] == 0) gathered_[u].reset();
}

float* ParameterStore::gradients(int u) {
  if (zero_ < 2) return grads_.data() + offset_[u];
  if (grad_bucket_[u].empty()) grad_bucket_[u] = backend_.alloc(layout_.units[u].padded, 1, kBuf);
  return grad_bucket_[u].data();
}

void ParameterStore::reduce_tp_partial(int u, float* grads) {
  if (groups_.config.tp == 1) return;
  const bool sp = groups_.config.sequence_parallel;
  const auto partial = [&](const ParamSlot& slot) { return slot.tp_partial || (sp && slot.sequence_partial); };
  const std::vector<ParamSlot>& slots = layout_.units[u].params;
  // Without SP only per-head QK-norm gains are partial sums; under SP every unit's reduction is traced.
  if (!sp && std::none_of(slots.begin(), slots.end(), partial)) return;
  TraceScope scope(tracer_, trace_names::collective(Collective::kAllReduce, "tp"), "comm", kCommLane);
  for (const ParamSlot& slot : slots)
    if (partial(slot)) groups_.tp->all_reduce(grads + slot.offset, slot.numel(), ReduceOp::kSum);
}

void ParameterStore::gradients_ready(int u) {
  const Unit& unit = layout_.units[u];
  if (zero_ < 2) {
    if (!last_micro_batch_) return;
    reduce_tp_partial(u, grads_.data() + offset_[u]);
    (expert_sharded(unit) ? *expert_buckets_ : buckets_).launch(grads_.data() + offset_[u], unit.padded);
    return;
  }
  Tensor& bucket = grad_bucket_[u];
  // No bucket: nothing was accumulated since the last reduce-scatter (zero-bubble's W pass of a unit whose
  // gradients its B pass made, where an earlier W already took them). Every rank of the group runs the
  // same program, so all of them skip it alike.
  if (!bucket.empty()) reduce_scatter_bucket(u);
  // HSDP: the step's reduced shard is summed over the groups holding the same shard.
  if (last_micro_batch_ && groups_.replica != nullptr) {
    TraceScope scope(tracer_, trace_names::collective(Collective::kAllReduce, "dp"), "comm", kCommLane);
    groups_.replica->all_reduce(grads_.data() + shard_offset_[u], shard(unit), ReduceOp::kSum);
  }
}

void ParameterStore::reduce_scatter_bucket(int u) {
  const Unit& unit = layout_.units[u];
  Tensor& bucket = grad_bucket_[u];
  reduce_tp_partial(u, bucket.data());
  // Reduce-scattered in place: this rank's sum lands in its own block of the bucket.
  float* mine = bucket.data() + rank_in(unit) * shard(unit);
  {
    TraceScope scope(tracer_, trace_names::collective(Collective::kReduceScatter, "dp"), "comm", kCommLane);
    comm_of(unit).reduce_scatter(bucket.data(), mine, shard(unit));
  }
  backend_.axpy(grads_.data() + shard_offset_[u], 1.0f, mine, shard(unit));
  bucket.reset();
}

void ParameterStore::finish_gradients() {
  buckets_.wait();
  if (expert_buckets_ != nullptr) expert_buckets_->wait();
  if (groups_.embedding == nullptr) return;
  // The tied word embedding lives on the first and the last stage; both copies take the sum.
  const int u = layout_.word_embedding_unit >= 0 ? layout_.word_embedding_unit : layout_.tied_head_unit;
  TraceScope scope(tracer_, trace_names::collective(Collective::kAllReduce, "embedding"), "comm", kCommLane);
  if (zero_ < 2)
    groups_.embedding->all_reduce(grads_.data() + offset_[u], layout_.units[u].padded, ReduceOp::kSum);
  else
    groups_.embedding->all_reduce(grads_.data() + shard_offset_[u], shard(layout_.units[u]), ReduceOp::kSum);
}

ParameterStore::Range ParameterStore::owned(int u) const {
  const Unit& unit = layout_.units[u];
  if (zero_ == 0) return {0, unit.size};
  const std::int64_t begin = rank_in(unit) * shard(unit);
  return {std::min(begin, unit.size), std::min(begin + shard(unit), unit.size)};
}

float* ParameterStore::grad_at(int u, std::int64_t i) {
  if (zero_ < 2) return grads_.data() + offset_[u] + i;
  return grads_.data() + shard_offset_[u] + (i - rank_in(layout_.units[u]) * shard(layout_.units[u]));
}

TensorRef ParameterStore::param_at(int u, std::int64_t i) {
  if (zero_ < 3) return params_.ref() + offset_[u] + i;
  return params_.ref() + shard_offset_[u] + (i - rank_in(layout_.units[u]) * shard(layout_.units[u]));
}

float* ParameterStore::moment_at(Tensor& moment, int u, std::int64_t i) {
  if (zero_ == 0) return moment.data() + offset_[u] + i;
  return moment.data() + shard_offset_[u] + (i - rank_in(layout_.units[u]) * shard(layout_.units[u]));
}

double ParameterStore::owned_grad_squares() {
  backend_.sum_squares_reset();  // every slot's share queued, the total read once
  const bool tp_leader = groups_.coords.tp_rank == 0;
  for (std::size_t u = 0; u < layout_.units.size(); ++u) {
    Range r = owned(static_cast<int>(u));
    // Replicated over DP (ZeRO-0), or over HSDP's shard groups: count once.
    if ((zero_ == 0 && rank_in(layout_.units[u]) != 0) ||
        (groups_.shard != nullptr && groups_.coords.dp_rank >= groups_.config.shard_group))
      r.end = r.begin;
    for (const ParamSlot& slot : layout_.units[u].params) {
      if (slot.tied_copy || (slot.tp_replicated && !tp_leader)) continue;
      const std::int64_t b = std::max(r.begin, slot.offset), e = std::min(r.end, slot.offset + slot.numel());
      if (b < e) backend_.sum_squares_add(grad_at(static_cast<int>(u), b), e - b);
    }
  }
  return backend_.sum_squares_result();
}

std::vector<ParameterStore::GradientSpan> ParameterStore::owned_gradients() {
  std::vector<GradientSpan> spans;
  for (std::size_t uu = 0; uu < layout_.units.size(); ++uu) {
    const int u = static_cast<int>(uu);
    const Range r = owned(u);
    const auto& params = layout_.units[uu].params;
    for (std::size_t s = 0; s < params.size(); ++s) {
      const std::int64_t b = std::max(r.begin, params[s].offset),
                         e = std::min(r.end, params[s].offset + params[s].numel());
      if (b < e) spans.push_back({u, static_cast<int>(s), grad_at(u, b), e - b});
    }
  }
  return spans;
}

void ParameterStore::optimizer_step(const OptimizerSettings& s, float lr, float grad_scale, int step) {
  TraceScope scope(tracer_, trace_names::kOptimizer, "compute", kComputeLane);
  for (std::size_t uu = 0; uu < layout_.units.size(); ++uu) {
    const int u = static_cast<int>(uu);
    const Unit& unit = layout_.units[u];
    const Range r = owned(u);
    for (const ParamSlot& slot : unit.params) {
      const std::int64_t b = std::max(r.begin, slot.offset), e = std::min(r.end, slot.offset + slot.numel());
      if (b >= e) continue;
      if (grad_scale != 1.0f) backend_.scale(grad_at(u, b), grad_scale, e - b);
      // Mixed precision: AdamW steps the fp32 master and writes the compute-dtype parameters.
      const bool mixed = !master_.empty();
      float* target = mixed ? moment_at(master_, u, b) : param_at(u, b).as<float>();
      backend_.adamw(target, grad_at(u, b), moment_at(adam_m_, u, b), moment_at(adam_v_, u, b), e - b, lr, s.beta1,
                     s.beta2, s.eps, slot.weight_decay ? s.weight_decay : 0.0f, step,
                     mixed ? param_at(u, b) : TensorRef());
    }
    if (zero_ == 1 || zero_ == 2) {  // every rank needs the full updated unit again
      TraceScope gather(tracer_, trace_names::collective(Collective::kAllGather, "dp"), "comm", kCommLane);
      const TensorRef full = params_.ref() + offset_[u];
      comm_of(unit).all_gather(full + rank_in(unit) * shard(unit), full, shard(unit));
    }
  }
}

std::vector<float> ParameterStore::unit_values(int u) {
  const Unit& unit = layout_.units[u];
  std::vector<float> host(static_cast<std::size_t>(unit.size));
  backend_.to_host(host.data(), acquire(u), unit.size);
  release(u);
  return host;
}

std::vector<float> ParameterStore::unit_gradients(int u) {
  const Unit& unit = layout_.units[u];
  std::vector<float> host(static_cast<std::size_t>(unit.size), 0.0f);
  if (zero_ < 2) backend_.to_host(host.data(), grads_.data() + offset_[u], unit.size);
  return host;
}

std::vector<float> ParameterStore::checkpoint_parameters() {
  std::vector<float> host(static_cast<std::size_t>(params_.numel()));
  if (master_.empty() || zero_ == 0 || zero_ == 3) {  // the master, if any, is laid out as the parameters
    backend_.to_host(host.data(), master_.empty() ? params_.ref() : master_.ref(), params_.numel());
    return host;
  }
  // ZeRO 1/2: each rank's master holds its shard of every unit; gather them into the full layout.
  Tensor full = backend_.empty(params_.numel(), 1, kBuf);
  for (std::size_t u = 0; u < layout_.units.size(); ++u)
    comm_of(layout_.units[u])
        .all_gather(master_.ref() + shard_offset_[u], full.ref() + offset_[u], shard(layout_.units[u]));
  backend_.to_host(host.data(), full.ref(), full.numel());
  return host;
}

void ParameterStore::load_parameters(const std::vector<float>& host) {
  backend_.from_host(params_.ref(), host.data(), params_.numel());
  if (master_.empty()) return;
  if (zero_ == 0 || zero_ == 3) {
    backend_.from_host(master_.ref(), host.data(), master_.numel());
    return;
  }
  for (std::size_t u = 0; u < layout_.units.size(); ++u) {
    const std::int64_t n = shard(layout_.units[u]);
    backend_.from_host(master_.ref() + shard_offset_[u], host.data() + offset_[u] + rank_in(layout_.units[u]) * n, n);
  }
}

void ParameterStore::import_full(const FullTensors& params, const FullTensors& m, const FullTensors& v) {
  // The master weights (mixed precision) take the same values as the parameters, sharded as the moments.
  Tensor* targets[4] = {&params_, &adam_m_, &adam_v_, &master_};
  const FullTensors* sources[4] = {&params, &m, &v, &params};
  for (std::size_t u = 0; u < layout_.units.size(); ++u) {
    const Unit& unit = layout_.units[u];
    for (int k = 0; k < 4; ++k) {
      if (targets[k]->empty()) continue;
      std::vector<float> host(static_cast<std::size_t>(unit.padded), 0.0f);
      for (const ParamSlot& slot : unit.params) {
        auto it = sources[k]->find(slot.name);
        if (it == sources[k]->end()) continue;
        const std::vector<float>& full = it->second;
        for (const RowBlock& b : slot.row_blocks)
          for (std::int64_t r = 0; r < b.count; ++r)
            for (std::int64_t c = 0; c < slot.cols; ++c) {
              const std::size_t index =
                  static_cast<std::size_t>((b.full_row + r) * slot.full_cols + slot.col_offset + c);
              if (index < full.size())
                host[static_cast<std::size_t>(slot.offset + (b.local_row + r) * slot.cols + c)] = full[index];
            }
      }
      const bool sharded = k == 0 ? zero_ >= 3 : zero_ >= 1;
      if (sharded)
        backend_.from_host(targets[k]->ref() + shard_offset_[u], host.data() + rank_in(unit) * shard(unit),
                           shard(unit));
      else
        backend_.from_host(targets[k]->ref() + offset_[u], host.data(), unit.padded);
    }
  }
}

}  // namespace loom::exec
