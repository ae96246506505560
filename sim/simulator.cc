#include "sim/simulator.h"

#include "sim/jitter.h"
#include "sim/nic_sharing.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "core/config_rules.h"
#include "core/flops.h"
#include "core/trace_names.h"
#include "core/units.h"
#include "sim/step_builder.h"
#include "sim/step_metrics.h"

namespace loom::sim {

namespace {

// Collectives on a stage's data-parallel channel (gradient reductions, ZeRO gathers) run beside
// its compute and hold `fraction` of the SMs while they do (CostModel::overlapped does the same
// for the TP collectives inside a pass): each pass is lengthened by `fraction` of the time a DP
// collective ran beside it in `t`, and lists the passes it lengthened; the caller updates the
// timeline for them (one correction: the lengthening moves the collectives little). A pass's wait for
// its ZeRO-3 gathers (PassCost::dp_comm_exposed_s) runs beside the gather it waits for but computes
// nothing, so it is not lengthened.
void share_sms_with_dp_collectives(StepGraph& g, const Timeline& t, const std::vector<std::vector<ChunkCost>>& chunks,
                                   double fraction, std::vector<std::int32_t>& lengthened) {
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
    if (op.kind == OpKind::kDataParallel)
      collectives[op.stage].push_back(iv);
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
      const Op& op = g.op(pass.op);
      const ChunkCost& cost = chunks[op.stage][op.local_chunk];
      const double waiting = op.kind == OpKind::kForward    ? cost.forward.dp_comm_exposed_s
                             : op.kind == OpKind::kBackward ? cost.backward.dp_comm_exposed_s
                                                            : cost.weight.dp_comm_exposed_s;
      beside -= std::min(beside, s_to_ns(waiting));
      if (beside <= 0) continue;
      g.op(pass.op).duration += static_cast<TimeNs>(std::llround(fraction * static_cast<double>(beside)));
      lengthened.push_back(pass.op);
    }
  }
}

// The cost of each pass of every chunk for one micro-batch: [stage][local chunk].
std::vector<std::vector<ChunkCost>> chunk_costs(const CostModel& cost, const ParallelConfig& config) {
  const bool split = config.schedule == Schedule::kZeroBubble;
  std::vector<std::vector<ChunkCost>> chunks(config.pp);
  for (int s = 0; s < config.pp; ++s)
    for (int c = 0; c < config.vpp; ++c) chunks[s].push_back(cost.chunk(s, c, split));
  return chunks;
}

// Which of the step's transfers leave the node (ranks: TP fastest, then CP, DP, PP). The data-parallel
// groups of a stage span tp·cp·dp consecutive ranks, the ZeRO shard groups tp·cp·shard_group.
NicCrossings nic_crossings(const CostModel& cost, const ClusterSpec& cluster, const ParallelConfig& c) {
  NicCrossings x;
  x.forward_send.resize(c.pp);
  x.backward_send.resize(c.pp);
  for (int s = 0; s < c.pp && c.pp > 1; ++s) {
    x.forward_send[s] = !cost.stages_share_node(s, (s + 1) % c.pp);
    x.backward_send[s] = !cost.stages_share_node(s, (s + c.pp - 1) % c.pp);
  }
  const long long group = static_cast<long long>(c.tp) * c.cp;
  x.all_reduce = group * c.dp > cluster.gpus_per_node;
  x.reduce_scatter = x.all_gather = group * (c.shard_group > 0 ? c.shard_group : c.dp) > cluster.gpus_per_node;
  return x;
}

// Runs the engine on the step; where DP collectives hold SMs, lengthens the passes beside them;
// where pipeline sends and DP collectives meet on a NIC, lengthens both; and updates the timeline.
Result<Timeline> run_step(StepGraph& graph, const CostModel& cost, const std::vector<std::vector<ChunkCost>>& chunks,
                          const ClusterSpec& cluster, const ParallelConfig& config, bool share_nic) {
  auto timeline = run_engine(graph);
  if (!timeline) return timeline.error();
  const double sm_fraction = cluster.compute.collective_sm_fraction;
  if (sm_fraction > 0 && config.grad_ranks() > 1) {
    thread_local std::vector<std::int32_t> lengthened;
    share_sms_with_dp_collectives(graph, *timeline, chunks, sm_fraction, lengthened);
    run_engine_again(graph, *timeline, lengthened);
  }
  if (share_nic && config.pp > 1 && config.grad_ranks() > 1)
    share_nics(graph, *timeline, nic_crossings(cost, cluster, config));
  return timeline;
}

// Tokens/s, TFLOP/s and MFU of `r`'s step time (core/flops.h's FLOPs, as `loom run` counts them).
void set_throughput(SimResult& r, const ModelSpec& model, const TrainingSpec& training, const ClusterSpec& cluster) {
  const int seq = training.seq_len > 0 ? training.seq_len : model.seq_len;
  r.tokens_per_s = static_cast<double>(training.global_batch) * seq / r.step_time_s;
  r.model_flops = model_flops_per_step(model, training.global_batch, seq);
  r.hardware_flops = r.model_flops + recompute_flops_per_step(model, training.global_batch, seq, r.config.recompute);
  const int gpus = r.config.world_size();
  r.tflops_per_gpu = tflops_per_gpu(r.model_flops, r.step_time_s, gpus);
  r.hw_tflops_per_gpu = tflops_per_gpu(r.hardware_flops, r.step_time_s, gpus);
  r.mfu = r.model_flops / (r.step_time_s * gpus * cluster.device.peak_flops);
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
  std::vector<std::vector<ChunkCost>> chunks = chunk_costs(cost, config);

  // The planner simulates thousands of steps per thread: without a graph to keep, each reuses
  // the last one's storage (writing fresh pages cost as much as running the engine).
  thread_local StepGraph reused(1);
  StepGraph kept(config.pp);
  StepBuilder builder(model, training, config, cost, *programs, m, options.keep_graph ? kept : reused);
  builder.build(chunks);
  auto timeline = run_step(builder.graph(), cost, chunks, cluster, config, options.share_nics);
  if (!timeline) return timeline.error();

  SimResult r;
  r.config = config;
  r.micro_batches = m;
  r.jitter_s = straggler_s(chunks, config, m, training);
  r.step_time_s = ns_to_s(timeline->makespan) + r.jitter_s;
  set_throughput(r, model, training, cluster);
  static_cast<StepStats&>(r) = step_stats(builder.graph(), *timeline, chunks, options.keep_graph);
  if (options.keep_graph) {
    r.chunk_costs = std::move(chunks);
    r.graph = std::move(builder.graph());
    r.timeline = std::move(*timeline);
    r.options = options;
  }
  return r;
}

}  // namespace loom::sim
