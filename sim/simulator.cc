#include "sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "core/config_rules.h"
#include "core/trace_names.h"
#include "core/units.h"
#include "sim/step_metrics.h"

namespace loom::sim {

double model_flops_per_step(const ModelSpec& m, const TrainingSpec& t) {
  const int seq = t.seq_len > 0 ? t.seq_len : m.seq_len;
  const double tokens = static_cast<double>(t.global_batch) * seq;
  const double forward = m.layers * (m.layer_linear_flops_fwd(tokens) + m.layer_attention_flops_fwd(tokens, seq)) +
                         m.lm_head_flops_fwd(tokens, m.vocab);
  return 3.0 * forward;  // backward = 2× forward
}

double recompute_flops_per_step(const ModelSpec& m, const TrainingSpec& t, Recompute recompute) {
  const int seq = t.seq_len > 0 ? t.seq_len : m.seq_len;
  const double tokens = static_cast<double>(t.global_batch) * seq;
  switch (recompute) {
    case Recompute::kNone: return 0.0;
    case Recompute::kSelective: return m.layers * m.layer_attention_flops_fwd(tokens, seq);
    case Recompute::kFull: return m.layers * (m.layer_linear_flops_fwd(tokens) + m.layer_attention_flops_fwd(tokens, seq));
  }
  return 0.0;
}

namespace {

TimeNs to_ns(double seconds) { return s_to_ns(seconds); }

// Builds the step graph of one pipeline: compute passes in schedule order, pipeline sends,
// data-parallel reductions, ZeRO gathers and the optimizer.
class StepBuilder {
 public:
  StepBuilder(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& config,
              const CostModel& cost, const std::vector<StageProgram>& programs, long long micro_batches,
              StepGraph& graph)
      : model_(model), training_(training), c_(config), cost_(cost), programs_(programs), m_(micro_batches),
        graph_(graph) {
    graph_.reset(config.pp);
  }

  void build(const std::vector<std::vector<ChunkCost>>& chunks);
  StepGraph& graph() { return graph_; }

 private:
  int virtual_stages() const { return c_.pp * c_.vpp; }
  std::size_t index(int vs, long long mb) const { return static_cast<std::size_t>(vs) * m_ + mb; }
  std::int32_t add(const Op& op) { return graph_.add(op); }
  void add_compute(const std::vector<std::vector<ChunkCost>>& chunks);
  void add_pipeline_sends();
  void add_data_parallel();
  // ZeRO-2/3: reduce-scatter of one micro-batch's gradients of a chunk after `producer` ends.
  void add_reduce_scatter(int stage, int chunk, std::int32_t producer);

  const ModelSpec& model_;
  const TrainingSpec& training_;
  const ParallelConfig& c_;
  const CostModel& cost_;
  const std::vector<StageProgram>& programs_;
  long long m_;
  StepGraph& graph_;
  std::vector<std::int32_t> forward_, backward_, weight_;  // [virtual stage · m + mb]
  std::vector<std::int32_t> send_forward_, send_backward_;
  std::vector<std::int32_t> last_send_;  // per stage: its last pipeline send
  // Per stage and local chunk: the op after which that chunk's gradients are final.
  std::vector<std::vector<std::int32_t>> last_grad_op_;
};

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

void StepBuilder::add_compute(const std::vector<std::vector<ChunkCost>>& chunks) {
  const bool zero3 = c_.zero >= 3 && c_.dp > 1;
  last_grad_op_.assign(c_.pp, std::vector<std::int32_t>(c_.vpp, -1));
  for (int s = 0; s < c_.pp; ++s) {
    std::int32_t previous_compute = -1, previous_gather = -1, pending_reduce = -1;
    int pending_reduce_chunk = 0;
    for (const PipelineOp& p : programs_[s]) {
      const int vs = virtual_stage(p.chunk, s, c_.pp);
      const ChunkCost& cc = chunks[s][p.chunk];
      Op op;
      op.stream = StepGraph::stream_of(s, StreamKind::kCompute);
      op.stage = static_cast<std::int16_t>(s);
      op.chunk = static_cast<std::int16_t>(vs);
      op.micro_batch = static_cast<std::int32_t>(p.micro_batch);
      op.detail = p.chunk;
      switch (p.pass) {
        case Pass::kF:
          op.kind = OpKind::kForward;
          op.duration = to_ns(cc.forward.seconds);
          break;
        case Pass::kB:
          op.kind = OpKind::kBackward;
          op.duration = to_ns(cc.backward.seconds);
          break;
        case Pass::kW:
          op.kind = OpKind::kWeightGrad;
          op.duration = to_ns(cc.weight.seconds);
          break;
      }
      std::int32_t gather = -1;
      if (zero3 && p.pass != Pass::kW) {
        // ZeRO-3: gather this chunk's parameters, prefetched while the previous pass computes.
        Op g;
        g.kind = OpKind::kDataParallel;
        g.stream = StepGraph::stream_of(s, StreamKind::kDataParallel);
        g.stage = op.stage;
        g.chunk = op.chunk;
        g.micro_batch = op.micro_batch;
        g.detail = static_cast<std::int32_t>(Collective::kAllGather);
        g.duration = to_ns(cost_.dp_collective_s(Collective::kAllGather,
                                                 cost_.chunk_params(s, p.chunk) * training_.param_bytes));
        gather = add(g);
        if (previous_compute >= 0) graph_.depend(gather, previous_compute, 0.0f);
        // The previous backward's gradients are reduce-scattered after this prefetch is issued.
        if (pending_reduce >= 0) {
          add_reduce_scatter(s, pending_reduce_chunk, pending_reduce);
          pending_reduce = -1;
        }
      }
      const std::int32_t id = add(op);
      if (gather >= 0) {
        // The first layer's parameters must have arrived; the rest stream in behind the compute.
        const int layers = std::max(1, model_.layers / (c_.pp * c_.vpp));
        graph_.depend(id, gather, 1.0f / static_cast<float>(layers));
        if (previous_gather >= 0) graph_.depend(id, previous_gather);
        previous_gather = gather;
      }
      if (zero3 && p.pass == Pass::kB) {
        pending_reduce = id;
        pending_reduce_chunk = p.chunk;
      }
      previous_compute = id;
      const std::size_t slot = index(vs, p.micro_batch);
      if (p.pass == Pass::kF) forward_[slot] = id;
      else if (p.pass == Pass::kB) backward_[slot] = id;
      else weight_[slot] = id;
      const bool produces_grads = p.pass == Pass::kW || (p.pass == Pass::kB && c_.schedule != Schedule::kZeroBubble);
      if (produces_grads) last_grad_op_[s][p.chunk] = id;
    }
  }
}

void StepBuilder::add_reduce_scatter(int stage, int chunk, std::int32_t producer) {
  Op op;
  op.kind = OpKind::kDataParallel;
  op.stream = StepGraph::stream_of(stage, StreamKind::kDataParallel);
  op.stage = static_cast<std::int16_t>(stage);
  op.detail = static_cast<std::int32_t>(Collective::kReduceScatter);
  op.duration = to_ns(cost_.dp_collective_s(Collective::kReduceScatter,
                                            cost_.chunk_params(stage, chunk) * training_.grad_bytes));
  graph_.depend(add(op), producer);
}

void StepBuilder::add_pipeline_sends() {
  const int last_vs = virtual_stages() - 1;
  // One transfer time per stage boundary and direction (every micro-batch sends the same bytes).
  std::vector<TimeNs> send_next(c_.pp), send_previous(c_.pp);
  for (int s = 0; s < c_.pp; ++s) {
    send_next[s] = to_ns(cost_.pipe_send_s(s, (s + 1) % c_.pp));
    send_previous[s] = to_ns(cost_.pipe_send_s(s, (s + c_.pp - 1) % c_.pp));
  }
  // Sends go on the sender's channel in the sender's compute order. Where sends block (Megatron's
  // synchronous p2p), the stage's next pass waits for the send to complete.
  last_send_.assign(c_.pp, -1);
  for (int s = 0; s < c_.pp; ++s) {
    std::int32_t blocking = -1;
    for (const PipelineOp& p : programs_[s]) {
      const int vs = virtual_stage(p.chunk, s, c_.pp);
      const std::size_t slot = index(vs, p.micro_batch);
      if (blocking >= 0) {
        const std::int32_t pass = p.pass == Pass::kF ? forward_[slot] : p.pass == Pass::kB ? backward_[slot] : weight_[slot];
        graph_.depend(pass, blocking);
        blocking = -1;
      }
      std::int32_t sent = -1;
      Op send;
      send.kind = OpKind::kPipeSend;
      send.stream = StepGraph::stream_of(s, StreamKind::kPipe);
      send.stage = static_cast<std::int16_t>(s);
      send.chunk = static_cast<std::int16_t>(vs);
      send.micro_batch = static_cast<std::int32_t>(p.micro_batch);
      if (p.pass == Pass::kF && vs < last_vs) {
        send.duration = send_next[s];
        send.detail = 0;
        const std::int32_t id = add(send);
        graph_.depend(id, forward_[slot]);
        send_forward_[slot] = id;
        last_send_[s] = sent = id;
      } else if (p.pass == Pass::kB && vs > 0) {
        send.duration = send_previous[s];
        send.detail = 1;
        const std::int32_t id = add(send);
        graph_.depend(id, backward_[slot]);
        send_backward_[slot] = id;
        last_send_[s] = sent = id;
      }
      if (training_.pipeline_sends_block) blocking = sent;
    }
  }
  for (int vs = 0; vs <= last_vs; ++vs) {
    for (long long mb = 0; mb < m_; ++mb) {
      const std::size_t slot = index(vs, mb);
      if (vs > 0) graph_.depend(forward_[slot], send_forward_[index(vs - 1, mb)]);
      if (vs < last_vs) graph_.depend(backward_[slot], send_backward_[index(vs + 1, mb)]);
      else graph_.depend(backward_[slot], forward_[slot]);
      if (weight_[slot] >= 0) graph_.depend(weight_[slot], backward_[slot]);
    }
  }
}

void StepBuilder::add_data_parallel() {
  const double dp = c_.dp;
  const double bucket_params = std::max(40e6, 1e6 * dp);  // Megatron-LM DDP bucket size
  const bool tied_copy = model_.tied_embeddings && c_.pp > 1;
  for (int s = 0; s < c_.pp; ++s) {
    std::int32_t last_dp = -1;
    auto dp_op = [&](double seconds, Collective kind, std::int32_t after, float fraction) {
      Op op;
      op.kind = OpKind::kDataParallel;
      op.stream = StepGraph::stream_of(s, StreamKind::kDataParallel);
      op.stage = static_cast<std::int16_t>(s);
      op.duration = to_ns(seconds);
      op.detail = static_cast<std::int32_t>(kind);
      const std::int32_t id = add(op);
      if (after >= 0) graph_.depend(id, after, fraction);
      last_dp = id;
      return id;
    };
    if (c_.dp > 1) {
      const Collective reduce = c_.zero == 0 ? Collective::kAllReduce : Collective::kReduceScatter;
      // Chunks finish their gradients in reverse order of the model (the backward runs backwards).
      for (int chunk = c_.vpp - 1; chunk >= 0; --chunk) {
        const double params = cost_.chunk_params(s, chunk);
        if (c_.zero == 2) {
          // ZeRO-2 reduce-scatters each micro-batch's gradients as its backward ends (ZeRO-3 does
          // the same, interleaved with its gathers, in add_compute).
          for (const PipelineOp& p : programs_[s]) {
            const bool grads = p.pass == Pass::kW || (p.pass == Pass::kB && c_.schedule != Schedule::kZeroBubble);
            if (!grads || p.chunk != chunk) continue;
            const std::size_t slot = index(virtual_stage(chunk, s, c_.pp), p.micro_batch);
            const std::int32_t producer = p.pass == Pass::kW ? weight_[slot] : backward_[slot];
            if (producer == last_grad_op_[s][chunk]) continue;  // the final one is bucketed below
            add_reduce_scatter(s, chunk, producer);
          }
        }
        // The final backward of the chunk releases its gradients bucket by bucket, last layer first.
        const int buckets =
            training_.overlap_grad_reduce ? std::max(1, static_cast<int>(std::ceil(params / bucket_params))) : 1;
        const double bucket_bytes = params / buckets * training_.grad_bytes;
        for (int b = 0; b < buckets; ++b)
          dp_op(cost_.dp_collective_s(reduce, bucket_bytes), reduce, last_grad_op_[s][chunk],
                static_cast<float>(b + 1) / static_cast<float>(buckets));
      }
    }
    if (tied_copy && (s == 0 || s == c_.pp - 1)) {
      // The word embedding on the first stage and its copy on the last all-reduce their grads.
      const double bytes = static_cast<double>(padded_vocab(model_.vocab, c_.tp)) * model_.hidden / c_.tp *
                           training_.grad_bytes;
      const bool same_node = cost_.stages_share_node(0, c_.pp - 1);
      const double seconds = cost_.collectives().time_s(Collective::kAllReduce, bytes, {2, same_node ? 2 : 1});
      const std::int32_t id = dp_op(seconds, Collective::kAllReduce, last_grad_op_[0][0], 1.0f);
      graph_.depend(id, last_grad_op_[c_.pp - 1][c_.vpp - 1]);
    }
    Op opt;
    opt.kind = OpKind::kOptimizer;
    opt.stream = StepGraph::stream_of(s, StreamKind::kCompute);
    opt.stage = static_cast<std::int16_t>(s);
    const double shard = cost_.stage_params(s) / (c_.zero >= 1 ? dp : 1.0);
    opt.duration = to_ns(cost_.optimizer_s(shard));
    const std::int32_t optimizer = add(opt);
    if (last_dp >= 0) graph_.depend(optimizer, last_dp);
    if (training_.pipeline_sends_block && last_send_[s] >= 0) graph_.depend(optimizer, last_send_[s]);
    if (c_.dp > 1 && (c_.zero == 1 || c_.zero == 2))
      dp_op(cost_.dp_collective_s(Collective::kAllGather, cost_.stage_params(s) * training_.param_bytes),
            Collective::kAllGather, optimizer, 1.0f);
  }
}

// Collectives on a stage's data-parallel channel (gradient reductions, ZeRO gathers) run beside
// its compute and hold `fraction` of the SMs while they do (CostModel::overlapped does the same
// for the TP collectives inside a pass): each pass is lengthened by `fraction` of the time a DP
// collective ran beside it in `t`, and lists the passes it lengthened; the caller updates the
// timeline for them (one correction: the lengthening moves the collectives little).
void share_sms_with_dp_collectives(StepGraph& g, const Timeline& t, double fraction,
                                   std::vector<std::int32_t>& lengthened) {
  struct Interval {
    TimeNs begin, end;
    std::int32_t op;
  };
  thread_local std::vector<std::vector<Interval>> passes, collectives;
  passes.resize(g.stages());
  collectives.resize(g.stages());
  for (int s = 0; s < g.stages(); ++s) passes[s].clear(), collectives[s].clear();
  for (std::int32_t i = 0; i < static_cast<std::int32_t>(g.size()); ++i) {
    const Op& op = g.op(i);
    const Interval iv{t.start[i], t.end(g, i), i};
    if (op.kind == OpKind::kDataParallel) collectives[op.stage].push_back(iv);
    else if (op.kind == OpKind::kForward || op.kind == OpKind::kBackward || op.kind == OpKind::kWeightGrad)
      passes[op.stage].push_back(iv);
  }
  lengthened.clear();
  for (int s = 0; s < g.stages(); ++s) {
    // Both lists are in stream order, so sorted by start, and neither stream overlaps itself.
    std::size_t k = 0;
    for (const Interval& pass : passes[s]) {
      while (k < collectives[s].size() && collectives[s][k].end <= pass.begin) ++k;
      TimeNs beside = 0;
      for (std::size_t j = k; j < collectives[s].size() && collectives[s][j].begin < pass.end; ++j)
        beside += std::min(pass.end, collectives[s][j].end) - std::max(pass.begin, collectives[s][j].begin);
      if (beside <= 0) continue;
      g.op(pass.op).duration += static_cast<TimeNs>(std::llround(fraction * static_cast<double>(beside)));
      lengthened.push_back(pass.op);
    }
  }
}

}  // namespace

Result<SimResult> simulate(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& config,
                           const ClusterSpec& cluster, const SimOptions& options) {
  const CollectiveModel collectives(cluster);
  return simulate(model, training, config, cluster, collectives, options);
}

Result<SimResult> simulate(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& config,
                           const ClusterSpec& cluster, const CollectiveModel& collectives, const SimOptions& options) {
  // The rules of a legal configuration (stages even: the cost model splits layers evenly).
  if (Status legal = check_config(model, training, config); !legal) return legal.error();
  const long long m = config.micro_batches(training.global_batch);
  auto programs = make_schedule(config.schedule, config.pp, static_cast<int>(m), config.vpp);
  if (!programs) return programs.error();

  CostModel cost(model, training, config, cluster, collectives);
  cost.set_record_segments(options.record_segments);
  const bool split = config.schedule == Schedule::kZeroBubble;
  std::vector<std::vector<ChunkCost>> chunks(config.pp);
  for (int s = 0; s < config.pp; ++s)
    for (int c = 0; c < config.vpp; ++c) chunks[s].push_back(cost.chunk(s, c, split));

  // The planner simulates thousands of steps per thread: without a graph to keep, each reuses
  // the last one's storage (writing fresh pages cost as much as running the engine).
  thread_local StepGraph reused(1);
  StepGraph kept(config.pp);
  StepBuilder builder(model, training, config, cost, *programs, m, options.keep_graph ? kept : reused);
  builder.build(chunks);
  auto timeline = run_engine(builder.graph());
  if (!timeline) return timeline.error();
  const double sm_fraction = cluster.compute.collective_sm_fraction;
  if (sm_fraction > 0 && config.dp > 1) {
    thread_local std::vector<std::int32_t> lengthened;
    share_sms_with_dp_collectives(builder.graph(), *timeline, sm_fraction, lengthened);
    run_engine_again(builder.graph(), *timeline, lengthened);
  }

  SimResult r;
  r.config = config;
  r.micro_batches = m;
  r.step_time_s = ns_to_s(timeline->makespan);
  const int seq = training.seq_len > 0 ? training.seq_len : model.seq_len;
  r.tokens_per_s = static_cast<double>(training.global_batch) * seq / r.step_time_s;
  r.model_flops = model_flops_per_step(model, training);
  r.hardware_flops = r.model_flops + recompute_flops_per_step(model, training, config.recompute);
  const double gpus = config.world_size();
  r.tflops_per_gpu = r.model_flops / r.step_time_s / gpus / 1e12;
  r.hw_tflops_per_gpu = r.hardware_flops / r.step_time_s / gpus / 1e12;
  r.mfu = r.model_flops / (r.step_time_s * gpus * cluster.device.peak_flops);

  const StepStats stats = step_stats(builder.graph(), *timeline, chunks, options.keep_graph);
  r.stages = stats.stages;
  r.bubble_fraction = stats.bubble_fraction;
  r.exposed = stats.exposed;
  r.critical_path = stats.critical_path;
  r.limited_by = stats.limited_by;
  if (options.keep_graph) {
    r.chunk_costs = std::move(chunks);
    r.graph = std::move(builder.graph());
    r.timeline = std::move(*timeline);
    r.options = options;
  }
  return r;
}

}  // namespace loom::sim
