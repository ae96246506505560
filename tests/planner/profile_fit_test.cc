// planner/calibrate.h's fits of a measured cost file (what `loom profile` writes) to its own
// tables, on tables made from known parameters; and the reduction of repeated traces of one run.
#include <cmath>

#include <gtest/gtest.h>

#include "core/presets.h"
#include "planner/calibrate.h"
#include "sim/collectives.h"

namespace loom {
namespace {

// Every GEMM at a flat rate (so the curve's half-saturation is 0 and its ceiling rate/peak), and
// every layer op at a fixed share of the bandwidth; rank 0 alone (ranks 1) runs faster than all
// ranks together (ranks 2), and the fit must read the latter.
ClusterSpec measured_host() {
  ClusterSpec c = *cluster_preset("local-cpu");
  c.device.peak_flops = 100e9;
  c.device.memory_bandwidth_bytes_per_s = 10e9;
  c.gemm_table.clear();
  c.memory_op_table.clear();
  for (int ranks : {2, 1}) {
    const double rate = ranks == 2 ? 40e9 : 50e9;
    for (std::int64_t m : {64, 256, 1024})
      for (std::int64_t n : {64, 1024}) c.gemm_table.push_back({m, n, 256, 2.0 * m * n * 256 / rate, ranks});
    const double efficiency = ranks == 2 ? 0.5 : 0.8;
    for (const char* op : {"norm", "gelu", "residual_bwd"})
      for (double bytes : {1e6, 1e7}) c.memory_op_table.push_back({op, bytes, bytes / (10e9 * efficiency), ranks});
    c.memory_op_table.push_back({"optimizer", 1e6, 1.0, ranks});  // not a layer op: not fitted
  }
  return c;
}

TEST(FitMeasuredTables, KernelFitsReadTheTimingsWithTheMostRanksTogether) {
  ClusterSpec c = measured_host();
  fit_measured_tables(c);
  EXPECT_NEAR(c.compute.gemm_max_efficiency, 0.4, 1e-9);
  EXPECT_NEAR(c.compute.gemm_half_saturation_flops, 0.0, 1.0);
  EXPECT_NEAR(c.compute.memory_bound_efficiency, 0.5, 1e-9);
  EXPECT_DOUBLE_EQ(c.device.memory_bandwidth_bytes_per_s, 10e9);
  EXPECT_EQ(c.provenance.at("memory_bound_fit_r2"), "1.0000");
}

TEST(FitMeasuredTables, LayerOpsFasterThanStreamRaiseTheBandwidthInstead) {
  ClusterSpec c = measured_host();
  for (auto& op : c.memory_op_table) op.seconds /= 4;  // efficiency 2 against STREAM
  fit_measured_tables(c);
  EXPECT_DOUBLE_EQ(c.compute.memory_bound_efficiency, 1.0);
  EXPECT_NEAR(c.device.memory_bandwidth_bytes_per_s, 20e9, 1e-3);
}

TEST(FitMeasuredTables, CollectivePointsBecomeAlphaBetaLinesAndSendsTheLink) {
  ClusterSpec c = measured_host();
  c.max_nodes = 1;
  const sim::AlphaBeta truth{2e-6, 5e9, 1.0};
  for (const char* name : {"all_reduce", "send_recv"}) {
    const sim::Collective kind =
        std::string(name) == "all_reduce" ? sim::Collective::kAllReduce : sim::Collective::kSendRecv;
    for (double bytes = 1024; bytes <= (1 << 24); bytes *= 2)
      c.collective_points.push_back({name, "intra_node", 2, bytes, sim::alpha_beta_time(truth, kind, 2, bytes)});
  }
  fit_measured_tables(c);
  ASSERT_FALSE(c.collective_fits.empty());
  for (const auto& fit : c.collective_fits) {
    EXPECT_NEAR(fit.bus_bandwidth_bytes_per_s, 5e9, 5e9 * 1e-3) << fit.collective;
    EXPECT_GT(fit.r2, 0.999) << fit.collective;
  }
  EXPECT_TRUE(c.provenance.count("alpha_beta_r2_all_reduce_intra_node_2"));
  EXPECT_NEAR(c.intra_node.bandwidth_bytes_per_s, 5e9, 5e9 * 1e-3);
  EXPECT_DOUBLE_EQ(c.inter_node.bandwidth_bytes_per_s, c.intra_node.bandwidth_bytes_per_s);  // one host
}

TEST(KeepFastestRepeats, KeepsTheFastestTraceOfEachRunAndRankInOrder) {
  TraceRun slow;
  slow.model = *model_preset("gpt-tiny");
  slow.measured.forward_s[0] = 2.0;
  slow.label = "slow";
  TraceRun fast = slow;
  fast.measured.forward_s[0] = 1.0;
  fast.label = "fast";
  TraceRun other_rank = slow;
  other_rank.rank = 1;
  other_rank.label = "rank1";
  const std::vector<TraceRun> kept = keep_fastest_repeats({slow, other_rank, fast});
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].label, "rank1");
  EXPECT_EQ(kept[1].label, "fast");
}

}  // namespace
}  // namespace loom
