// sim/nccl_tuning.h against the numbers NCCL's own tuning model gives (the latency table of
// shared/reference/collectives-at-scale.md §1.4, derived there from NCCL's tuning.cc for 8-GPU
// Hopper nodes on Intel hosts), NVIDIA's DGX A100 all-reduce bus bandwidth, and its use by the
// collective model for groups that span nodes.
#include <cmath>

#include <gtest/gtest.h>

#include "core/presets.h"
#include "sim/collectives.h"
#include "sim/nccl_tuning.h"

namespace loom::sim {
namespace {

NcclGroup hopper_nodes(int nodes) { return {nodes, 8, 450e9, 47.5e9, false}; }

TEST(NcclTuning, LatenciesAreNcclsOwnAtEveryScale) {
  struct Row {
    int nodes;
    double ring_ar_ll, ring_ar_ll128, ring_ar_simple, tree_ar_ll, tree_ar_simple, ring_ag_simple;  // µs
  };
  // §1.4 of the reference (its figures are rounded to the µs).
  const Row rows[] = {{2, 40, 75, 184, 25, 92, 70},
                      {8, 156, 283, 819, 45, 148, 297},
                      {32, 622, 1113, 3359, 65, 204, 1204},
                      {128, 2484, 4435, 13520, 85, 260, 4833},
                      {256, 4968, 8864, 27068, 95, 288, 9671}};
  for (const Row& r : rows) {
    const NcclGroup g = hopper_nodes(r.nodes);
    auto us = [&](Collective c, NcclAlgorithm a, NcclProtocol p) { return nccl_latency_s(c, a, p, g) * 1e6; };
    const auto ring = NcclAlgorithm::kRing, tree = NcclAlgorithm::kTree;
    EXPECT_NEAR(us(Collective::kAllReduce, ring, NcclProtocol::kLL), r.ring_ar_ll, 1.0) << r.nodes;
    EXPECT_NEAR(us(Collective::kAllReduce, ring, NcclProtocol::kLL128), r.ring_ar_ll128, 1.0) << r.nodes;
    EXPECT_NEAR(us(Collective::kAllReduce, ring, NcclProtocol::kSimple), r.ring_ar_simple, 1.0) << r.nodes;
    EXPECT_NEAR(us(Collective::kAllReduce, tree, NcclProtocol::kLL), r.tree_ar_ll, 1.0) << r.nodes;
    EXPECT_NEAR(us(Collective::kAllReduce, tree, NcclProtocol::kSimple), r.tree_ar_simple, 1.0) << r.nodes;
    EXPECT_NEAR(us(Collective::kAllGather, ring, NcclProtocol::kSimple), r.ring_ag_simple, 1.0) << r.nodes;
    EXPECT_NEAR(us(Collective::kReduceScatter, ring, NcclProtocol::kSimple), r.ring_ag_simple, 1.0) << r.nodes;
  }
  // An AMD host's network post overhead (2 µs, ×3 for Simple) floors the intra-node ring steps.
  NcclGroup amd = hopper_nodes(2);
  amd.amd_host = true;
  EXPECT_NEAR(nccl_latency_s(Collective::kAllGather, NcclAlgorithm::kRing, NcclProtocol::kSimple, amd) * 1e6,
              8.4 + 14 * 6.0 + 14.0, 1e-9);
}

TEST(NcclTuning, ProtocolAndAlgorithmFollowTheSize) {
  const NcclGroup g = hopper_nodes(64);
  const NcclEstimate tiny = nccl_collective(Collective::kAllReduce, 8, g);
  EXPECT_EQ(tiny.algorithm, NcclAlgorithm::kTree);  // logarithmic latency
  EXPECT_EQ(tiny.protocol, NcclProtocol::kLL);
  // A large buffer on a few nodes: the ring's bandwidth (2(n−1)/n of the buffer against the tree's
  // 2 at 0.92 of the bus bandwidth). At 64 nodes the Simple ring's 6.7 ms of latency lets the tree
  // win even at 8 GB.
  const NcclEstimate huge = nccl_collective(Collective::kAllReduce, 8e9, hopper_nodes(4));
  EXPECT_EQ(huge.algorithm, NcclAlgorithm::kRing);
  EXPECT_EQ(huge.protocol, NcclProtocol::kSimple);
  EXPECT_EQ(nccl_collective(Collective::kAllReduce, 8e9, g).algorithm, NcclAlgorithm::kTree);
  const NcclEstimate gather = nccl_collective(Collective::kAllGather, 1e6, g);
  EXPECT_EQ(gather.algorithm, NcclAlgorithm::kRing);  // no tree for all-gather
  // Time never falls as the buffer grows.
  double last = 0;
  for (double bytes = 1; bytes < 1e11; bytes *= 2) {
    const double t = nccl_collective(Collective::kAllReduce, bytes, g).seconds;
    EXPECT_GE(t, last) << bytes;
    last = t;
  }
}

// NVIDIA measured about 192 GB/s all-reduce bus bandwidth on DGX A100 nodes with 8 HDR NICs (nccl
// #812): a full-node ring is NIC-bound, 8 × the 24 GB/s one HDR NIC achieves. One GPU per node
// gets one NIC.
TEST(NcclTuning, BusBandwidthIsTheNodesNicsOrNvlink) {
  const ClusterSpec a100 = *cluster_preset("dgx-a100-80gb");
  const NcclGroup full{4, 8, a100.intra_node.bandwidth_bytes_per_s, a100.inter_node.bandwidth_bytes_per_s, true};
  const double bytes = 4e9, n = 32;
  const double t = nccl_collective(Collective::kAllReduce, bytes, full).seconds;
  const double busbw = 2.0 * (n - 1) / n * bytes / t;
  EXPECT_NEAR(busbw / 192e9, 1.0, 0.02) << busbw / 1e9 << " GB/s";
  const NcclGroup rail{32, 1, a100.intra_node.bandwidth_bytes_per_s, a100.inter_node.bandwidth_bytes_per_s, true};
  EXPECT_DOUBLE_EQ(nccl_bus_bandwidth(NcclAlgorithm::kRing, NcclProtocol::kSimple, rail), 24e9);
}

// The collective model costs groups spanning nodes as NCCL does on an NCCL cost file, keeps the
// hierarchical α–β composition without one, and measured points between nodes win over both.
TEST(NcclTuning, CollectiveModelUsesItAcrossNodesOnly) {
  ClusterSpec nccl = *cluster_preset("dgx-a100-80gb");
  ASSERT_EQ(nccl.collective_library, "nccl");
  ASSERT_EQ(nccl.host_cpu_vendor, "amd");
  const CollectiveModel with(nccl);
  const NcclGroup g{192, 8, nccl.intra_node.bandwidth_bytes_per_s, nccl.inter_node.bandwidth_bytes_per_s, true};
  for (double bytes : {1e5, 1e8, 3.6e9})
    EXPECT_DOUBLE_EQ(with.time_s(Collective::kAllGather, bytes, {1536, 8}),
                     nccl_collective(Collective::kAllGather, bytes, g).seconds);
  // Inside one node: the measured all-reduce points, as before.
  ClusterSpec plain = nccl;
  plain.collective_library.clear();
  const CollectiveModel without(plain);
  EXPECT_DOUBLE_EQ(with.time_s(Collective::kAllReduce, 1e8, {8, 8}),
                   without.time_s(Collective::kAllReduce, 1e8, {8, 8}));
  // 1,536 ranks: the ring's latency (n − nodes NVLink steps and nodes − 1 network ones) makes a
  // small gather far slower than the two-level α–β composition said.
  EXPECT_GT(with.time_s(Collective::kAllGather, 1e6, {1536, 8}),
            3.0 * without.time_s(Collective::kAllGather, 1e6, {1536, 8}));
  // Measured between nodes: those points win.
  ClusterSpec measured = nccl;
  for (double bytes : {1e6, 1e7, 1e8, 1e9})
    measured.collective_points.push_back({"all_gather", "inter_node", 192, bytes, 1e-3 + bytes / 10e9});
  const CollectiveModel from_points(measured);
  EXPECT_NE(from_points.time_s(Collective::kAllGather, 1e8, {1536, 8}),
            with.time_s(Collective::kAllGather, 1e8, {1536, 8}));
}

}  // namespace
}  // namespace loom::sim
