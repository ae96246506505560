// The simulator under context parallelism: each rank's layer works on s/cp tokens; the ring's
// attention runs cp equal tiles with the KV transfer hidden behind each (only its excess shows);
// gradients reduce over dp·cp ranks; the all-to-all kind is exposed.
#include <map>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/presets.h"
#include "sim/cost_model.h"
#include "sim/simulator.h"
#include "sim/trace.h"

namespace loom::sim {
namespace {

struct CpSim {
  ModelSpec model = *model_preset("llama3-8b");  // 32 heads, 8 kv heads of 128
  ClusterSpec cluster = *cluster_preset("dgx-h100");
  TrainingSpec training{.gpus = 16, .global_batch = 16, .seq_len = 32768};
  ChunkCost chunk(const ParallelConfig& c) const {
    const CollectiveModel collectives(cluster);
    return CostModel(model, training, c, cluster, collectives).chunk(0, 0, false);
  }
};

std::vector<const Segment*> named(const PassCost& p, const std::string& name) {
  std::vector<const Segment*> out;
  for (const Segment& s : p.segments)
    if (s.name == name) out.push_back(&s);
  return out;
}

std::vector<const Segment*> starting(const PassCost& p, const std::string& prefix) {
  std::vector<const Segment*> out;
  for (const Segment& s : p.segments)
    if (s.name.rfind(prefix, 0) == 0) out.push_back(&s);
  return out;
}

// One flash-attention kernel as the cost file's curve times it (cost_model.cc flash_efficiency):
// peak × efficiency × w/(w + half saturation), w the forward + backward FLOPs (3.5 × forward).
double flash_s(const ClusterSpec& c, double forward_flops, double times) {
  const double w = 3.5 * forward_flops;
  const double eff = c.compute.flash_attention_efficiency * w / (w + c.compute.flash_attention_half_saturation_flops);
  return times * forward_flops / (c.device.peak_flops * eff) + c.compute.kernel_launch_s;
}

// A point-to-point transfer on one link of the cluster file: latency + bytes / bandwidth.
double link_s(const LinkSpec& link, double bytes) { return link.latency_s + bytes / link.bandwidth_bytes_per_s; }

TEST(ContextParallelSim, EachRankDoes1OverCpOfTheWorkInCpEqualTiles) {
  const CpSim s;
  const ParallelConfig one{.tp = 2, .dp = 8};
  const ChunkCost a = s.chunk(one);
  for (CpComm kind : {CpComm::kP2P, CpComm::kA2A, CpComm::kAllGather})
    for (int cp : {2, 4}) {
      ParallelConfig c = one;
      c.cp = cp;
      c.dp = 8 / cp;
      c.cp_comm = kind;
      const ChunkCost b = s.chunk(c);
      // GEMMs scale with the rank's tokens, causal attention with s²/cp: all of it is 1/cp.
      EXPECT_NEAR(b.forward.flops * cp, a.forward.flops, 1e-9 * a.forward.flops) << to_string(kind) << cp;
      EXPECT_NEAR(b.backward.flops * cp, a.backward.flops, 1e-9 * a.backward.flops) << to_string(kind) << cp;
      if (kind != CpComm::kP2P) continue;
      // The ring: cp attention tiles per layer, all the same (causal load balancing), named by step.
      const auto tiles = starting(b.forward, "flash_attention ring ");
      ASSERT_EQ(static_cast<int>(tiles.size()), cp * s.model.layers);
      for (const Segment* t : tiles) EXPECT_DOUBLE_EQ(t->seconds, tiles.front()->seconds);
      EXPECT_EQ(named(b.forward, fmt::format("flash_attention ring {}/{}", cp, cp)).size(), s.model.layers * 1u);
      EXPECT_EQ(named(b.backward, fmt::format("flash_attention_bwd ring 1/{}", cp)).size(), s.model.layers * 1u);
    }
}

// The ring's cost from the cluster file by hand: a tile is one flash kernel of 2·b·(s/cp)²·q/t
// FLOPs (2.5× in the backward), a transfer K and V of the rank's s/cp tokens over one link; the
// forward posts cp − 1 transfers, the backward cp (KV, then KV + dKV, the last only dKV), each beside
// one tile, and only a transfer's excess over its tile shows (as a "wait" on the compute lane).
TEST(ContextParallelSim, RingCostIsTheTilesPlusEachTransfersExcessFromTheLinkFigures) {
  CpSim fast, slow;
  slow.cluster.inter_node.bandwidth_bytes_per_s = 1e8;  // 0.1 GB/s: far slower than any tile
  const ParallelConfig c{.tp = 8, .dp = 1, .cp = 2};    // tp·cp = 16 > 8 GPUs: the ring crosses nodes
  const CollectiveModel collectives(slow.cluster);
  const CostModel cost(slow.model, slow.training, c, slow.cluster, collectives);
  EXPECT_EQ(cost.cp_ring_level(), LinkLevel::kInterNode);
  // K and V of the rank's 16384 tokens, 8 kv heads of 128 over tp 8, bf16.
  const double kv_bytes = 2.0 * 16384 * (8 * 128 / 8) * 2;
  EXPECT_DOUBLE_EQ(cost.cp_kv_bytes(), kv_bytes);
  // Half of a (s/cp)² tile of QK^T and AV over the rank's 32 heads of 128 / tp 8.
  const double tile_flops = 2.0 * 16384 * 16384 * (32 * 128 / 8);
  const double tile = flash_s(slow.cluster, tile_flops, 1.0), tile_bwd = flash_s(slow.cluster, tile_flops, 2.5);

  const ChunkCost hidden = fast.chunk(c);
  EXPECT_EQ(hidden.forward.cp_comm_exposed_s, 0.0);
  EXPECT_EQ(hidden.backward.cp_comm_exposed_s, 0.0);
  EXPECT_TRUE(starting(hidden.forward, "wait cp ring").empty());
  // Hidden transfers still show in the trace, beside their tile, taking none of the pass's time.
  const auto sends = named(hidden.forward, "send_recv cp ring 1/2 kv");
  ASSERT_EQ(sends.size(), fast.model.layers * 1u);
  EXPECT_TRUE(sends.front()->beside);
  EXPECT_EQ(sends.front()->lane, Lane::kCpComm);
  EXPECT_NEAR(sends.front()->seconds, link_s(fast.cluster.inter_node, kv_bytes), 1e-15);
  const auto tiles = named(hidden.forward, "flash_attention ring 1/2");
  ASSERT_EQ(tiles.size(), fast.model.layers * 1u);
  EXPECT_NEAR(tiles.front()->seconds, tile, 1e-12);

  const ChunkCost exposed = slow.chunk(c);
  const double layers = slow.model.layers;
  const double send = link_s(slow.cluster.inter_node, kv_bytes);
  ASSERT_GT(send, tile_bwd);
  // Forward: one transfer (for step 2) beside tile 1. Backward: KV beside tile 1, dKV beside tile 2.
  EXPECT_NEAR(exposed.forward.cp_comm_exposed_s, layers * (send - tile), 1e-9);
  EXPECT_NEAR(exposed.backward.cp_comm_exposed_s, layers * 2.0 * (send - tile_bwd), 1e-9);
  EXPECT_EQ(named(exposed.forward, "wait cp ring 1/2").size(), slow.model.layers * 1u);
  EXPECT_TRUE(named(exposed.forward, "wait cp ring 2/2").empty());
  EXPECT_EQ(named(exposed.backward, "wait cp ring 1/2").size(), slow.model.layers * 1u);
  EXPECT_EQ(named(exposed.backward, "wait cp ring 2/2").size(), slow.model.layers * 1u);
  EXPECT_EQ(named(exposed.backward, "send_recv cp ring 2/2 dkv").size(), slow.model.layers * 1u);
  // The ring's only extra cost is what shows: the passes differ by exactly that.
  EXPECT_NEAR(exposed.forward.seconds - hidden.forward.seconds, exposed.forward.cp_comm_exposed_s, 1e-9);
  EXPECT_DOUBLE_EQ(CostModel::ring_exposed_s(3.0, 1.0), 2.0);
  EXPECT_DOUBLE_EQ(CostModel::ring_exposed_s(1.0, 3.0), 0.0);
}

// cp 4 inside one node (tp 2 · cp 4 = 8 GPUs): NVLink transfers; the backward's middle steps carry
// KV and dKV together, twice the bytes.
TEST(ContextParallelSim, TheBackwardRingCarriesKvThenKvAndDkvThenDkv) {
  const CpSim s;
  const ParallelConfig c{.tp = 2, .dp = 2, .cp = 4};
  const CollectiveModel collectives(s.cluster);
  EXPECT_EQ(CostModel(s.model, s.training, c, s.cluster, collectives).cp_ring_level(), LinkLevel::kIntraNode);
  const double kv_bytes = 2.0 * 8192 * (8 * 128 / 2) * 2;
  const ChunkCost cc = s.chunk(c);
  std::vector<std::string> names;
  std::vector<double> seconds;
  for (const Segment& seg : cc.backward.segments)
    if (seg.beside && names.size() < 4) {
      names.push_back(seg.name);
      seconds.push_back(seg.seconds);
    }
  EXPECT_EQ(names, (std::vector<std::string>{"send_recv cp ring 1/4 kv", "send_recv cp ring 2/4 kv+dkv",
                                             "send_recv cp ring 3/4 kv+dkv", "send_recv cp ring 4/4 dkv"}));
  ASSERT_EQ(seconds.size(), 4u);
  EXPECT_NEAR(seconds[0], link_s(s.cluster.intra_node, kv_bytes), 1e-15);
  EXPECT_NEAR(seconds[1], link_s(s.cluster.intra_node, 2.0 * kv_bytes), 1e-15);
  EXPECT_NEAR(seconds[3], seconds[0], 1e-15);
  // Three transfers per layer forward, four backward; NVLink hides all of them behind the tiles.
  EXPECT_EQ(starting(cc.forward, "send_recv cp ring").size(), 3u * s.model.layers);
  EXPECT_EQ(starting(cc.backward, "send_recv cp ring").size(), 4u * s.model.layers);
  EXPECT_EQ(cc.forward.cp_comm_exposed_s + cc.backward.cp_comm_exposed_s, 0.0);
}

TEST(ContextParallelSim, RingPlacementFollowsTheRankOrder) {
  const CpSim s;
  const CollectiveModel collectives(s.cluster);
  auto level = [&](int tp, int cp) {
    const ParallelConfig c{.tp = tp, .dp = 16 / (tp * cp), .cp = cp};
    return CostModel(s.model, s.training, c, s.cluster, collectives).cp_ring_level();
  };
  EXPECT_EQ(level(1, 8), LinkLevel::kIntraNode);
  EXPECT_EQ(level(4, 2), LinkLevel::kIntraNode);
  EXPECT_EQ(level(4, 4), LinkLevel::kInterNode);
  EXPECT_EQ(level(1, 16), LinkLevel::kInterNode);
}

TEST(ContextParallelSim, GradientsReduceOverDpTimesCpAndPipelineSendsCarryTheRanksTokens) {
  const CpSim s;
  const CollectiveModel collectives(s.cluster);
  const ParallelConfig c{.tp = 2, .pp = 2, .dp = 2, .cp = 2};
  const CostModel cost(s.model, s.training, c, s.cluster, collectives);
  EXPECT_EQ(cost.dp_group().size, 4);
  EXPECT_EQ(cost.dp_group().per_node, 4);  // tp 2: four of the group per 8-GPU node
  // Stages are tp·cp·dp = 8 ranks apart: one node each, so the send crosses nodes, with b·(s/cp)·h/tp.
  EXPECT_DOUBLE_EQ(cost.pipe_send_s(0, 1), collectives.send_recv_s(16384.0 * 4096 * 2 / 2, LinkLevel::kInterNode));

  // dp 1, cp 2: no data parallelism, yet the two CP ranks' gradients are all-reduced.
  TrainingSpec t = s.training;
  t.gpus = 2;
  t.global_batch = 4;
  SimOptions keep;
  keep.keep_graph = true;
  auto r = simulate(s.model, t, ParallelConfig{.dp = 1, .cp = 2}, s.cluster, keep);
  ASSERT_TRUE(r.ok()) << r.error().message;
  int reductions = 0;
  for (std::int32_t i = 0; i < static_cast<std::int32_t>(r->graph.size()); ++i)
    reductions += r->graph.op(i).kind == OpKind::kDataParallel && r->graph.op(i).collective == Collective::kAllReduce;
  EXPECT_GT(reductions, 0);
}

// Llama 3 70B at 32K tokens on DGX H100 nodes (tp 8, pp 4, full recompute, 16 micro-batches of
// one sequence): cp 2 on twice the GPUs gives each rank half the FLOPs of the same layout at cp 1.
// Its ring crosses nodes (tp·cp = 16), but a step's tile (2·16384²·1024 FLOPs, over a millisecond)
// outlasts its 8 MiB of KV on a 50 GB/s NIC (0.17 ms), so nothing of it shows; what it loses is
// kernel efficiency on half-length GEMMs and tiles, and the gradient all-reduce now spans two
// ranks. So the step is faster, but not faster than linear, and the MFU stays near cp 1's.
TEST(ContextParallelSim, Llama70bAt32kTokensCp2IsNearlyLinear) {
  const ModelSpec m = *model_preset("llama3-70b");
  const ClusterSpec cluster = *cluster_preset("dgx-h100");
  const TrainingSpec one{.gpus = 32, .global_batch = 16, .seq_len = 32768};
  TrainingSpec two = one;
  two.gpus = 64;
  const ParallelConfig base{.tp = 8, .pp = 4, .dp = 1, .recompute = Recompute::kFull};
  ParallelConfig with_cp = base;
  with_cp.cp = 2;
  auto a = simulate(m, one, base, cluster);
  auto b = simulate(m, two, with_cp, cluster);
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b->exposed.cp_s, 0.0);
  EXPECT_LT(b->step_time_s, a->step_time_s);
  EXPECT_GT(b->step_time_s, 0.5 * a->step_time_s);
  EXPECT_GT(b->mfu, 0.9 * a->mfu);
  EXPECT_LE(b->mfu, a->mfu);
  // The same tokens per step: tokens/s is the inverse of the step time on both.
  EXPECT_NEAR(b->tokens_per_s * b->step_time_s, a->tokens_per_s * a->step_time_s, 1e-6 * a->tokens_per_s);
}

// Ulysses: 4 all-to-alls before and after the attention of each layer's forward and backward, none
// hidden: the exposed time is the all-to-alls' time.
TEST(ContextParallelSim, AllToAllIsFullyExposed) {
  const CpSim s;
  const ParallelConfig c{.tp = 2, .dp = 2, .cp = 4, .cp_comm = CpComm::kA2A};
  const CollectiveModel collectives(s.cluster);
  const CostModel cost(s.model, s.training, c, s.cluster, collectives);
  const ChunkCost cc = s.chunk(c);
  const double tokens = 32768.0 / 4;
  auto a2a = [&](double width) {
    return collectives.time_s(Collective::kAllGather, 2.0 * tokens * width / 2, cost.cp_group());
  };
  const double per_layer = 2.0 * a2a(32 * 128) + 2.0 * a2a(8 * 128);
  EXPECT_NEAR(cc.forward.cp_comm_exposed_s, s.model.layers * per_layer, 1e-12);
  EXPECT_NEAR(cc.backward.cp_comm_exposed_s, s.model.layers * per_layer, 1e-12);
  EXPECT_EQ(cost.cp_group().size, 4);
}

double total_s(const std::vector<const Segment*>& segments) {
  double s = 0;
  for (const Segment* seg : segments) s += seg->seconds;
  return s;
}

// PyTorch's ring attention (torchtitan), p2p rotation, cp 2 across nodes on a slow link: the tiles are
// TransformerEngine's; the forward adds the fp32 merges of each step's output (an upcast per step, the
// 36-byte merge from step 2, a downcast at the end); the backward rings the key/value gradients in fp32
// (twice the bf16 K and V's bytes) beside the next tile, and waits for the last one after its last tile.
TEST(ContextParallelSim, PyTorchRingAttentionMergesInFp32AndRingsFp32KeyValueGradients) {
  CpSim te;
  te.cluster.inter_node.bandwidth_bytes_per_s = 1e8;  // every transfer outlasts its tile
  CpSim pt = te;
  pt.training.cp_attention = CpAttention::kPyTorch;
  const ParallelConfig c{.tp = 8, .dp = 1, .cp = 2};
  const CollectiveModel collectives(pt.cluster);
  const CostModel cost(pt.model, pt.training, c, pt.cluster, collectives);
  const double layers = pt.model.layers;
  const double out = 16384.0 * (32 * 128 / 8), kv_values = 2.0 * 16384 * (8 * 128 / 8);
  const double kv_bytes = 2.0 * kv_values, dkv_bytes = 4.0 * kv_values;
  const double tile_flops = 2.0 * 16384 * 16384 * (32 * 128 / 8);
  const double tile = flash_s(pt.cluster, tile_flops, 1.0), tile_bwd = flash_s(pt.cluster, tile_flops, 2.5);
  const double send = link_s(pt.cluster.inter_node, kv_bytes), send_dkv = link_s(pt.cluster.inter_node, dkv_bytes);
  ASSERT_GT(send, tile_bwd);

  const ChunkCost a = te.chunk(c), b = pt.chunk(c);
  const auto tiles = named(b.forward, "flash_attention ring 2/2");
  ASSERT_EQ(tiles.size(), pt.model.layers * 1u);
  EXPECT_NEAR(tiles.front()->seconds, tile, 1e-12);
  EXPECT_EQ(named(b.forward, "cp_merge_to_fp32").size(), 2u * pt.model.layers);
  EXPECT_EQ(named(b.forward, "cp_merge").size(), 1u * pt.model.layers);
  EXPECT_EQ(named(b.forward, "cp_merge_to_bf16").size(), 1u * pt.model.layers);
  EXPECT_NEAR(named(b.forward, "cp_merge").front()->seconds, cost.memory_s("cp_merge", 36.0 * out), 1e-15);
  EXPECT_NEAR(named(b.forward, "cp_merge_to_fp32").front()->seconds, cost.memory_s("cp_merge_to_fp32", 6.0 * out),
              1e-15);
  // The forward's exchange is TransformerEngine's (K and V for step 2 beside tile 1): the passes differ
  // by the merges alone.
  EXPECT_NEAR(b.forward.cp_comm_exposed_s, a.forward.cp_comm_exposed_s, 1e-12);
  EXPECT_NEAR(b.forward.seconds - a.forward.seconds,
              total_s(starting(b.forward, "cp_merge")) + total_s(named(b.forward, "host dispatch")) -
                  total_s(named(a.forward, "host dispatch")),
              1e-9);

  // Backward: K and V beside tile 1, the fp32 dK/dV of step 1 beside tile 2, the last one waited for.
  const auto dkv = named(b.backward, "send_recv cp ring 1/2 dkv");
  ASSERT_EQ(dkv.size(), pt.model.layers * 1u);
  EXPECT_NEAR(dkv.front()->seconds, send_dkv, 1e-15);
  EXPECT_NEAR(b.backward.cp_comm_exposed_s, layers * ((send - tile_bwd) + (send_dkv - tile_bwd) + send_dkv), 1e-9);
  EXPECT_EQ(named(b.backward, "wait cp ring 2/2 dkv").size(), pt.model.layers * 1u);
  EXPECT_EQ(named(b.backward, "cp_dq_accumulate").size(), 2u * pt.model.layers);
  EXPECT_NEAR(named(b.backward, "cp_dq_accumulate").front()->seconds, cost.memory_s("cp_dq_accumulate", 10.0 * out),
              1e-15);
  EXPECT_GT(b.backward.seconds, a.backward.seconds);
  EXPECT_DOUBLE_EQ(b.forward.flops, a.forward.flops);
  EXPECT_DOUBLE_EQ(b.backward.flops, a.backward.flops);
}

// PyTorch's all_gather rotation (torchtitan's default): one all-gather of every rank's K and V per pass,
// beside the first tile; no ring sends of K and V.
TEST(ContextParallelSim, PyTorchAllGatherRotationGathersOnceBesideTheFirstTile) {
  CpSim s;
  s.cluster.inter_node.bandwidth_bytes_per_s = 1e8;
  s.training.cp_attention = CpAttention::kPyTorch;
  const ParallelConfig c{.tp = 8, .dp = 1, .cp = 2, .cp_comm = CpComm::kAllGather};
  const CollectiveModel collectives(s.cluster);
  const CostModel cost(s.model, s.training, c, s.cluster, collectives);
  const double gather = collectives.time_s(Collective::kAllGather, 2.0 * cost.cp_kv_bytes(), cost.cp_group());
  const double tile = flash_s(s.cluster, 2.0 * 16384 * 16384 * (32 * 128 / 8), 1.0);
  ASSERT_GT(gather, tile);
  const ChunkCost cc = s.chunk(c);
  EXPECT_EQ(named(cc.forward, "all_gather cp").size(), s.model.layers * 1u);
  EXPECT_TRUE(named(cc.forward, "all_gather cp").front()->beside);
  EXPECT_TRUE(starting(cc.forward, "send_recv cp ring").empty());
  EXPECT_NEAR(cc.forward.cp_comm_exposed_s, s.model.layers * (gather - tile), 1e-9);
}

// The trace shows every ring step: each tile on the compute thread, each KV transfer on a "cp comm"
// thread starting with the tile it runs beside; traces without CP keep their four threads.
TEST(ContextParallelSim, TheTraceShowsTheRingStepsBesideTheirTiles) {
  const CpSim s;
  TrainingSpec t = s.training;
  t.gpus = 4;
  t.global_batch = 2;
  SimOptions o;
  o.keep_graph = true;
  o.record_segments = true;
  auto r = simulate(s.model, t, ParallelConfig{.tp = 2, .dp = 1, .cp = 2}, s.cluster, o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto j = nlohmann::json::parse(chrome_trace_json(*r, "cp"));
  std::map<std::string, std::vector<std::pair<double, int>>> slices;  // name → (start, thread)
  bool cp_thread_named = false;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["args"]["name"] == "cp comm") cp_thread_named = true;
    if (e["ph"] == "X" && e["pid"] == 0)
      slices[e["name"].get<std::string>()].push_back({e["ts"].get<double>(), e["tid"].get<int>()});
  }
  EXPECT_TRUE(cp_thread_named);
  for (const char* name : {"flash_attention ring 1/2", "flash_attention ring 2/2", "flash_attention_bwd ring 1/2",
                           "flash_attention_bwd ring 2/2", "send_recv cp ring 1/2 kv", "send_recv cp ring 2/2 dkv"})
    ASSERT_TRUE(slices.count(name)) << name;
  // 32 layers, 2 micro-batches: one slice per layer and pass.
  EXPECT_EQ(slices["flash_attention ring 2/2"].size(), 64u);
  const auto& send = slices["send_recv cp ring 1/2 kv"].front();
  const auto& tile = slices["flash_attention ring 1/2"].front();
  EXPECT_EQ(send.second, 4);  // the cp comm thread
  EXPECT_EQ(tile.second, 0);  // the compute thread
  EXPECT_EQ(send.first, tile.first);

  auto plain = simulate(s.model, t, ParallelConfig{.tp = 2, .dp = 2}, s.cluster, o);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(chrome_trace_json(*plain, "no cp").find("cp comm"), std::string::npos);
}

}  // namespace
}  // namespace loom::sim
