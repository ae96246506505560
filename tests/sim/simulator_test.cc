// Whole-step properties: more bandwidth or FLOP/s never slows a step, more micro-batches never
// raise the bubble, recompute costs time, ZeRO-3 communication shows up, metrics are consistent.
#include <gtest/gtest.h>

#include <set>

#include "core/flops.h"
#include "core/json_io.h"
#include "core/partition.h"
#include "core/presets.h"
#include "core/trace_names.h"
#include "sim/cost_model.h"
#include "sim/simulator.h"

namespace loom::sim {
namespace {

struct Case {
  const char* model;
  ParallelConfig config;
  long long global_batch;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  auto make = [](int tp, int pp, int dp, int zero, int mb, int vpp, Recompute rc, bool sp, Schedule s) {
    ParallelConfig c;
    c.tp = tp, c.pp = pp, c.dp = dp, c.zero = zero, c.micro_batch = mb, c.vpp = vpp;
    c.recompute = rc, c.sequence_parallel = sp, c.schedule = s;
    return c;
  };
  out.push_back({"llama2-7b", make(1, 1, 8, 0, 1, 1, Recompute::kNone, false, Schedule::k1F1B), 64});
  out.push_back({"llama2-7b", make(2, 2, 4, 1, 2, 1, Recompute::kFull, true, Schedule::kGPipe), 64});
  out.push_back({"llama2-13b", make(4, 4, 2, 1, 1, 2, Recompute::kSelective, true, Schedule::kInterleaved), 64});
  out.push_back({"llama3-8b", make(2, 4, 2, 0, 1, 1, Recompute::kNone, false, Schedule::kZeroBubble), 32});
  out.push_back({"gpt3-175b", make(8, 8, 2, 1, 1, 3, Recompute::kSelective, true, Schedule::kInterleaved), 64});
  out.push_back({"llama2-7b", make(1, 1, 16, 3, 1, 1, Recompute::kNone, false, Schedule::k1F1B), 64});
  return out;
}

TrainingSpec training_for(const Case& c, const ModelSpec& m) {
  TrainingSpec t{.gpus = c.config.world_size(), .global_batch = c.global_batch, .seq_len = m.seq_len};
  return t;
}

// The A100 cost file with collectives beside compute free (first) and holding a quarter of the
// SMs (second).
std::pair<ClusterSpec, ClusterSpec> overlap_free_and_shared() {
  ClusterSpec free_overlap = *cluster_preset("dgx-a100-80gb");
  free_overlap.compute.collective_sm_fraction = 0;
  ClusterSpec shared = free_overlap;
  shared.compute.collective_sm_fraction = 0.25;
  return {free_overlap, shared};
}

double step(const Case& c, const ClusterSpec& cluster) {
  const ModelSpec m = *model_preset(c.model);
  auto r = simulate(m, training_for(c, m), c.config, cluster);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? r->step_time_s : 0.0;
}

TEST(Simulator, MoreBandwidthOrFlopsIsNeverSlower) {
  const ClusterSpec base = *cluster_preset("dgx-a100-80gb");
  for (const auto& c : cases()) {
    const double t0 = step(c, base);
    ClusterSpec links = base;
    links.inter_node.bandwidth_bytes_per_s *= 4;
    links.intra_node.bandwidth_bytes_per_s *= 4;
    links.collective_points.clear();  // measured NVLink points would otherwise stay as they are
    ClusterSpec measured_links = base;
    measured_links.inter_node.bandwidth_bytes_per_s *= 4;
    EXPECT_LE(step(c, measured_links), t0) << c.model << " " << describe(c.config);
    ClusterSpec flops = base;
    flops.device.peak_flops *= 2;
    EXPECT_LE(step(c, flops), t0) << c.model;
    ClusterSpec hbm = base;
    hbm.device.memory_bandwidth_bytes_per_s *= 2;
    EXPECT_LE(step(c, hbm), t0) << c.model;
    EXPECT_GT(t0, 0.0);
  }
}

TEST(Simulator, MoreMicroBatchesNeverRaiseTheBubble) {
  const ClusterSpec cluster = *cluster_preset("dgx-a100-80gb");
  const ModelSpec m = *model_preset("llama2-13b");
  ParallelConfig c{.tp = 2, .pp = 4, .dp = 1};
  for (Schedule s : {Schedule::kGPipe, Schedule::k1F1B, Schedule::kZeroBubble}) {
    c.schedule = s;
    double previous = 1.0;
    for (long long m_count : {4, 8, 16, 32, 64}) {
      TrainingSpec t{.gpus = 8, .global_batch = m_count, .seq_len = 4096};
      auto r = simulate(m, t, c, cluster);
      ASSERT_TRUE(r.ok()) << r.error().message;
      EXPECT_LE(r->bubble_fraction, previous + 1e-12) << to_string(s) << " m=" << m_count;
      previous = r->bubble_fraction;
    }
  }
}

TEST(Simulator, RecomputeCostsTimeAndMetricsAreConsistent) {
  const ClusterSpec cluster = *cluster_preset("dgx-h100");
  const ModelSpec m = *model_preset("llama3-8b");
  TrainingSpec t{.gpus = 8, .global_batch = 16, .seq_len = 8192};
  ParallelConfig c{.tp = 8};
  auto none = simulate(m, t, c, cluster);
  c.recompute = Recompute::kFull;
  auto full = simulate(m, t, c, cluster);
  ASSERT_TRUE(none.ok() && full.ok());
  EXPECT_GT(full->step_time_s, none->step_time_s);
  EXPECT_DOUBLE_EQ(full->model_flops, none->model_flops);
  EXPECT_GT(full->hw_tflops_per_gpu * full->step_time_s, none->hw_tflops_per_gpu * none->step_time_s);
  EXPECT_NEAR(none->mfu, none->tflops_per_gpu * 1e12 / cluster.device.peak_flops, 1e-12);
  EXPECT_NEAR(none->tokens_per_s * none->step_time_s, 16.0 * 8192, 1e-6);
  EXPECT_GT(none->exposed.tp_s, 0.0);  // TP 8: all-reduces in the forward are exposed
  EXPECT_DOUBLE_EQ(none->exposed.pp_s, 0.0);
}

TEST(Simulator, ThroughputCountsCoresModelFlopsAsLoomRunDoes) {
  const ClusterSpec cluster = *cluster_preset("dgx-a100-80gb");
  const ModelSpec m = *model_preset("gpt3-175b");  // vocabulary 50257: TP padding would show
  TrainingSpec t{.gpus = 64, .global_batch = 32, .seq_len = 2048};
  ParallelConfig c;
  c.tp = 8, c.pp = 8, c.recompute = Recompute::kSelective;
  auto r = simulate(m, t, c, cluster);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_DOUBLE_EQ(r->model_flops, model_flops_per_step(m, 32, 2048));
  EXPECT_DOUBLE_EQ(r->hardware_flops,
                   model_flops_per_step(m, 32, 2048) + recompute_flops_per_step(m, 32, 2048, Recompute::kSelective));
  EXPECT_DOUBLE_EQ(r->tflops_per_gpu, tflops_per_gpu(model_flops_per_step(m, 32, 2048), r->step_time_s, 64));
}

TEST(Simulator, ZeroStagesTradeCommunication) {
  const ClusterSpec cluster = *cluster_preset("dgx-a100-80gb");
  const ModelSpec m = *model_preset("llama2-7b");
  TrainingSpec t{.gpus = 64, .global_batch = 64, .seq_len = 4096};
  ParallelConfig c{.dp = 64};
  std::vector<SimResult> r;
  for (int zero = 0; zero <= 3; ++zero) {
    c.zero = zero;
    auto s = simulate(m, t, c, cluster);
    ASSERT_TRUE(s.ok()) << s.error().message;
    r.push_back(*s);
  }
  // ZeRO-1+ shard the optimizer step over the 64 replicas...
  EXPECT_NEAR(r[1].stages[0].optimizer_s * 64, r[0].stages[0].optimizer_s, 0.05 * r[0].stages[0].optimizer_s);
  // ...but ZeRO-1 and -2 then all-gather the updated parameters after it, in the open.
  EXPECT_GT(r[1].exposed.dp_s, r[0].exposed.dp_s);
  EXPECT_GT(r[2].exposed.dp_s, r[0].exposed.dp_s);
  // Short sequences leave ZeRO-3's per-pass gathers (1.5× ZeRO-0's traffic) nothing to hide behind.
  t.seq_len = 128;
  c.zero = 0;
  const double zero0 = simulate(m, t, c, cluster)->exposed.dp_s;
  c.zero = 3;
  const double zero3 = simulate(m, t, c, cluster)->exposed.dp_s;
  EXPECT_GT(zero3, zero0);
}

// HSDP (--shard-group): ZeRO-3 gathers and reduce-scatters inside a node's group of 8 dp ranks
// instead of over all 64, then all-reduces each reduced shard (1/8 of a bucket) across the 8
// groups — exactly the collectives the derivation in modern-parallelism.md §5 names, each charged
// the collective model's time for its own group.
TEST(Simulator, HsdpGathersInsideTheShardGroupAndReducesAcrossReplicas) {
  const ClusterSpec cluster = *cluster_preset("dgx-h100");
  const ModelSpec m = *model_preset("llama2-7b");
  const TrainingSpec t{.gpus = 64, .global_batch = 64, .seq_len = 4096};
  const CollectiveModel collectives(cluster);
  SimOptions keep;
  keep.keep_graph = true;
  ParallelConfig plain{.dp = 64, .zero = 3};
  ParallelConfig hsdp = plain;
  hsdp.shard_group = 8;
  auto a = simulate(m, t, plain, cluster, keep);
  auto b = simulate(m, t, hsdp, cluster, keep);
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_TRUE(b.ok()) << b.error().message;
  auto durations = [](const SimResult& r, Collective kind) {
    std::vector<TimeNs> out;
    for (std::int32_t i = 0; i < static_cast<std::int32_t>(r.graph.size()); ++i)
      if (r.graph.op(i).kind == OpKind::kDataParallel && r.graph.op(i).collective == kind)
        out.push_back(r.graph.op(i).duration);
    return out;
  };
  // The same gathers and reduce-scatters, each now over one node's NVLink instead of 8 nodes.
  const auto gathers_plain = durations(*a, Collective::kAllGather),
             gathers_hsdp = durations(*b, Collective::kAllGather);
  ASSERT_EQ(gathers_plain.size(), gathers_hsdp.size());
  ASSERT_FALSE(gathers_plain.empty());
  for (std::size_t i = 0; i < gathers_plain.size(); ++i) EXPECT_LT(gathers_hsdp[i], gathers_plain[i]);
  // Plain ZeRO-3 has no all-reduce; HSDP has one per reduced bucket, of a shard across 8 replicas
  // that sit one per node.
  EXPECT_TRUE(durations(*a, Collective::kAllReduce).empty());
  const auto reduces = durations(*b, Collective::kReduceScatter);
  const auto all_reduces = durations(*b, Collective::kAllReduce);
  ASSERT_FALSE(all_reduces.empty());
  const double params = CostModel(m, t, hsdp, cluster, collectives).stage_params(0);
  double all_reduced_s = 0;
  for (TimeNs d : all_reduces) all_reduced_s += ns_to_s(d);
  // One bucket: the whole stage's gradient shard all-reduced across the replicas in one collective.
  const int buckets = static_cast<int>(all_reduces.size());
  const double expected =
      buckets * collectives.time_s(Collective::kAllReduce, params / buckets * t.grad_bytes / 8, {8, 1});
  EXPECT_NEAR(all_reduced_s, expected, 1e-6 * expected + 1e-9 * buckets);
  EXPECT_FALSE(reduces.empty());
  // Optimizer over the 1/8 shard instead of the 1/64 one.
  EXPECT_NEAR(b->stages[0].optimizer_s, 8 * a->stages[0].optimizer_s, 0.05 * b->stages[0].optimizer_s);
}

// Megatron's synchronous pipeline transfers: with pipeline_sends_block a stage's next pass
// starts only after its send has completed, on every stage and schedule; the flag only ever adds
// time, and without it some pass does run while its stage's send is still in flight.
TEST(Simulator, BlockingPipelineSendsHoldTheStagesNextPass) {
  const ClusterSpec cluster = *cluster_preset("dgx-a100-80gb");
  const ModelSpec m = *model_preset("llama2-13b");
  TrainingSpec t{.gpus = 16, .global_batch = 16, .seq_len = 4096};
  SimOptions keep;
  keep.keep_graph = true;
  for (Schedule schedule : {Schedule::kGPipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZeroBubble}) {
    ParallelConfig c{.tp = 4, .pp = 4, .schedule = schedule};
    c.vpp = schedule == Schedule::kInterleaved ? 2 : 1;
    bool overlapped[2] = {false, false};
    double step[2] = {0, 0};
    for (bool block : {false, true}) {
      t.pipeline_sends_block = block;
      auto r = simulate(m, t, c, cluster, keep);
      ASSERT_TRUE(r.ok()) << r.error().message;
      step[block] = r->step_time_s;
      const StepGraph& g = r->graph;
      for (std::int32_t send = 0; send < static_cast<std::int32_t>(g.size()); ++send) {
        if (g.op(send).kind != OpKind::kPipeSend) continue;
        // The stage's first compute pass to start after the send started (its producer ran before).
        std::int32_t next = -1;
        for (std::int32_t op = 0; op < static_cast<std::int32_t>(g.size()); ++op) {
          const Op& o = g.op(op);
          const bool pass = o.kind == OpKind::kForward || o.kind == OpKind::kBackward || o.kind == OpKind::kWeightGrad;
          if (!pass || o.stage != g.op(send).stage || r->timeline.start[op] < r->timeline.start[send]) continue;
          if (next < 0 || r->timeline.start[op] < r->timeline.start[next]) next = op;
        }
        if (next < 0) continue;
        if (r->timeline.start[next] < r->timeline.end(g, send)) overlapped[block] = true;
      }
    }
    EXPECT_FALSE(overlapped[true]) << to_string(schedule);
    EXPECT_TRUE(overlapped[false]) << to_string(schedule);
    EXPECT_GE(step[true], step[false]) << to_string(schedule);
  }
}

// Megatron-LM 2021 (core/framework.h): the TP input-gradient all-reduce after, not beside, the
// weight-gradient GEMM; every chunk's gradients reduced once the stage's whole backward is over.
TEST(Simulator, TpReductionWithoutOverlapIsExposed) {
  const ClusterSpec cluster = *cluster_preset("dgx-a100-80gb");
  const ModelSpec m = *model_preset("llama2-13b");
  TrainingSpec t{.gpus = 8, .global_batch = 8, .seq_len = 4096};
  const ParallelConfig c{.tp = 8, .pp = 1, .dp = 1};
  auto beside = simulate(m, t, c, cluster);
  t.tp_comm_overlap = false;
  auto after = simulate(m, t, c, cluster);
  ASSERT_TRUE(beside.ok() && after.ok());
  EXPECT_GT(after->exposed.tp_s, beside->exposed.tp_s * 1.2);
  EXPECT_GT(after->step_time_s, beside->step_time_s);
}

TEST(Simulator, GradientsReducedAfterTheBackwardWaitForEveryChunk) {
  const ClusterSpec cluster = *cluster_preset("dgx-a100-80gb");
  const ModelSpec m = *model_preset("llama2-13b");
  TrainingSpec t{.gpus = 32, .global_batch = 32, .seq_len = 4096};
  const ParallelConfig c{.tp = 4, .pp = 4, .dp = 2, .vpp = 2, .schedule = Schedule::kInterleaved};
  SimOptions keep;
  keep.keep_graph = true;
  double step[2] = {0, 0};
  bool early[2] = {false, false};  // some reduction started before its stage's backward ended
  for (bool overlap : {true, false}) {
    t.overlap_grad_reduce = overlap;
    auto r = simulate(m, t, c, cluster, keep);
    ASSERT_TRUE(r.ok()) << r.error().message;
    step[overlap] = r->step_time_s;
    const StepGraph& g = r->graph;
    std::vector<TimeNs> backward_end(c.pp, 0);
    for (std::int32_t op = 0; op < static_cast<std::int32_t>(g.size()); ++op)
      if (g.op(op).kind == OpKind::kBackward)
        backward_end[g.op(op).stage] = std::max(backward_end[g.op(op).stage], r->timeline.end(g, op));
    for (std::int32_t op = 0; op < static_cast<std::int32_t>(g.size()); ++op)
      if (g.op(op).kind == OpKind::kDataParallel && g.op(op).collective == Collective::kAllReduce &&
          r->timeline.start[op] < backward_end[g.op(op).stage])
        early[overlap] = true;
  }
  EXPECT_TRUE(early[true]);
  EXPECT_FALSE(early[false]);
  EXPECT_GT(step[false], step[true]);
}

// ZeRO-3 gathers one unit at a time, each paying its collective's latency: per linear module
// (DeepSpeed's hooks) costs more than per layer (FSDP), and far more across 1,536 ranks, where
// NCCL's ring latency is milliseconds, than inside one node.
TEST(Simulator, Zero3CollectivesPerUnitPayEachUnitsLatency) {
  const ClusterSpec cluster = *cluster_preset("dgx-a100-80gb");
  const ModelSpec m = *model_preset("gpt3-175b");
  const CollectiveModel collectives(cluster);
  auto gather_s = [&](int gpus, Zero3Unit unit) {
    TrainingSpec t{.gpus = gpus, .global_batch = gpus, .seq_len = 2048};
    t.zero3_unit = unit;
    const ParallelConfig c{.tp = 1, .pp = 1, .dp = gpus, .zero = 3, .recompute = Recompute::kFull};
    return CostModel(m, t, c, cluster, collectives).zero3_collective_s(Collective::kAllGather, 0, 0);
  };
  const double bytes = 2.0 * 174.6e9;  // the whole model, once
  for (int gpus : {8, 1536}) {
    const double layer = gather_s(gpus, Zero3Unit::kLayer), module = gather_s(gpus, Zero3Unit::kModule);
    const double whole = collectives.time_s(Collective::kAllGather, bytes, {gpus, std::min(gpus, 8)});
    EXPECT_GT(layer, whole) << gpus;  // 96 layers' latencies on top of the same bytes
    EXPECT_GT(module, layer) << gpus;
    if (gpus == 8) {
      EXPECT_LT(module / whole, 1.03);  // inside a node 384 gathers add about 1 % of latency
    }
  }
  // 96 layers × 4 modules of latency at 1,536 ranks: seconds more than the bytes alone.
  EXPECT_GT(gather_s(1536, Zero3Unit::kModule) - gather_s(1536, Zero3Unit::kLayer), 0.5);
}

TEST(Simulator, BadShapesAreErrorsNotCrashes) {
  const ClusterSpec cluster = *cluster_preset("dgx-a100-80gb");
  const ModelSpec m = *model_preset("llama2-7b");
  TrainingSpec t{.gpus = 8, .global_batch = 10, .seq_len = 4096};
  ParallelConfig c{.dp = 8};
  EXPECT_FALSE(simulate(m, t, c, cluster).ok());  // 10 sequences over 8 replicas
  c.dp = 1;
  c.pp = 8;
  c.schedule = Schedule::kInterleaved;
  c.vpp = 3;  // 32 layers over 8 stages × 3 chunks
  t.global_batch = 16;
  EXPECT_FALSE(simulate(m, t, c, cluster).ok());
}

}  // namespace
}  // namespace loom::sim

namespace loom::sim {
namespace {

// Every micro-batch adds its weight gradients into the main-grad buffer (Megatron's fp32
// main_grad), reading and writing grad_bytes per weight element: fp32 main grads cost exactly
// that extra traffic over bf16 ones in the backward, and nothing in the forward.
TEST(CostModel, WeightGradientsAccumulateIntoTheMainGradBuffer) {
  const ModelSpec m = *model_preset("llama2-7b");
  const ClusterSpec cluster = *cluster_preset("dgx-a100-80gb");
  const CollectiveModel collectives(cluster);
  ParallelConfig c{.tp = 2};
  TrainingSpec fp32_grads{.gpus = 2, .global_batch = 1, .seq_len = m.seq_len, .grad_bytes = 4};
  TrainingSpec bf16_grads = fp32_grads;
  bf16_grads.grad_bytes = 2;
  const ChunkCost a = CostModel(m, fp32_grads, c, cluster, collectives).chunk(0, 0, false);
  const ChunkCost b = CostModel(m, bf16_grads, c, cluster, collectives).chunk(0, 0, false);
  EXPECT_DOUBLE_EQ(a.forward.seconds, b.forward.seconds);

  // GEMM weights per TP rank: QKV, attention output, SwiGLU up (gate and up), down; the LM head.
  const double h = m.hidden, kv = static_cast<double>(m.kv_dim()), f = m.ffn_hidden, t = c.tp;
  const double per_layer = (h * (h + 2 * kv) + h * h + h * 2 * f + f * h) / t;
  const double head = h * padded_vocab(m.vocab, c.tp) / t;
  const double weights = m.layers * per_layer + head;
  const double bandwidth = cluster.device.memory_bandwidth_bytes_per_s * cluster.compute.memory_bound_efficiency;
  const double expected = weights * 2.0 * (4 - 2) / bandwidth;
  EXPECT_NEAR(a.backward.seconds - b.backward.seconds, expected, 1e-9 * expected);
}

}  // namespace
}  // namespace loom::sim

namespace loom::sim {
namespace {

// Measured memory-bound ops are interpolated by name (a final norm is a norm); ops the cost file
// did not measure fall back to bytes / (bandwidth · efficiency).
TEST(CostModel, MeasuredMemoryOpsAreInterpolatedByName) {
  const ModelSpec m = *model_preset("gpt-tiny");
  ClusterSpec cluster = *cluster_preset("local-cpu");
  cluster.memory_op_table = {{"norm", 1e6, 1e-3}, {"norm", 2e6, 3e-3}, {"gelu", 1e6, 5e-3}};
  // The table survives the cost-file JSON.
  auto reread = cluster_from_json(to_json(cluster));
  ASSERT_TRUE(reread.ok()) << reread.error().message;
  ASSERT_EQ(reread->memory_op_table.size(), 3u);
  EXPECT_EQ(reread->memory_op_table[2].op, "gelu");
  EXPECT_DOUBLE_EQ(reread->memory_op_table[1].seconds, 3e-3);

  const CollectiveModel collectives(*reread);
  TrainingSpec t{.gpus = 1, .global_batch = 1};
  const CostModel cost(m, t, ParallelConfig{}, *reread, collectives);
  EXPECT_DOUBLE_EQ(cost.memory_s("norm", 1.5e6), 2e-3);
  EXPECT_DOUBLE_EQ(cost.memory_s("final_norm", 1e6), 1e-3);
  EXPECT_DOUBLE_EQ(cost.memory_s("norm", 5e5), 0.5e-3);  // below: the smallest point's rate
  EXPECT_DOUBLE_EQ(cost.memory_s("norm", 4e6), 6e-3);    // above: the largest point's rate
  EXPECT_DOUBLE_EQ(cost.memory_s("gelu", 3e6), 15e-3);
  const double generic = reread->compute.kernel_launch_s +
                         2e6 / (reread->device.memory_bandwidth_bytes_per_s * reread->compute.memory_bound_efficiency);
  EXPECT_DOUBLE_EQ(cost.memory_s("residual", 2e6), generic);
}

}  // namespace
}  // namespace loom::sim

namespace loom::sim {
namespace {

// A memory-bound op the cost file gives its own efficiency (a row-wise softmax reaches less of
// the bandwidth than a copy) uses it; the others keep memory_bound_efficiency; a measured point
// of the op wins over both.
TEST(CostModel, MemoryOpsWithTheirOwnEfficiencyUseIt) {
  const ModelSpec m = *model_preset("gpt-tiny");
  ClusterSpec cluster = *cluster_preset("dgx-a100-80gb");
  cluster.memory_op_table.clear();
  cluster.compute.memory_op_efficiency = {{"softmax", 0.5}, {"norm", 0.25}};
  auto reread = cluster_from_json(to_json(cluster));
  ASSERT_TRUE(reread.ok()) << reread.error().message;
  ASSERT_EQ(reread->compute.memory_op_efficiency.size(), 2u);
  EXPECT_DOUBLE_EQ(reread->compute.memory_op_efficiency.at("softmax"), 0.5);

  const CollectiveModel collectives(*reread);
  TrainingSpec t{.gpus = 1, .global_batch = 1};
  const double bw = reread->device.memory_bandwidth_bytes_per_s, launch = reread->compute.kernel_launch_s;
  {
    const CostModel cost(m, t, ParallelConfig{}, *reread, collectives);
    EXPECT_DOUBLE_EQ(cost.memory_s("softmax", 1e9), launch + 1e9 / (bw * 0.5));
    EXPECT_DOUBLE_EQ(cost.memory_s("final_norm", 1e9), launch + 1e9 / (bw * 0.25));
    EXPECT_DOUBLE_EQ(cost.memory_s("softmax_bwd", 1e9), launch + 1e9 / (bw * reread->compute.memory_bound_efficiency));
  }
  reread->memory_op_table = {{"softmax", 1e9, 7e-3}};
  const CostModel measured(m, t, ParallelConfig{}, *reread, collectives);
  EXPECT_DOUBLE_EQ(measured.memory_s("softmax", 2e9), 14e-3);

  // A slower softmax makes the unfused attention's step slower, nothing else moves.
  ParallelConfig c;
  TrainingSpec unfused = t;
  unfused.attention = AttentionKernel::kUnfused;
  ClusterSpec plain = *cluster_preset("dgx-a100-80gb");
  ClusterSpec slow = plain;
  slow.compute.memory_op_efficiency["softmax"] = 0.1;
  const ChunkCost a = CostModel(m, unfused, c, plain, CollectiveModel(plain)).chunk(0, 0, false);
  const ChunkCost b = CostModel(m, unfused, c, slow, CollectiveModel(slow)).chunk(0, 0, false);
  EXPECT_GT(b.forward.seconds, a.forward.seconds);
  EXPECT_DOUBLE_EQ(b.backward.seconds, a.backward.seconds);
}

// Roofline: a GEMM is never faster than reading its operands and writing its result; a large
// square one is arithmetic-bound and keeps the efficiency curve's time.
TEST(CostModel, GemmsAreNeverFasterThanTheirBytes) {
  const ModelSpec m = *model_preset("gpt-tiny");
  ClusterSpec cluster = *cluster_preset("dgx-h100");
  cluster.compute.gemm_half_saturation_flops = 1e6;  // a curve that alone would call everything fast
  const CollectiveModel collectives(cluster);
  TrainingSpec t{.gpus = 1, .global_batch = 1};
  const CostModel cost(m, t, ParallelConfig{}, cluster, collectives);
  const auto& e = cluster.compute;
  const double bw = cluster.device.memory_bandwidth_bytes_per_s * e.memory_bound_efficiency;
  // 2048 × 2048 × 96 (one head's QK^T): 8.4 MB written against 0.8 GFLOP.
  const double bytes = 2.0 * (2048.0 * 96 + 96.0 * 2048 + 2048.0 * 2048);
  EXPECT_DOUBLE_EQ(cost.gemm_s(2048, 2048, 96), e.kernel_launch_s + bytes / bw);
  EXPECT_DOUBLE_EQ(cost.gemm_s(2048, 2048, 96, 3 * bytes), e.kernel_launch_s + 3 * bytes / bw);
  const double flops = 2.0 * 8192.0 * 8192 * 8192;
  const double curve = flops / (cluster.device.peak_flops * e.gemm_max_efficiency * flops / (flops + 1e6));
  EXPECT_DOUBLE_EQ(cost.gemm_s(8192, 8192, 8192), e.kernel_launch_s + curve);
}

// The seconds of the forward or backward segment `name` of the first chunk, less the kernel launch.
double attention_segment_s(const ModelSpec& m, const TrainingSpec& t, const ParallelConfig& c,
                           const ClusterSpec& cluster, const char* name) {
  const ChunkCost cc = CostModel(m, t, c, cluster, CollectiveModel(cluster)).chunk(0, 0, false);
  for (const PassCost* p : {&cc.forward, &cc.backward})
    for (const auto& seg : p->segments)
      if (seg.name == name) return seg.seconds - cluster.compute.kernel_launch_s;
  ADD_FAILURE() << name << " not found";
  return 0.0;
}

// Fused attention on a small shard runs below its peak efficiency: with a half-saturation size
// equal to the layer's attention FLOPs (forward + backward) both passes take twice as long.
TEST(CostModel, FlashAttentionEfficiencyFallsOnSmallShards) {
  const ModelSpec m = *model_preset("gpt-tiny");
  ClusterSpec constant = *cluster_preset("dgx-h100");
  constant.compute.flash_attention_half_saturation_flops = 0;
  TrainingSpec t{.gpus = 1, .global_batch = 1, .attention = AttentionKernel::kFlash};
  const double seq = m.seq_len, forward_flops = 2.0 * seq * seq * m.hidden;  // causal half of QK^T and AV
  ClusterSpec curve = constant;
  curve.compute.flash_attention_half_saturation_flops = 3.5 * forward_flops;
  ASSERT_TRUE(cluster_from_json(to_json(curve)).ok());
  EXPECT_DOUBLE_EQ(cluster_from_json(to_json(curve))->compute.flash_attention_half_saturation_flops,
                   3.5 * forward_flops);
  auto seconds = [&](const ClusterSpec& c, const char* name) {
    return attention_segment_s(m, t, ParallelConfig{}, c, name);
  };
  for (const char* name : {"flash_attention", "flash_attention_bwd"})
    EXPECT_NEAR(seconds(curve, name), 2.0 * seconds(constant, name), 1e-12) << name;
}

// --flash-kernel fa2 runs fused attention at the cost file's FlashAttention-2 curve (PyTorch's flash
// backend, measured at about half of cuDNN's rate on an H100); a file without one (the A100's, whose
// fused figure is FlashAttention-2's) runs it at its fused attention's. Unfused attention ignores it.
TEST(CostModel, FlashAttention2RunsAtItsOwnCurveWhereTheCostFileHasOne) {
  const ModelSpec m = *model_preset("llama3-8b");
  const ClusterSpec h100 = *cluster_preset("dgx-h100");
  ASSERT_GT(h100.compute.fa2_attention_efficiency, 0.0);
  ASSERT_LT(h100.compute.fa2_attention_efficiency, h100.compute.flash_attention_efficiency);
  const ClusterSpec reread = *cluster_from_json(to_json(h100));
  EXPECT_DOUBLE_EQ(reread.compute.fa2_attention_efficiency, h100.compute.fa2_attention_efficiency);
  EXPECT_DOUBLE_EQ(reread.compute.fa2_attention_half_saturation_flops,
                   h100.compute.fa2_attention_half_saturation_flops);
  ParallelConfig c;
  c.micro_batch = 1;
  auto seconds = [&](const ClusterSpec& cluster, FlashKernel kernel, AttentionKernel attention, const char* name) {
    TrainingSpec t{.gpus = 1, .global_batch = 1, .seq_len = 8192, .attention = attention, .flash_kernel = kernel};
    return attention_segment_s(m, t, c, cluster, name);
  };
  // One layer's attention: 2·s²·h FLOPs forward (the causal half), 3.5 times that forward + backward.
  const double w = 3.5 * 2.0 * 8192.0 * 8192.0 * m.hidden;
  auto at = [&](double ceiling, double half) { return ceiling * w / (w + half); };
  const ComputeEfficiency& e = h100.compute;
  const double ratio = at(e.flash_attention_efficiency, e.flash_attention_half_saturation_flops) /
                       at(e.fa2_attention_efficiency, e.fa2_attention_half_saturation_flops);
  for (const char* name : {"flash_attention", "flash_attention_bwd"})
    EXPECT_NEAR(seconds(h100, FlashKernel::kFa2, AttentionKernel::kFlash, name),
                ratio * seconds(h100, FlashKernel::kFused, AttentionKernel::kFlash, name), 1e-12)
        << name;
  EXPECT_GT(ratio, 1.8);  // FlashAttention-2 at about half the rate of cuDNN's on these shapes

  const ClusterSpec a100 = *cluster_preset("dgx-a100-80gb");
  ASSERT_EQ(a100.compute.fa2_attention_efficiency, 0.0);
  EXPECT_DOUBLE_EQ(seconds(a100, FlashKernel::kFa2, AttentionKernel::kFlash, "flash_attention"),
                   seconds(a100, FlashKernel::kFused, AttentionKernel::kFlash, "flash_attention"));
  EXPECT_DOUBLE_EQ(seconds(h100, FlashKernel::kFa2, AttentionKernel::kUnfused, "qk"),
                   seconds(h100, FlashKernel::kFused, AttentionKernel::kUnfused, "qk"));
}

// The cross-entropy after the LM head costs what its kernels read and write per logit of the rank's
// vocabulary share (TrainingSpec::loss_kernel). Loom's executor reads the fp32 logits once for the max and
// the sum of exponentials (twice under TP, around the max's all-reduce), reduces the max alone and the sum
// with the target logit, and makes the gradient at the end of the forward (4 bytes read, the activation
// dtype written). Megatron's upcasts the logits and runs five passes forward (the activation dtype + 36
// bytes) with three all-reduces, and two backward (12 + the activation dtype).
TEST(CostModel, TheLossCostsWhatItsKernelsReadAndWrite) {
  const ModelSpec m = *model_preset("gpt2-small");
  const ClusterSpec cluster = *cluster_preset("dgx-h100");
  auto total = [](const PassCost& p, const std::string& name, bool communication) {
    double s = 0;
    for (const Segment& seg : p.segments)
      if (seg.name == name && seg.communication == communication) s += seg.seconds;
    return s;
  };
  for (int tp : {1, 2}) {
    const ParallelConfig c{.tp = tp, .micro_batch = 2};
    const double logits = 2.0 * m.seq_len * padded_vocab(m.vocab, tp) / tp;
    double per_float[2] = {0, 0};  // one float a token all-reduced: Megatron's, the executor's
    for (LossKernel kernel : {LossKernel::kExecutor, LossKernel::kMegatron}) {
      SCOPED_TRACE(fmt::format("tp {}, {} loss", tp, to_string(kernel)));
      const TrainingSpec t{.gpus = tp, .global_batch = 2, .loss_kernel = kernel};
      const CollectiveModel collectives(cluster);  // the cost model keeps a reference
      const CostModel cost(m, t, c, cluster, collectives);
      const ChunkCost cc = cost.chunk(0, 0, false);
      if (kernel == LossKernel::kExecutor) {
        EXPECT_DOUBLE_EQ(total(cc.forward, "cross_entropy", false),
                         cost.memory_s("cross_entropy", logits * (tp == 1 ? 4.0 : 8.0)));
        EXPECT_DOUBLE_EQ(total(cc.forward, "cross_entropy_bwd", false),
                         cost.memory_s("cross_entropy_bwd", logits * 6.0));
        EXPECT_EQ(total(cc.backward, "cross_entropy_bwd", false), 0.0);
      } else {
        EXPECT_DOUBLE_EQ(total(cc.forward, "cross_entropy", false), cost.memory_s("cross_entropy", logits * 38.0));
        EXPECT_EQ(total(cc.forward, "cross_entropy_bwd", false), 0.0);
        EXPECT_DOUBLE_EQ(total(cc.backward, "cross_entropy_bwd", false),
                         cost.memory_s("cross_entropy_bwd", logits * 14.0));
      }
      // The loss's all-reduces are the forward's last collectives: the executor's of one float a token,
      // then of two; Megatron's three of one.
      std::vector<double> comm;
      for (const Segment& seg : cc.forward.segments)
        if (seg.communication) comm.push_back(seg.seconds);
      if (tp == 1) continue;
      ASSERT_GE(comm.size(), 3u);
      const double* last = comm.data() + comm.size() - 3;
      per_float[kernel == LossKernel::kExecutor] = last[kernel == LossKernel::kExecutor ? 1 : 2];
      if (kernel == LossKernel::kExecutor) {
        EXPECT_GT(last[2], last[1]);  // the sum and the target logit together
      } else {
        EXPECT_DOUBLE_EQ(last[0], last[2]);
        EXPECT_DOUBLE_EQ(last[1], last[2]);
      }
    }
    if (tp > 1) {
      EXPECT_DOUBLE_EQ(per_float[0], per_float[1]);
    }
  }
}

// PyTorch's embedding backward (TrainingSpec::embedding_grad_dense, every --framework) zeroes the gradient of
// the rank's whole vocabulary share, and of a learned position table, which TP does not split; the gradient
// kept across micro-batches then adds it in (both read, the kept one written in grad_bytes). ZeRO-3 that
// reduce-scatters every backward keeps none; under a pipeline only the first stage embeds. Loom's executor
// adds each token's row into the fp32 gradient in place: no dense pass.
TEST(CostModel, PyTorchsEmbeddingGradientIsDenseOverTheVocabularyShare) {
  const ClusterSpec cluster = *cluster_preset("dgx-h100");
  auto total = [](const PassCost& p, const std::string& name) {
    double s = 0;
    for (const Segment& seg : p.segments)
      if (seg.name == name && !seg.communication) s += seg.seconds;
    return s;
  };
  const CollectiveModel collectives(cluster);  // the cost model keeps a reference
  for (const char* preset : {"gpt2-small", "llama2-7b"}) {
    const ModelSpec m = *model_preset(preset);
    const double positions = m.position == PositionEmbedding::kLearned ? m.seq_len : 0.0;
    for (int tp : {1, 2}) {
      SCOPED_TRACE(fmt::format("{}, tp {}", preset, tp));
      const double elements = (padded_vocab(m.vocab, tp) / tp + positions) * m.hidden;
      const ParallelConfig plain{.tp = tp, .micro_batch = 2};
      const TrainingSpec executor{.gpus = tp, .global_batch = 2, .grad_bytes = 4};
      const CostModel own(m, executor, plain, cluster, collectives);
      EXPECT_EQ(total(own.chunk(0, 0, false).backward, "embedding_grad_zero"), 0.0);
      EXPECT_EQ(total(own.chunk(0, 0, false).backward, "embedding_grad_accumulate"), 0.0);

      TrainingSpec dense = executor;
      dense.embedding_grad_dense = true;
      const CostModel cost(m, dense, plain, cluster, collectives);
      const ChunkCost cc = cost.chunk(0, 0, false);
      EXPECT_DOUBLE_EQ(total(cc.backward, "embedding_grad_zero"), cost.memory_s("embedding_grad_zero", elements * 2.0));
      EXPECT_DOUBLE_EQ(total(cc.backward, "embedding_grad_accumulate"),
                       cost.memory_s("embedding_grad_accumulate", elements * (2.0 + 2.0 * 4.0)));
      EXPECT_EQ(total(cc.forward, "embedding_grad_zero"), 0.0);

      // ZeRO-3 over two ranks reduce-scatters the gradient each backward: zeroed, never accumulated.
      const ParallelConfig zero3{.tp = tp, .dp = 2, .zero = 3, .micro_batch = 2};
      TrainingSpec two = dense;
      two.gpus = 2 * tp;
      two.global_batch = 4;
      const CostModel sharded(m, two, zero3, cluster, collectives);
      EXPECT_DOUBLE_EQ(total(sharded.chunk(0, 0, false).backward, "embedding_grad_zero"),
                       cost.memory_s("embedding_grad_zero", elements * 2.0));
      EXPECT_EQ(total(sharded.chunk(0, 0, false).backward, "embedding_grad_accumulate"), 0.0);

      // Two stages: the first embeds, the last does not.
      const ParallelConfig piped{.tp = tp, .pp = 2, .micro_batch = 2};
      const CostModel staged(m, two, piped, cluster, collectives);
      EXPECT_GT(total(staged.chunk(0, 0, false).backward, "embedding_grad_accumulate"), 0.0);
      EXPECT_EQ(total(staged.chunk(1, 0, false).backward, "embedding_grad_zero"), 0.0);
      EXPECT_EQ(total(staged.chunk(1, 0, false).backward, "embedding_grad_accumulate"), 0.0);
    }
  }
}

// Sliding-window attention (Gemma 2, gpt-oss): a fused kernel skips the tiles before each query's window
// as it skips those past the diagonal, so a windowed layer computes w·s − w²/2 of the s² scores where a
// full causal one computes s²/2; the unfused path still builds the whole square. Model FLOPs count a
// windowed query against its w keys. A window at least the sequence changes nothing.
TEST(CostModel, SlidingWindowAttentionComputesOnlyTheWindowsTiles) {
  const ModelSpec full = *model_preset("llama3-8b");
  ModelSpec windowed = full;
  windowed.sliding_window = 1024;
  windowed.sliding_layers = 16;  // of 32
  ClusterSpec h100 = *cluster_preset("dgx-h100");
  h100.compute.flash_attention_half_saturation_flops = 0;  // time proportional to FLOPs
  ParallelConfig c;
  c.micro_batch = 1;
  auto seconds = [&](const ModelSpec& m, int seq, AttentionKernel attention, const char* name) {
    TrainingSpec t{.gpus = 1, .global_batch = 1, .seq_len = seq, .attention = attention};
    return attention_segment_s(m, t, c, h100, name);
  };
  const double s = 8192, w = 1024;
  const double fraction = (16 * 0.5 + 16 * (w * s - 0.5 * w * w) / (s * s)) / 32;
  EXPECT_DOUBLE_EQ(windowed.causal_square_fraction(8192), fraction);
  for (const char* name : {"flash_attention", "flash_attention_bwd"})
    EXPECT_NEAR(
        seconds(windowed, 8192, AttentionKernel::kFlash, name) / seconds(full, 8192, AttentionKernel::kFlash, name),
        fraction / 0.5, 1e-12)
        << name;
  EXPECT_NEAR(fraction / 0.5, 0.617, 1e-3);  // half the layers at 23.4 % of a full layer's work
  for (const char* name : {"qk", "softmax", "av_bwd"})
    EXPECT_DOUBLE_EQ(seconds(windowed, 8192, AttentionKernel::kUnfused, name),
                     seconds(full, 8192, AttentionKernel::kUnfused, name))
        << name;
  EXPECT_DOUBLE_EQ(windowed.layer_attention_flops_fwd(8192, 8192) / full.layer_attention_flops_fwd(8192, 8192),
                   (16 * s + 16 * w) / 32 / s);
  EXPECT_DOUBLE_EQ(windowed.layer_attention_flops_fwd(1024, 1024), full.layer_attention_flops_fwd(1024, 1024));
  EXPECT_DOUBLE_EQ(seconds(windowed, 1024, AttentionKernel::kFlash, "flash_attention"),
                   seconds(full, 1024, AttentionKernel::kFlash, "flash_attention"));
}

// Chunked attention (Llama 4): a chunked layer's queries see their own chunk's keys alone, so at s = n·c + r
// its causal kernel computes (n·c² + r²)/2 of the s² scores and model FLOPs count (n·c² + r²)/s keys a query;
// at a sequence no longer than the chunk it is full causal attention.
TEST(CostModel, ChunkedAttentionComputesEachChunksTriangle) {
  const ModelSpec full = *model_preset("llama3-8b");
  ModelSpec chunked = full;
  chunked.attention_chunk = 8192;
  chunked.chunked_layers = 24;  // of 32: three layers in four, as Llama 4's RoPE layers
  ClusterSpec h100 = *cluster_preset("dgx-h100");
  h100.compute.flash_attention_half_saturation_flops = 0;  // time proportional to FLOPs
  ParallelConfig c;
  c.micro_batch = 1;
  auto seconds = [&](const ModelSpec& m, int seq, const char* name) {
    TrainingSpec t{.gpus = 1, .global_batch = 1, .seq_len = seq, .attention = AttentionKernel::kFlash};
    return attention_segment_s(m, t, c, h100, name);
  };
  const double s = 20480, chunk = 8192, rest = 20480 - 2 * 8192;  // two whole chunks and 4096 tokens
  const double fraction = (8 * 0.5 + 24 * (2 * chunk * chunk + rest * rest) / (2 * s * s)) / 32;
  EXPECT_DOUBLE_EQ(chunked.causal_square_fraction(20480), fraction);
  EXPECT_NEAR(fraction / 0.5, 0.25 + 0.75 * 0.36, 1e-12);  // a chunked layer does 36 % of a full one's work
  EXPECT_NEAR(seconds(chunked, 20480, "flash_attention") / seconds(full, 20480, "flash_attention"), fraction / 0.5,
              1e-12);
  EXPECT_DOUBLE_EQ(chunked.layer_attention_flops_fwd(20480, 20480) / full.layer_attention_flops_fwd(20480, 20480),
                   (8 * s + 24 * (2 * chunk * chunk + rest * rest) / s) / 32 / s);
  EXPECT_FALSE(chunked.chunked_at(8192));
  EXPECT_DOUBLE_EQ(chunked.causal_square_fraction(8192), 0.5);
  EXPECT_DOUBLE_EQ(seconds(chunked, 8192, "flash_attention"), seconds(full, 8192, "flash_attention"));
  // Beside sliding layers: each kind keeps its own share.
  chunked.sliding_window = 1024;
  chunked.sliding_layers = 8;
  const double w = 1024;
  EXPECT_DOUBLE_EQ(chunked.causal_square_fraction(20480),
                   (8 * (w * s - 0.5 * w * w) / (s * s) + 24 * (2 * chunk * chunk + rest * rest) / (2 * s * s)) / 32);
}

// Megatron-LM's backward runs each column-parallel linear's TP collective beside a GEMM; the
// collective's thread blocks hold collective_sm_fraction of the SMs meanwhile, so the GEMM takes
// that fraction of the collective's time longer. A collective that outlasts its GEMM sets the time.
TEST(CostModel, CollectivesOverlappedWithGemmsTakeTheirShareOfTheSms) {
  const ModelSpec m = *model_preset("gpt3-175b");
  auto [free_overlap, shared] = overlap_free_and_shared();
  ASSERT_DOUBLE_EQ(cluster_from_json(to_json(shared))->compute.collective_sm_fraction, 0.25);
  TrainingSpec t{.gpus = 8, .global_batch = 1, .seq_len = m.seq_len};
  ParallelConfig c{.tp = 8};
  const double act_bytes = static_cast<double>(m.seq_len) * m.hidden * t.activation_bytes;
  for (bool sp : {false, true}) {
    c.sequence_parallel = sp;
    const CollectiveModel free_collectives(free_overlap), shared_collectives(shared);
    const CostModel a(m, t, c, free_overlap, free_collectives), b(m, t, c, shared, shared_collectives);
    const ChunkCost ca = a.chunk(0, 0, false), cb = b.chunk(0, 0, false);
    EXPECT_DOUBLE_EQ(ca.forward.seconds, cb.forward.seconds);
    EXPECT_DOUBLE_EQ(ca.backward.tp_comm_exposed_s, cb.backward.tp_comm_exposed_s);  // every one hidden
    // Per layer: QKV and MLP-up each reduce their input gradient beside the weight gradient (and
    // under SP gather their input again beside the input gradient); the LM head reduces once.
    const auto& tp = a.tp_group();
    const double reduce =
        free_collectives.time_s(sp ? Collective::kReduceScatter : Collective::kAllReduce, act_bytes, tp);
    const double gather = sp ? free_collectives.time_s(Collective::kAllGather, act_bytes, tp) : 0.0;
    const double expected = 0.25 * (m.layers * 2.0 * (reduce + gather) + reduce);
    EXPECT_NEAR(cb.backward.seconds - ca.backward.seconds, expected, 1e-9 * expected) << "sp " << sp;
    // Split off (zero-bubble), the weight gradients have no collective beside them.
    EXPECT_DOUBLE_EQ(a.chunk(0, 0, true).weight.seconds, b.chunk(0, 0, true).weight.seconds);
  }

  // Links so slow that every collective outlasts its GEMM: the step waits for the collectives
  // either way, and the GEMMs' lost SMs cost nothing extra.
  for (ClusterSpec* cl : {&free_overlap, &shared}) {
    cl->collective_points.clear();
    cl->collective_fits.clear();
    cl->intra_node.bandwidth_bytes_per_s = 1e9;
  }
  c.sequence_parallel = false;
  const CollectiveModel slow_free(free_overlap), slow_shared(shared);
  const ChunkCost sa = CostModel(m, t, c, free_overlap, slow_free).chunk(0, 0, false);
  const ChunkCost sb = CostModel(m, t, c, shared, slow_shared).chunk(0, 0, false);
  EXPECT_NEAR(sb.backward.seconds, sa.backward.seconds, 1e-9 * sa.backward.seconds);
  EXPECT_LT(sb.backward.tp_comm_exposed_s, sa.backward.tp_comm_exposed_s);  // more of it is GEMM time now

  Json j = to_json(shared);
  for (const Json& bad : {Json(-0.1), Json(0.95), Json("half")}) {
    j["compute"]["collective_sm_fraction"] = bad;
    auto r = cluster_from_json(j);
    ASSERT_FALSE(r.ok()) << bad.dump();
    EXPECT_NE(r.error().message.find("collective_sm_fraction"), std::string::npos) << r.error().message;
  }
}

// Gradient reductions and ZeRO gathers run beside the backward on the DP channel and take the
// same share of the SMs: the step grows, by at most that share of the DP collectives' time,
// and not at all where the reduction waits for the backward to end.
TEST(Simulator, DataParallelCollectivesBesideComputeTakeTheirShareOfTheSms) {
  const ModelSpec m = *model_preset("llama2-7b");
  const auto [free_overlap, shared] = overlap_free_and_shared();
  SimOptions keep;
  keep.keep_graph = true;
  for (int zero : {0, 3}) {
    ParallelConfig c{.dp = 8, .zero = zero, .micro_batch = 1};
    TrainingSpec t{.gpus = 8, .global_batch = 32, .seq_len = m.seq_len};
    auto a = simulate(m, t, c, free_overlap, keep);
    auto b = simulate(m, t, c, shared, keep);
    ASSERT_TRUE(a.ok() && b.ok());
    double dp_s = 0;
    for (const Op& op : a->graph.ops())
      if (op.kind == OpKind::kDataParallel) dp_s += ns_to_s(op.duration);
    EXPECT_GT(b->step_time_s, a->step_time_s) << "zero " << zero;
    EXPECT_NE(b->limited_by.find("lost to SMs held by collectives"), std::string::npos) << b->limited_by;
    EXPECT_EQ(a->limited_by.find("lost to SMs"), std::string::npos) << a->limited_by;
    EXPECT_LE(b->step_time_s - a->step_time_s, 0.25 * dp_s + 1e-9) << "zero " << zero;
    if (zero == 0) {
      t.overlap_grad_reduce = false;  // one reduction once the backward has ended: nothing beside it
      EXPECT_DOUBLE_EQ(simulate(m, t, c, shared)->step_time_s, simulate(m, t, c, free_overlap)->step_time_s);
    }
  }
}

TEST(CostModel, AMemoryOpEfficiencyOutsideZeroToOneIsBadInput) {
  Json j = to_json(*cluster_preset("dgx-a100-80gb"));
  for (const Json& bad : {Json(1.5), Json(0.0), Json("fast")}) {
    j["compute"]["memory_op_efficiency"] = {{"softmax", bad}};
    auto c = cluster_from_json(j);
    ASSERT_FALSE(c.ok()) << bad.dump();
    EXPECT_NE(c.error().message.find("memory_op_efficiency.softmax"), std::string::npos) << c.error().message;
  }
  j["compute"]["memory_op_efficiency"] = Json::array({0.5});
  EXPECT_FALSE(cluster_from_json(j).ok());
}

}  // namespace
}  // namespace loom::sim

namespace loom::sim {
namespace {

// A host's cost file holds kernel timings with all ranks of a node running and with one alone:
// a plan uses the timings of as many ranks per node as it runs.
TEST(CostModel, KernelTimingsFollowTheRanksSharingANode) {
  const ModelSpec m = *model_preset("gpt-tiny");
  ClusterSpec cluster = *cluster_preset("local-cpu");
  cluster.gpus_per_node = 2;
  cluster.gemm_table = {{128, 128, 128, 1e-3, 1}, {128, 128, 128, 3e-3, 2}};
  cluster.memory_op_table = {{"gelu", 1e6, 1e-3, 1}, {"gelu", 1e6, 2e-3, 2}};
  const CollectiveModel collectives(cluster);
  TrainingSpec t{.global_batch = 2};
  ParallelConfig one, two;
  two.dp = 2;
  t.gpus = 1;
  const CostModel alone(m, t, one, cluster, collectives);
  t.gpus = 2;
  const CostModel together(m, t, two, cluster, collectives);
  EXPECT_DOUBLE_EQ(alone.gemm_s(128, 128, 128), 1e-3);
  EXPECT_DOUBLE_EQ(together.gemm_s(128, 128, 128), 3e-3);
  EXPECT_DOUBLE_EQ(alone.memory_s("gelu", 1e6), 1e-3);
  EXPECT_DOUBLE_EQ(together.memory_s("gelu", 1e6), 2e-3);
  // More ranks than were timed together: the largest concurrency measured.
  ParallelConfig four{.dp = 4};
  t.gpus = 4;
  cluster.gpus_per_node = 4;
  const CostModel crowded(m, t, four, cluster, collectives);
  EXPECT_DOUBLE_EQ(crowded.gemm_s(128, 128, 128), 3e-3);
}

}  // namespace
}  // namespace loom::sim

namespace loom::sim {
namespace {

double segment_s(const PassCost& p, const std::string& name) {
  double s = 0;
  for (const auto& seg : p.segments)
    if (seg.name == name) s += seg.seconds;
  return s;
}

// A cost file whose software adds linear biases in passes of their own (`loom profile` of Loom's
// executor measures "bias") charges them to the GEMM's op (QKV, MLP up) and, for the row-parallel
// layers, to the residual add, as the executor's trace slices hold them; one without "bias" points
// (fused biases) charges nothing; a model without biases pays nothing either way.
TEST(CostModel, SeparateBiasAddsAreChargedOnlyWhereTheCostFileMeasuredThem) {
  ModelSpec m = *model_preset("gpt-tiny");
  ClusterSpec fused = *cluster_preset("local-cpu");
  fused.memory_op_table = {{"residual", 1e6, 1e-3}};
  ClusterSpec separate = fused;
  separate.memory_op_table.push_back({"bias", 1e6, 2e-3});  // 2 ms per MB moved
  TrainingSpec t{.gpus = 1, .global_batch = 1};
  const double T = m.seq_len, ab = t.activation_bytes;
  auto forward = [&](const ModelSpec& model, const ClusterSpec& c) {
    const CollectiveModel collectives(c);
    const CostModel cost(model, t, ParallelConfig{}, c, collectives);
    return cost.chunk(0, 0, false).forward;
  };
  const PassCost without = forward(m, fused), with = forward(m, separate);
  // Per layer: QKV's bias over T × 3h and the MLP's over T × 4h. The two row-parallel layers' biases are
  // added inside the residual adds (bias-dropout-add), which the cost file times whole as "residual".
  const double per_byte = 2e-3 / 1e6;
  EXPECT_NEAR(segment_s(with, "qkv") - segment_s(without, "qkv"), m.layers * per_byte * 2 * ab * T * 3 * m.hidden,
              1e-12);
  EXPECT_NEAR(segment_s(with, "mlp_up") - segment_s(without, "mlp_up"), m.layers * per_byte * 2 * ab * T * 4 * m.hidden,
              1e-12);
  EXPECT_GT(segment_s(with, "residual"), 0.0);
  EXPECT_DOUBLE_EQ(segment_s(with, "residual"), segment_s(without, "residual"));
  m.linear_bias = false;
  const PassCost no_bias = forward(m, separate), no_bias_fused = forward(m, fused);
  EXPECT_DOUBLE_EQ(no_bias.seconds, no_bias_fused.seconds);
}

}  // namespace
}  // namespace loom::sim

namespace loom::sim {
namespace {

// LLaMA-2 7B made a mixture of experts: 16 routed experts of `expert_ffn`, top 2, on 16 H100s.
struct MoeLlama {
  ModelSpec model = *model_preset("llama2-7b");
  ClusterSpec cluster = *cluster_preset("dgx-h100");
  CollectiveModel collectives{cluster};
  TrainingSpec training{.gpus = 16, .global_batch = 64, .seq_len = 4096};
  explicit MoeLlama(int expert_ffn, int shared_ffn = 0) {
    model.moe.experts = 16;
    model.moe.experts_per_token = 2;
    model.moe.expert_ffn = expert_ffn;
    model.moe.shared_ffn = shared_ffn;
  }
};

// --moe-shared-expert-overlap: the shared expert's GEMMs run beside the dispatch and combine, so less
// of the all-to-alls is exposed; without a shared expert, or without the flag, nothing changes.
TEST(CostModel, SharedExpertOverlapHidesPartOfTheAllToAlls) {
  MoeLlama s(2048, 4096);
  ModelSpec& m = s.model;
  const ClusterSpec& cluster = s.cluster;
  const CollectiveModel& collectives = s.collectives;
  const TrainingSpec& t = s.training;
  const ParallelConfig c{.dp = 16, .zero = 1, .ep = 16};  // across two nodes: a slow all-to-all
  TrainingSpec overlap = t;
  overlap.moe_shared_expert_overlap = true;
  const CostModel waited(m, t, c, cluster, collectives), beside(m, overlap, c, cluster, collectives);
  const ChunkCost w = waited.chunk(0, 0, false), b = beside.chunk(0, 0, false);
  EXPECT_GT(w.forward.ep_comm_exposed_s, 0.0);
  EXPECT_LT(b.forward.ep_comm_exposed_s, w.forward.ep_comm_exposed_s);
  EXPECT_LT(b.backward.ep_comm_exposed_s, w.backward.ep_comm_exposed_s);
  EXPECT_LT(b.forward.seconds, w.forward.seconds);
  // What is hidden is at most the shared expert's GEMMs: the pass never drops below its compute.
  EXPECT_GE(b.forward.seconds, w.forward.seconds - w.forward.ep_comm_exposed_s);
  m.moe.shared_ffn = 0;
  const CostModel no_shared(m, t, c, cluster, collectives), no_shared_flag(m, overlap, c, cluster, collectives);
  EXPECT_DOUBLE_EQ(no_shared.chunk(0, 0, false).forward.seconds, no_shared_flag.chunk(0, 0, false).forward.seconds);
}

// Each chunk costs its own layers: with DeepSeek's leading dense layers (8 of 32 here) the first stage of
// four holds only dense ones, which dispatch nothing, and costs exactly the dense model's stage; the
// other stages hold only MoE layers and cost exactly the all-MoE model's. A stage of both (PP 2) costs
// the sum of its layers, not its layer count times the mean layer.
TEST(CostModel, EachChunkCostsItsOwnDenseAndMoeLayers) {
  MoeLlama setup(4096);
  ModelSpec mixed = setup.model;
  mixed.moe.first_dense_layers = 8;
  ModelSpec dense = mixed, all_moe = mixed;
  dense.moe = MoeSpec{};
  all_moe.moe.first_dense_layers = 0;
  const ParallelConfig c{.pp = 4, .dp = 4, .zero = 1, .ep = 4};
  auto forward = [&](const ModelSpec& m, const ParallelConfig& config, int stage) {
    return CostModel(m, setup.training, config, setup.cluster, setup.collectives).chunk(stage, 0, false);
  };
  const ChunkCost first = forward(mixed, c, 0), second = forward(mixed, c, 1);
  EXPECT_DOUBLE_EQ(first.forward.seconds, forward(dense, c, 0).forward.seconds);
  EXPECT_DOUBLE_EQ(first.backward.seconds, forward(dense, c, 0).backward.seconds);
  EXPECT_DOUBLE_EQ(first.forward.ep_comm_exposed_s, 0.0);
  EXPECT_DOUBLE_EQ(second.forward.seconds, forward(all_moe, c, 1).forward.seconds);
  EXPECT_GT(second.forward.ep_comm_exposed_s, 0.0);
  // PP 2: stage 0 holds the 8 dense layers and 8 MoE ones, half of each other model's stage 0 (whose
  // embedding they share).
  const ParallelConfig pp2{.pp = 2, .dp = 8, .zero = 1, .ep = 8};
  const ChunkCost half = forward(mixed, pp2, 0);
  const ChunkCost dense_half = forward(dense, pp2, 0), moe_half = forward(all_moe, pp2, 0);
  EXPECT_NEAR(half.forward.seconds, (dense_half.forward.seconds + moe_half.forward.seconds) / 2, 1e-12);
  EXPECT_NEAR(half.backward.seconds, (dense_half.backward.seconds + moe_half.backward.seconds) / 2, 1e-12);
  EXPECT_NEAR(half.forward.ep_comm_exposed_s, forward(all_moe, pp2, 0).forward.ep_comm_exposed_s / 2, 1e-12);
}

// A chunk's passes list its layers in order (what the trace shows): with MoE on every other layer after
// one dense layer (layers 1, 3, 5, ...), the forward's layers alternate dense and MoE from a dense one, and
// the backward runs them last first.
TEST(CostModel, AChunksPassesListItsLayersInOrder) {
  MoeLlama setup(4096);
  setup.model.moe.first_dense_layers = 1;
  setup.model.moe.layer_freq = 2;
  const ParallelConfig c{.pp = 4, .dp = 4, .zero = 1, .ep = 4};  // 8 layers a stage: 0-7 on stage 0
  const ChunkCost chunk =
      CostModel(setup.model, setup.training, c, setup.cluster, setup.collectives).chunk(0, 0, false);
  // Each layer runs two norms: a forward layer opens with its first `norm`, a backward one closes with its
  // second `norm_bwd` (its MLP's backward, routing included, comes first). An MoE layer routes.
  auto routed = [](const PassCost& pass, const std::string& norm, const std::string& router, bool norm_opens) {
    std::vector<bool> moe(8, false);
    int norms = 0;
    for (const auto& seg : pass.segments) {
      if (seg.name == norm) ++norms;
      if (seg.name == router) moe.at(norm_opens ? (norms - 1) / 2 : norms / 2) = true;
    }
    EXPECT_EQ(norms, 16) << norm;
    return moe;
  };
  EXPECT_EQ(routed(chunk.forward, "norm", "router", true),
            (std::vector<bool>{false, true, false, true, false, true, false, true}));
  EXPECT_EQ(routed(chunk.backward, "norm_bwd", "router_bwd", false),
            (std::vector<bool>{true, false, true, false, true, false, true, false}));
}

// Expert TP 1 (whole experts, SP): each TP rank dispatches its own s/tp tokens, the EP ranks are
// consecutive (8 of them inside a node even under TP 2), and an MoE layer without a shared expert runs
// no TP collective around its MLP; the attention's stay.
TEST(CostModel, ExpertTensorParallelOneDropsTheMlpTpCollectives) {
  MoeLlama setup(4096);
  const ModelSpec& m = setup.model;
  const ClusterSpec& cluster = setup.cluster;
  const CollectiveModel& collectives = setup.collectives;
  const TrainingSpec& t = setup.training;
  auto count = [](const PassCost& p, const std::string& prefix) {
    int n = 0;
    double s = 0;
    for (const auto& seg : p.segments)
      if (seg.name.starts_with(prefix) && seg.seconds > 0) {
        ++n;
        s += seg.seconds;
      }
    return std::pair<int, double>{n, s};
  };
  ParallelConfig c{.tp = 2, .dp = 8, .zero = 1, .sequence_parallel = true, .ep = 8};
  const CostModel split(m, t, c, cluster, collectives);
  c.etp = 1;
  const CostModel whole(m, t, c, cluster, collectives);
  const ChunkCost s = split.chunk(0, 0, false), w = whole.chunk(0, 0, false);
  const std::string gather = trace_names::collective(Collective::kAllGather, "tp");
  const std::string scatter = trace_names::collective(Collective::kReduceScatter, "tp");
  // Per layer two of each with experts split over TP (attention and MLP), one with whole experts.
  EXPECT_EQ(count(s.forward, gather).first - count(w.forward, gather).first, m.layers);
  EXPECT_EQ(count(s.forward, scatter).first - count(w.forward, scatter).first, m.layers);
  EXPECT_GE(count(s.forward, gather).first, 2 * m.layers);
  // The same bytes leave each rank (its own tokens' copies): with whole experts the 8 EP ranks are
  // consecutive, one node; split over TP they are 2 apart and span two nodes.
  const double bytes = t.activation_bytes * 4096 / 2 * m.hidden * 2;
  EXPECT_NEAR(count(w.forward, "all_to_all ep").second,
              2 * m.layers * collectives.time_s(Collective::kAllGather, bytes, {8, 8}), 1e-12);
  EXPECT_LT(count(w.forward, "all_to_all ep").second, count(s.forward, "all_to_all ep").second);
  EXPECT_LT(w.forward.seconds, s.forward.seconds);
  // Each rank holds 2 whole experts instead of halves of 2: twice the routed-expert parameters.
  EXPECT_NEAR(whole.stage_expert_params(0), 2 * split.stage_expert_params(0), 1.0);
}

// Expert parallelism: each MoE layer's pass pays an all-to-all on the EP group to dispatch its
// tokens' k copies and one to combine them (forward; the backward the same), on intra-node links while
// the EP group fits a node and slower once it spans two; without EP there is none. Routed experts'
// gradients reduce over the expert-data-parallel group, which is empty when ep covers every dp rank.
TEST(CostModel, ExpertParallelAllToAllsAndExpertGradientGroups) {
  MoeLlama setup(4096);
  const ModelSpec& m = setup.model;
  const ClusterSpec& cluster = setup.cluster;
  const CollectiveModel& collectives = setup.collectives;
  const TrainingSpec& t = setup.training;
  auto config = [](int ep) {
    ParallelConfig c{.dp = 16, .zero = 1};
    c.ep = ep;
    return c;
  };
  auto a2a_s = [&](const PassCost& p) {
    double s = 0;
    for (const auto& seg : p.segments)
      if (seg.name.starts_with("all_to_all ep")) s += seg.seconds;
    return s;
  };
  const double bytes = t.activation_bytes * 4096 * m.hidden * 2;  // a micro-batch's tokens, k = 2 copies each
  {
    const CostModel cost(m, t, config(1), cluster, collectives);
    const ChunkCost c = cost.chunk(0, 0, false);
    EXPECT_EQ(a2a_s(c.forward), 0.0);
    EXPECT_EQ(c.forward.ep_comm_exposed_s, 0.0);
  }
  double inside = 0;
  {
    const CostModel cost(m, t, config(8), cluster, collectives);
    const ChunkCost c = cost.chunk(0, 0, false);
    inside = collectives.time_s(Collective::kAllGather, bytes, {8, 8});
    EXPECT_NEAR(a2a_s(c.forward), 2 * m.layers * inside, 1e-12);
    EXPECT_NEAR(a2a_s(c.backward), 2 * m.layers * inside, 1e-12);
    EXPECT_NEAR(c.forward.ep_comm_exposed_s, a2a_s(c.forward), 1e-12);
    // Two ranks hold each expert: its gradient is all-reduced over them (across the two nodes).
    EXPECT_GT(cost.grad_collective_s(Collective::kAllReduce, 0, 1e9), 0.0);
  }
  {
    const CostModel cost(m, t, config(16), cluster, collectives);
    const ChunkCost c = cost.chunk(0, 0, false);
    EXPECT_GT(a2a_s(c.forward), 2 * m.layers * inside);                      // the EP group spans both nodes
    EXPECT_EQ(cost.grad_collective_s(Collective::kAllReduce, 0, 1e9), 0.0);  // each expert on one rank
    auto r = simulate(m, t, config(16), cluster);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_GT(r->exposed.ep_s, 0.0);
  }
  // Routing imbalance: the busiest EP rank's experts get 1.5x the mean tokens, and its all-to-all
  // share 1.5x the bytes; without EP every rank runs every expert on its own tokens and nothing changes.
  TrainingSpec skewed = t;
  skewed.moe_imbalance = 1.5;
  {
    const CostModel even(m, t, config(8), cluster, collectives), busy(m, skewed, config(8), cluster, collectives);
    const ChunkCost e = even.chunk(0, 0, false), b = busy.chunk(0, 0, false);
    EXPECT_GT(b.forward.seconds, e.forward.seconds);
    EXPECT_NEAR(a2a_s(b.forward), 2 * m.layers * collectives.time_s(Collective::kAllGather, 1.5 * bytes, {8, 8}),
                1e-12);
  }
  {
    const CostModel even(m, t, config(1), cluster, collectives), busy(m, skewed, config(1), cluster, collectives);
    EXPECT_DOUBLE_EQ(busy.chunk(0, 0, false).forward.seconds, even.chunk(0, 0, false).forward.seconds);
  }
}

}  // namespace
}  // namespace loom::sim

namespace loom::sim {
namespace {

// Host dispatch (TrainingSpec::host_op_s): a pass takes at least its launches times the host's time per
// op. A tiny model's kernels are shorter than eager PyTorch's 8 us per op, so its passes become exactly
// that floor; a 7B model's are far longer, and nothing changes.
TEST(CostModel, HostDispatchFloorsAPassAtItsLaunches) {
  const ClusterSpec cluster = *cluster_preset("dgx-h100");
  const CollectiveModel collectives(cluster);
  ModelSpec tiny = *model_preset("gpt2-small");
  tiny.layers = 4, tiny.hidden = 64, tiny.heads = 4, tiny.kv_heads = 4, tiny.ffn_hidden = 256, tiny.vocab = 1024;
  tiny.seq_len = 128;
  const ParallelConfig c{.dp = 8, .micro_batch = 1};
  TrainingSpec t{.gpus = 8, .global_batch = 32};
  t.attention = AttentionKernel::kUnfused;  // the fused kernel's curve has a fixed cost of its own at this size
  const ChunkCost free = CostModel(tiny, t, c, cluster, collectives).chunk(0, 0, false);
  t.host_op_s = 8e-6;
  const ChunkCost bound = CostModel(tiny, t, c, cluster, collectives).chunk(0, 0, false);
  for (auto [f, b] : {std::pair{&free.forward, &bound.forward}, std::pair{&free.backward, &bound.backward}}) {
    EXPECT_EQ(f->host_bound_s, 0.0);
    EXPECT_EQ(f->kernels, b->kernels);
    EXPECT_GT(f->kernels, 4 * 8);  // several launches per layer
    ASSERT_LT(f->seconds, f->kernels * 8e-6) << "the tiny model's pass must be launch-bound for this test";
    EXPECT_NEAR(b->seconds, b->kernels * 8e-6, 1e-15);
    EXPECT_NEAR(b->host_bound_s, b->seconds - f->seconds, 1e-15);
    EXPECT_EQ(b->segments.back().name, "host dispatch");
  }
  auto step = [&](const ModelSpec& m, const ParallelConfig& config, TrainingSpec training, double host_op_s) {
    training.host_op_s = host_op_s;
    auto r = simulate(m, training, config, cluster);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r->step_time_s;
  };
  EXPECT_GT(step(tiny, c, t, 8e-6), 1.2 * step(tiny, c, t, 0.0));
  const ParallelConfig big{.tp = 8, .dp = 1, .zero = 1, .micro_batch = 1, .sequence_parallel = true};
  const TrainingSpec seven{.gpus = 8, .global_batch = 8, .seq_len = 4096};
  EXPECT_EQ(step(*model_preset("llama2-7b"), big, seven, 8e-6), step(*model_preset("llama2-7b"), big, seven, 0.0));
}

// The gradient norm's all-reduce before every optimizer step: latency-bound, over the world with a
// distributed optimizer and over the model-parallel ranks without; nothing on one GPU.
TEST(CostModel, GradientNormIsOneScalarAllReducedOverTheRanksWhoseGradientsDiffer) {
  const ModelSpec m = *model_preset("gpt3-175b");
  const ClusterSpec cluster = *cluster_preset("dgx-a100-80gb");
  const CollectiveModel collectives(cluster);
  auto norm_s = [&](int gpus, ParallelConfig c) {
    const TrainingSpec t{.gpus = gpus, .global_batch = 1536};
    return CostModel(m, t, c, cluster, collectives).grad_norm_reduce_s();
  };
  const ParallelConfig sharded{.tp = 8, .pp = 8, .dp = 16, .zero = 1, .micro_batch = 1};
  ParallelConfig replicated = sharded;
  replicated.zero = 0;
  const double world = norm_s(1024, sharded), model_parallel = norm_s(1024, replicated);
  EXPECT_EQ(world, collectives.time_s(Collective::kAllReduce, 4.0, {1024, 8}));
  // tp 8 in a node, 8 stages on 8 nodes.
  EXPECT_EQ(model_parallel, collectives.time_s(Collective::kAllReduce, 4.0, {64, 8}));
  EXPECT_GT(world, model_parallel);
  EXPECT_GT(model_parallel, 1e-6);
  EXPECT_LT(world, 1e-3);  // latency: well under a millisecond even over 128 nodes
  EXPECT_EQ(norm_s(1, ParallelConfig{}), 0.0);
}

// Element-wise kernels (TrainingSpec::elementwise). Eager PyTorch runs RMSNorm, torchtitan's RoPE, the
// copies that widen GQA's K and V and SwiGLU as one ATen kernel per primitive; fused, each is one
// kernel. The eager kernels' traffic is recounted here from the ops themselves (bf16 values of 2
// bytes, fp32 math of 4): a forward RMSNorm reads x (2) and writes x32 (4), squares it (4 + 4), takes
// the mean (4), scales by rstd (4 + 4), casts down (4 + 2) and multiplies by the weight (2 + 2), 36
// bytes per value; RoPE casts up (2 + 4), multiplies the complex pairs (4 + 4) and casts down (4 + 2),
// 20; repeat_kv reads K (or V) once and writes it for every query head; SwiGLU's silu (2 + 2) and
// multiply (2 + 2 + 2), 10 per value of the inner width. A GPT's LayerNorm and GELU are one kernel
// either way.
TEST(CostModel, EagerElementwiseKernelsMoveWhatTheirOpsMove) {
  const ClusterSpec cluster = *cluster_preset("dgx-h100");
  const CollectiveModel collectives(cluster);
  const ModelSpec m = *model_preset("llama3-8b");
  ASSERT_EQ(m.norm, Norm::kRMSNorm);
  ASSERT_LT(m.kv_heads, m.heads);
  const ParallelConfig c{.dp = 8, .micro_batch = 1};
  TrainingSpec t{.gpus = 8, .global_batch = 8, .seq_len = 4096};
  const ChunkCost fused = CostModel(m, t, c, cluster, collectives).chunk(0, 0, false);
  t.elementwise = Elementwise::kEager;
  const ChunkCost eager = CostModel(m, t, c, cluster, collectives).chunk(0, 0, false);

  auto is_eager = [](const std::string& name) {
    return name.find('.') != std::string::npos || name.starts_with("repeat_kv");
  };
  double eager_s = 0;
  int eager_kernels = 0;
  std::set<std::string> names;
  for (const Segment& seg : eager.forward.segments)
    if (is_eager(seg.name)) {
      eager_s += seg.seconds;
      ++eager_kernels;
      names.insert(seg.name);
    }
  for (const char* n : {"norm.to_fp32", "norm.pow", "norm.mul_weight", "rope.mul_freqs", "repeat_kv", "swiglu.silu"})
    EXPECT_TRUE(names.contains(n)) << n;
  for (const Segment& seg : fused.forward.segments) EXPECT_FALSE(is_eager(seg.name)) << seg.name;
  std::set<std::string> fused_names;
  for (const Segment& seg : fused.forward.segments) fused_names.insert(seg.name);
  EXPECT_TRUE(fused_names.contains("rope"));  // one fused kernel over Q and K

  const double tokens = 4096, h = m.hidden, q = static_cast<double>(m.q_dim()), kv = static_cast<double>(m.kv_dim());
  const double ffn = m.ffn_hidden, layers = m.layers;
  const double per_layer = 2 * 36 * tokens * h + 20 * tokens * (q + kv) + 2 * 2 * tokens * (kv + q) + 10 * tokens * ffn;
  const double bytes = layers * per_layer + 36 * tokens * h;  // and the final norm
  const int kernels = static_cast<int>(layers) * (2 * 8 + 2 * 3 + 2 + 2) + 8;
  EXPECT_EQ(eager_kernels, kernels);
  const double bandwidth = cluster.device.memory_bandwidth_bytes_per_s * cluster.compute.memory_bound_efficiency;
  EXPECT_NEAR(eager_s, bytes / bandwidth + kernels * cluster.compute.kernel_launch_s, 1e-9 * eager_s);
  EXPECT_GT(eager.forward.seconds, fused.forward.seconds);
  EXPECT_GT(eager.backward.seconds, fused.backward.seconds);
  EXPECT_GT(eager.forward.kernels, fused.forward.kernels);

  // A GPT: LayerNorm, GELU and learned positions run as one kernel eager or fused.
  const ModelSpec gpt = *model_preset("gpt2-xl");
  TrainingSpec g{.gpus = 8, .global_batch = 8};
  auto gpt_step = simulate(gpt, g, c, cluster);
  g.elementwise = Elementwise::kEager;
  auto gpt_eager = simulate(gpt, g, c, cluster);
  ASSERT_TRUE(gpt_step.ok() && gpt_eager.ok());
  EXPECT_EQ(gpt_step->step_time_s, gpt_eager->step_time_s);
}

// DTensor's sequence parallelism (TrainingSpec::sp_collective_copies, torchtitan): each all-gather and
// reduce-scatter of a [b, s, h] activation copies the whole tensor once (read and written): four in a
// layer's forward and four in its backward (the output gradients' gathers, the input gradients'
// scatters), and one for each collective of the embedding and the LM head the simulator charges (the
// embedding's reduce-scatter, the head's all-gather and its input gradient's reduce-scatter). Nothing
// without SP, and nothing under Megatron's layout.
TEST(CostModel, SequenceParallelCollectivesOnTheSecondDimensionCopyTheirTensor) {
  const ClusterSpec cluster = *cluster_preset("dgx-h100");
  const CollectiveModel collectives(cluster);
  const ModelSpec m = *model_preset("llama3-8b");
  const ParallelConfig sp{.tp = 8, .dp = 1, .micro_batch = 2, .sequence_parallel = true};
  TrainingSpec t{.gpus = 8, .global_batch = 2, .seq_len = 4096};
  t.sp_collective_copies = true;
  const CostModel cost(m, t, sp, cluster, collectives);
  const ChunkCost c = cost.chunk(0, 0, false);
  auto copies = [](const PassCost& p) {
    std::vector<double> out;
    for (const Segment& seg : p.segments)
      if (seg.name == "sp_collective_copy") out.push_back(seg.seconds);
    return out;
  };
  const double tensor = 2.0 * 4096 * m.hidden * 2;  // b · s · h bf16 values
  const auto forward = copies(c.forward), backward = copies(c.backward);
  ASSERT_EQ(forward.size(), 4u * m.layers + 2);
  ASSERT_EQ(backward.size(), 4u * m.layers + 1);
  for (double s : forward) EXPECT_NEAR(s, cost.memory_s("sp_collective_copy", 2.0 * tensor), 1e-15);
  TrainingSpec megatron = t;
  megatron.sp_collective_copies = false;
  EXPECT_TRUE(copies(CostModel(m, megatron, sp, cluster, collectives).chunk(0, 0, false).forward).empty());
  ParallelConfig no_sp = sp;
  no_sp.sequence_parallel = false;
  EXPECT_TRUE(copies(CostModel(m, t, no_sp, cluster, collectives).chunk(0, 0, false).forward).empty());
  const ChunkCost without = CostModel(m, megatron, sp, cluster, collectives).chunk(0, 0, false);
  double added = 0;
  for (double s : forward) added += s;
  EXPECT_NEAR(c.forward.seconds - without.forward.seconds, added, 1e-9);
}

// FSDP2's buffers (TrainingSpec::zero3_collective_copies, torchtitan): each pass that gathers copies every
// gathered parameter out of the gather's buffer on the compute stream (read and written in bf16); each
// unit's gather first copies this rank's fp32 shard into its input as bf16, and each reduce-scatter first
// copies the unit's bf16 gradient into its input as fp32, on the collective's own stream. Nothing without
// the flag, and no per-pass copy where a pipeline keeps the chunk gathered.
TEST(CostModel, Fsdp2CopiesItsGatheredParametersOutAndItsGradientsIn) {
  const ClusterSpec cluster = *cluster_preset("dgx-h100");
  const CollectiveModel collectives(cluster);
  const ModelSpec m = *model_preset("llama3-8b");
  const ParallelConfig fsdp{.dp = 8, .zero = 3, .micro_batch = 2};
  TrainingSpec t{.gpus = 8, .global_batch = 16, .seq_len = 4096};
  t.grad_bytes = 4;
  t.zero3_fp32_shards = true;
  TrainingSpec plain = t;
  t.zero3_collective_copies = true;
  const CostModel cost(m, t, fsdp, cluster, collectives), without(m, plain, fsdp, cluster, collectives);
  auto copies = [](const PassCost& p) {
    std::vector<double> out;
    for (const Segment& seg : p.segments)
      if (seg.name == "zero3_copy_out") out.push_back(seg.seconds);
    return out;
  };
  // Every parameter of the model, gathered by this one stage (the final norm, 4,096 of them, wherever the
  // model counts it).
  const double params =
      static_cast<double>(m.layers_params() + m.embedding_params(m.vocab) + m.lm_head_params(m.vocab));
  const ChunkCost c = cost.chunk(0, 0, false);
  for (const PassCost* pass : {&c.forward, &c.backward}) {
    const auto out = copies(*pass);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_NEAR(out[0], cost.memory_s("zero3_copy_out", 2.0 * 2.0 * params), 1e-6 * out[0]);
  }
  const ChunkCost bare = without.chunk(0, 0, false);
  EXPECT_TRUE(copies(bare.forward).empty());
  EXPECT_NEAR(c.forward.seconds - bare.forward.seconds, copies(c.forward)[0], 1e-12);
  // One unit of 2e8 parameters: its 1/8 shard read as fp32 and written as bf16 before the gather; its
  // whole gradient read as bf16 and written as fp32 before the reduce-scatter.
  const double unit = 2e8;
  EXPECT_NEAR(cost.zero3_unit_s(Collective::kAllGather, unit) - without.zero3_unit_s(Collective::kAllGather, unit),
              cost.memory_s("zero3_copy_in", unit / 8 * (4.0 + 2.0)), 1e-12);
  EXPECT_NEAR(
      cost.zero3_unit_s(Collective::kReduceScatter, unit) - without.zero3_unit_s(Collective::kReduceScatter, unit),
      cost.memory_s("zero3_copy_in", unit * (2.0 + 4.0)), 1e-12);
  // Kept gathered through a pipeline: gathered once a step, no copy in each pass.
  const ParallelConfig kept{.pp = 2, .dp = 4, .zero = 3, .micro_batch = 2};
  TrainingSpec keep = t;
  keep.zero3_pp_keep_gathered = true;
  EXPECT_TRUE(copies(CostModel(m, keep, kept, cluster, collectives).chunk(0, 0, false).forward).empty());
  // The step pays for them.
  auto step = [&](const TrainingSpec& spec) {
    auto r = simulate(m, spec, fsdp, cluster);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? r->step_time_s : 0.0;
  };
  EXPECT_GT(step(t), step(plain) + copies(c.forward)[0]);
}

// ZeRO-3 kept gathered through a pipeline (TrainingSpec::zero3_pp_keep_gathered, torchtitan's FSDP under
// PP): one gather per model chunk a step, where each pass otherwise gathers, and one reduce-scatter of
// the accumulated gradients after the chunk's last backward, where each backward otherwise reduce-scatters.
TEST(Simulator, Zero3KeptGatheredThroughThePipelineGathersOnceAStep) {
  const ClusterSpec cluster = *cluster_preset("dgx-h100");
  const ModelSpec m = *model_preset("llama3-8b");
  const ParallelConfig c{.pp = 2, .dp = 4, .zero = 3, .micro_batch = 1, .vpp = 2, .schedule = Schedule::kInterleaved};
  auto count = [&](bool keep, Collective kind, int global_batch) {
    TrainingSpec t{.gpus = 8, .global_batch = global_batch, .seq_len = 4096};
    t.zero3_pp_keep_gathered = keep;
    SimOptions detailed;
    detailed.keep_graph = true;
    auto r = simulate(m, t, c, cluster, detailed);
    EXPECT_TRUE(r.ok()) << r.error().message;
    int n = 0;
    for (const Op& op : r->graph.ops()) n += op.kind == OpKind::kDataParallel && op.collective == kind;
    return n;
  };
  const int passes = 2 * 32 / 4;  // forward and backward of each of 8 micro-batches
  EXPECT_EQ(count(false, Collective::kAllGather, 32), 2 * 2 * passes);  // 2 stages x 2 chunks x every pass
  EXPECT_EQ(count(true, Collective::kAllGather, 32), 2 * 2);            // each chunk once
  EXPECT_EQ(count(true, Collective::kAllGather, 64), 2 * 2);
  // Reduce-scatters: per backward without, only the last backward's buckets with, whatever the batch.
  EXPECT_EQ(count(true, Collective::kReduceScatter, 32), count(true, Collective::kReduceScatter, 64));
  EXPECT_GT(count(false, Collective::kReduceScatter, 64), count(false, Collective::kReduceScatter, 32));
  EXPECT_GT(count(false, Collective::kReduceScatter, 32), count(true, Collective::kReduceScatter, 32));
}

}  // namespace
}  // namespace loom::sim
