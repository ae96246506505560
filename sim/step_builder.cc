#include "sim/step_builder.h"

#include <algorithm>
#include <cmath>

#include "core/pipeline_split.h"
#include "core/units.h"

namespace loom::sim {

namespace {

TimeNs to_ns(double seconds) { return s_to_ns(seconds); }

}  // namespace

StepBuilder::StepBuilder(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& config,
                         const CostModel& cost, const std::vector<StageProgram>& programs, long long micro_batches,
                         StepGraph& graph)
    : model_(model),
      training_(training),
      c_(config),
      cost_(cost),
      programs_(programs),
      m_(micro_batches),
      graph_(graph) {
  graph_.reset(config.pp);
}

void StepBuilder::build(const std::vector<std::vector<ChunkCost>>& chunks) {
  const std::size_t slots = static_cast<std::size_t>(virtual_stages()) * m_;
  forward_.assign(slots, -1);
  backward_.assign(slots, -1);
  weight_.assign(slots, -1);
  send_forward_.assign(slots, -1);
  send_backward_.assign(slots, -1);
  graph_.reserve(slots * 4 + 16 * c_.pp);
  add_compute(chunks);
  add_pipeline_sends();
  add_data_parallel();
}

std::size_t StepBuilder::slot_of(int stage, const PipelineOp& p) const {
  return index(virtual_stage(p.chunk, stage, c_.pp), p.micro_batch);
}

bool StepBuilder::produces_grads(const PipelineOp& p) const {
  return p.pass == Pass::kW || (p.pass == Pass::kB && c_.schedule != Schedule::kZeroBubble);
}

std::int32_t StepBuilder::pass_op(int stage, const PipelineOp& p) const {
  const std::size_t slot = slot_of(stage, p);
  return p.pass == Pass::kF ? forward_[slot] : p.pass == Pass::kB ? backward_[slot] : weight_[slot];
}

// --- Compute passes ---

void StepBuilder::add_compute(const std::vector<std::vector<ChunkCost>>& chunks) {
  last_grad_op_.assign(c_.pp, std::vector<std::int32_t>(c_.vpp, -1));
  for (int s = 0; s < c_.pp; ++s) add_stage_compute(s, chunks[s]);
}

void StepBuilder::add_stage_compute(int s, const std::vector<ChunkCost>& chunks) {
  const bool zero3 = c_.zero >= 3 && c_.grad_ranks() > 1;
  // Kept gathered through the pipeline: one gather per chunk, at its first forward; its gradients are
  // reduce-scattered once, after its last backward (add_gradient_reduction).
  const bool kept = c_.zero3_gathered_through_pipeline(training_.zero3_pp_keep_gathered);
  std::vector<bool> gathered(c_.vpp, false);
  ComputeCursor cursor;
  for (const PipelineOp& p : programs_[s]) {
    const Op op = make_pass(s, p, chunks[p.chunk]);
    // ZeRO-3: gather this chunk's parameters, prefetched while the previous pass computes.
    const bool gathers = zero3 && p.pass != Pass::kW && !(kept && gathered[p.chunk]);
    gathered[p.chunk] = true;
    const std::int32_t gather = gathers ? add_gather(op, p.chunk, cursor) : -1;
    const std::int32_t id = add(op);
    if (gather >= 0) {
      // The first layer's parameters must have arrived; the rest stream in behind the compute.
      const int layers = std::max(1, chunk_layers(model_.layers, c_, s, p.chunk));
      graph_.depend(id, gather, 1.0f / static_cast<float>(layers));
      if (cursor.previous_gather >= 0) graph_.depend(id, cursor.previous_gather);
      cursor.previous_gather = gather;
    }
    if (zero3 && !kept && p.pass == Pass::kB) {
      cursor.pending_reduce = id;
      cursor.pending_reduce_chunk = p.chunk;
    }
    cursor.previous_compute = id;
    record_pass(s, p, id);
  }
}

Op StepBuilder::make_pass(int s, const PipelineOp& p, const ChunkCost& cost) const {
  Op op;
  op.stream = StepGraph::stream_of(s, StreamKind::kCompute);
  op.stage = static_cast<std::int16_t>(s);
  op.chunk = static_cast<std::int16_t>(virtual_stage(p.chunk, s, c_.pp));
  op.local_chunk = static_cast<std::int16_t>(p.chunk);
  op.micro_batch = static_cast<std::int32_t>(p.micro_batch);
  switch (p.pass) {
    case Pass::kF:
      op.kind = OpKind::kForward;
      op.duration = to_ns(cost.forward.seconds);
      break;
    case Pass::kB:
      op.kind = OpKind::kBackward;
      op.duration = to_ns(cost.backward.seconds);
      break;
    case Pass::kW:
      op.kind = OpKind::kWeightGrad;
      op.duration = to_ns(cost.weight.seconds);
      break;
  }
  return op;
}

std::int32_t StepBuilder::add_gather(const Op& pass, int local_chunk, ComputeCursor& cursor) {
  Op g;
  g.kind = OpKind::kDataParallel;
  g.stream = StepGraph::stream_of(pass.stage, StreamKind::kDataParallel);
  g.stage = pass.stage;
  g.chunk = pass.chunk;
  g.micro_batch = pass.micro_batch;
  g.collective = Collective::kAllGather;
  g.duration = to_ns(zero3_s(Collective::kAllGather, pass.stage, local_chunk));
  const std::int32_t gather = add(g);
  if (cursor.previous_compute >= 0) graph_.depend(gather, cursor.previous_compute, 0.0f);
  // The previous backward's gradients are reduce-scattered after this prefetch is issued.
  if (cursor.pending_reduce >= 0) {
    add_reduce_scatter(pass.stage, cursor.pending_reduce_chunk, cursor.pending_reduce);
    cursor.pending_reduce = -1;
  }
  return gather;
}

double StepBuilder::zero3_s(Collective c, int stage, int chunk) {
  const auto key = std::make_tuple(c, stage, chunk);
  auto it = zero3_s_.find(key);
  if (it == zero3_s_.end()) it = zero3_s_.emplace(key, cost_.zero3_collective_s(c, stage, chunk)).first;
  return it->second;
}

void StepBuilder::record_pass(int s, const PipelineOp& p, std::int32_t id) {
  const std::size_t slot = slot_of(s, p);
  if (p.pass == Pass::kF)
    forward_[slot] = id;
  else if (p.pass == Pass::kB)
    backward_[slot] = id;
  else
    weight_[slot] = id;
  if (produces_grads(p)) last_grad_op_[s][p.chunk] = id;
}

void StepBuilder::add_reduce_scatter(int stage, int chunk, std::int32_t producer) {
  Op op;
  op.kind = OpKind::kDataParallel;
  op.stream = StepGraph::stream_of(stage, StreamKind::kDataParallel);
  op.stage = static_cast<std::int16_t>(stage);
  op.collective = Collective::kReduceScatter;
  // ZeRO-2 shards over every dp rank; ZeRO-3 over its shard group (all dp ranks without HSDP).
  const double experts = cost_.chunk_expert_params(stage, chunk);
  op.duration =
      to_ns(c_.zero >= 3 ? zero3_s(Collective::kReduceScatter, stage, chunk)
                         : cost_.grad_collective_s(Collective::kReduceScatter,
                                                   (cost_.chunk_params(stage, chunk) - experts) * training_.grad_bytes,
                                                   experts * training_.grad_bytes));
  graph_.depend(add(op), producer);
}

// --- Pipeline sends ---

void StepBuilder::add_pipeline_sends() {
  // Sends go on the sender's channel in the sender's compute order, one transfer time per stage
  // boundary and direction (every micro-batch sends the same bytes).
  last_send_.assign(c_.pp, -1);
  for (int s = 0; s < c_.pp; ++s)
    add_stage_sends(s, to_ns(cost_.pipe_send_s(s, (s + 1) % c_.pp)),
                    to_ns(cost_.pipe_send_s(s, (s + c_.pp - 1) % c_.pp)));
  link_passes_across_stages();
}

void StepBuilder::add_stage_sends(int s, TimeNs to_next, TimeNs to_previous) {
  const int last_vs = virtual_stages() - 1;
  // Where sends block (Megatron's synchronous p2p), the stage's next pass waits for the send to complete.
  std::int32_t blocking = -1;
  for (const PipelineOp& p : programs_[s]) {
    const int vs = virtual_stage(p.chunk, s, c_.pp);
    if (blocking >= 0) {
      graph_.depend(pass_op(s, p), blocking);
      blocking = -1;
    }
    std::int32_t sent = -1;
    if (p.pass == Pass::kF && vs < last_vs)
      sent = add_send(s, p, SendDirection::kForward, to_next);
    else if (p.pass == Pass::kB && vs > 0)
      sent = add_send(s, p, SendDirection::kBackward, to_previous);
    if (training_.pipeline_sends_block) blocking = sent;
  }
}

std::int32_t StepBuilder::add_send(int s, const PipelineOp& p, SendDirection direction, TimeNs duration) {
  const std::size_t slot = slot_of(s, p);
  const bool forward = direction == SendDirection::kForward;
  Op send;
  send.kind = OpKind::kPipeSend;
  send.stream = StepGraph::stream_of(s, StreamKind::kPipe);
  send.stage = static_cast<std::int16_t>(s);
  send.chunk = static_cast<std::int16_t>(virtual_stage(p.chunk, s, c_.pp));
  send.micro_batch = static_cast<std::int32_t>(p.micro_batch);
  send.duration = duration;
  send.direction = direction;
  const std::int32_t id = add(send);
  graph_.depend(id, forward ? forward_[slot] : backward_[slot]);
  (forward ? send_forward_ : send_backward_)[slot] = id;
  last_send_[s] = id;
  return id;
}

void StepBuilder::link_passes_across_stages() {
  const int last_vs = virtual_stages() - 1;
  for (int vs = 0; vs <= last_vs; ++vs) {
    for (long long mb = 0; mb < m_; ++mb) {
      const std::size_t slot = index(vs, mb);
      if (vs > 0) graph_.depend(forward_[slot], send_forward_[index(vs - 1, mb)]);
      if (vs < last_vs)
        graph_.depend(backward_[slot], send_backward_[index(vs + 1, mb)]);
      else
        graph_.depend(backward_[slot], forward_[slot]);
      if (weight_[slot] >= 0) graph_.depend(weight_[slot], backward_[slot]);
    }
  }
}

// --- Data parallelism and the optimizer ---

void StepBuilder::add_data_parallel() {
  for (int s = 0; s < c_.pp; ++s) {
    last_dp_ = -1;
    if (c_.grad_ranks() > 1) add_gradient_reduction(s);  // over the dp·cp ranks
    add_tied_embedding_reduction(s);
    add_optimizer(s);
  }
}

std::int32_t StepBuilder::add_dp_op(int s, double seconds, Collective kind, std::int32_t after, float fraction) {
  Op op;
  op.kind = OpKind::kDataParallel;
  op.stream = StepGraph::stream_of(s, StreamKind::kDataParallel);
  op.stage = static_cast<std::int16_t>(s);
  op.duration = to_ns(seconds);
  op.collective = kind;
  const std::int32_t id = add(op);
  if (after >= 0) graph_.depend(id, after, fraction);
  last_dp_ = id;
  return id;
}

GradientBuckets gradient_buckets(const CostModel& cost, const TrainingSpec& training, const ParallelConfig& c,
                                 int stage, int chunk) {
  // Megatron-LM DDP bucket size, max(40M, 1M · the dp·cp group's size) (distributed_data_parallel.py).
  const double bucket_params = std::max(40e6, 1e6 * c.grad_ranks());
  GradientBuckets b;
  b.reduce = c.zero == 0 ? Collective::kAllReduce : Collective::kReduceScatter;
  const double params = cost.chunk_params(stage, chunk);
  // Routed experts (expert parallelism) reduce over the expert-data-parallel group, in the same buckets.
  const double expert_share = params > 0 ? cost.chunk_expert_params(stage, chunk) / params : 0.0;
  // The final backward of the chunk releases its gradients bucket by bucket, last layer first.
  b.count = training.overlap_grad_reduce ? std::max(1, static_cast<int>(std::ceil(params / bucket_params))) : 1;
  b.bytes = params / b.count * training.grad_bytes;
  // ZeRO-3 reduce-scatters per unit (core/training_spec.h Zero3Unit): the chunk's share per bucket.
  b.seconds = c.zero >= 3 ? cost.zero3_collective_s(b.reduce, stage, chunk) / b.count
                          : cost.grad_collective_s(b.reduce, b.bytes * (1.0 - expert_share), b.bytes * expert_share);
  return b;
}

double optimizer_op_s(const CostModel& cost, const ParallelConfig& c, int stage) {
  // ZeRO shards the routed experts' states over the expert-data-parallel group.
  const double experts = cost.stage_expert_params(stage);
  const double shards = c.zero >= 1 ? static_cast<double>(c.zero_shards()) : 1.0;
  const double expert_shards = c.zero >= 1 ? static_cast<double>(c.expert_grad_ranks()) : 1.0;
  const double shard = (cost.stage_params(stage) - experts) / shards + experts / expert_shards;
  return cost.grad_norm_reduce_s() + cost.optimizer_s(shard) + cost.fp8_weight_cast_s(stage);
}

double param_all_gather_s(const CostModel& cost, const TrainingSpec& training, const ParallelConfig& c, int stage) {
  if (c.grad_ranks() <= 1 || (c.zero != 1 && c.zero != 2)) return 0.0;
  const double experts = cost.stage_expert_params(stage);
  return cost.grad_collective_s(Collective::kAllGather, (cost.stage_params(stage) - experts) * training.param_bytes,
                                experts * training.param_bytes);
}

void StepBuilder::add_gradient_reduction(int s) {
  // Chunks finish their gradients in reverse order of the model (the backward runs backwards).
  for (int chunk = c_.vpp - 1; chunk >= 0; --chunk) {
    if (c_.zero == 2) add_zero2_reduce_scatters(s, chunk);
    const GradientBuckets buckets = gradient_buckets(cost_, training_, c_, s, chunk);
    // Kept gathered through the pipeline, FSDP's post-backward runs once the chunk's last backward is over.
    const bool after_backward = c_.zero3_gathered_through_pipeline(training_.zero3_pp_keep_gathered);
    for (int b = 0; b < buckets.count; ++b) {
      const std::int32_t reduced =
          add_dp_op(s, buckets.seconds, buckets.reduce, last_grad_op_[s][chunk],
                    after_backward ? 1.0f : static_cast<float>(b + 1) / static_cast<float>(buckets.count));
      // Without overlap the whole buffer is reduced once the stage's backward is over (Megatron-LM
      // 2021's allreduce_gradients after forward_backward_func), every chunk's last pass included.
      if (!training_.overlap_grad_reduce)
        for (int other = 0; other < c_.vpp; ++other)
          if (other != chunk) graph_.depend(reduced, last_grad_op_[s][other]);
      // HSDP: the step's reduced shard is then all-reduced across the replicas of the shard group
      // (FSDP2 reduces across replicas once, after the last micro-batch's reduce-scatter).
      if (c_.zero >= 3 && c_.shard_replicas() > 1)
        add_dp_op(s, cost_.replica_collective_s(Collective::kAllReduce, buckets.bytes / c_.zero_shards()),
                  Collective::kAllReduce, reduced, 1.0f);
    }
  }
}

void StepBuilder::add_zero2_reduce_scatters(int s, int chunk) {
  // ZeRO-2 reduce-scatters each micro-batch's gradients as its backward ends (ZeRO-3 does the
  // same, interleaved with its gathers, in add_compute).
  for (const PipelineOp& p : programs_[s]) {
    if (!produces_grads(p) || p.chunk != chunk) continue;
    const std::int32_t producer = pass_op(s, p);
    if (producer == last_grad_op_[s][chunk]) continue;  // the final one is bucketed
    add_reduce_scatter(s, chunk, producer);
  }
}

void StepBuilder::add_tied_embedding_reduction(int s) {
  // The last stage holds a copy of the word embedding when the head is tied to it, or when multi-token
  // prediction looks the shifted tokens up there (core/partition.h, StageParams::mtp).
  const bool tied_copy = (model_.tied_embeddings || model_.mtp_layers > 0) && c_.pp > 1;
  if (!tied_copy || (s != 0 && s != c_.pp - 1)) return;
  const double bytes =
      static_cast<double>(padded_vocab(model_.vocab, c_.tp)) * model_.hidden / c_.tp * training_.grad_bytes;
  const bool same_node = cost_.stages_share_node(0, c_.pp - 1);
  const double seconds = cost_.collectives().time_s(Collective::kAllReduce, bytes, {2, same_node ? 2 : 1});
  const std::int32_t id = add_dp_op(s, seconds, Collective::kAllReduce, last_grad_op_[0][0], 1.0f);
  graph_.depend(id, last_grad_op_[c_.pp - 1][c_.vpp - 1]);
}

void StepBuilder::add_optimizer(int s) {
  Op opt;
  opt.kind = OpKind::kOptimizer;
  opt.stream = StepGraph::stream_of(s, StreamKind::kCompute);
  opt.stage = static_cast<std::int16_t>(s);
  opt.duration = to_ns(optimizer_op_s(cost_, c_, s));
  const std::int32_t optimizer = add(opt);
  if (last_dp_ >= 0) graph_.depend(optimizer, last_dp_);
  if (training_.pipeline_sends_block && last_send_[s] >= 0) graph_.depend(optimizer, last_send_[s]);
  // ZeRO-1/2: the updated parameter shards are gathered back.
  if (const double gather = param_all_gather_s(cost_, training_, c_, s); gather > 0)
    add_dp_op(s, gather, Collective::kAllGather, optimizer, 1.0f);
}

}  // namespace loom::sim
