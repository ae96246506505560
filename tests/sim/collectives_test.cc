// Collective cost: the nccl-tests α–β forms, the fit to measured A100 all-reduce times, and the
// hierarchical composition across nodes.
#include <fstream>
#include <type_traits>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/json_io.h"
#include "core/presets.h"
#include "sim/collectives.h"

namespace loom::sim {
namespace {

ClusterSpec analytic_cluster() {
  ClusterSpec c = *cluster_preset("dgx-h100");  // no measured points: link figures only
  c.collective_points.clear();
  c.collective_fits.clear();
  return c;
}

TEST(Collectives, RingAllReduceClosedForm) {
  const ClusterSpec c = analytic_cluster();
  const CollectiveModel model(c);
  const double alpha = c.intra_node.latency_s, bw = c.intra_node.bandwidth_bytes_per_s;
  for (int n : {2, 4, 8}) {
    for (double bytes : {1e3, 1e6, 1e9}) {
      EXPECT_DOUBLE_EQ(model.flat_time_s(Collective::kAllReduce, bytes, n, LinkLevel::kIntraNode),
                       2.0 * (n - 1) * alpha + 2.0 * (n - 1) / n * bytes / bw);
      EXPECT_DOUBLE_EQ(model.flat_time_s(Collective::kReduceScatter, bytes, n, LinkLevel::kIntraNode),
                       (n - 1) * alpha + (n - 1.0) / n * bytes / bw);
    }
  }
}

TEST(Collectives, TreeWinsForSmallMessagesAcrossNodes) {
  const ClusterSpec c = analytic_cluster();
  const CollectiveModel model(c);
  const int n = 64;
  const double ring_small =
      2.0 * (n - 1) * c.inter_node.latency_s + 2.0 * (n - 1) / n * 1e3 / c.inter_node.bandwidth_bytes_per_s;
  EXPECT_LT(model.flat_time_s(Collective::kAllReduce, 1e3, n, LinkLevel::kInterNode), ring_small);
}

TEST(Collectives, FitToMeasuredA100AllReduce) {
  std::ifstream in(std::string(LOOM_VALIDATION_DIR) + "/nccl_allreduce_a100.json");
  ASSERT_TRUE(in) << "missing shared/validation/nccl_allreduce_a100.json";
  const auto j = nlohmann::json::parse(in);
  const CollectiveModel model(*cluster_preset("dgx-a100-80gb"));
  for (int n : {2, 4, 8}) {
    std::vector<std::pair<double, double>> points;
    for (const auto& p : j["points"])
      if (p["gpus"] == n) points.emplace_back(p["bytes"].get<double>(), p["us"].get<double>() * 1e-6);
    const AlphaBeta fit = fit_alpha_beta(Collective::kAllReduce, n, points);
    EXPECT_GE(fit.r2, 0.99) << n << " GPUs";
    // nccl-tests bus bandwidth of NVSwitch A100 nodes: about 200–240 GB/s.
    EXPECT_GT(fit.bus_bandwidth_bytes_per_s, 180e9) << n;
    EXPECT_LT(fit.bus_bandwidth_bytes_per_s, 260e9) << n;
    // The cost file carries these points: measured sizes are reproduced exactly.
    for (const auto& [bytes, seconds] : points)
      EXPECT_NEAR(model.time_s(Collective::kAllReduce, bytes, {n, n}) / seconds, 1.0, 1e-9) << n << " " << bytes;
  }
}

TEST(Collectives, HierarchicalAcrossNodesCostsMoreThanInside) {
  const CollectiveModel model(*cluster_preset("dgx-a100-80gb"));
  const double bytes = 256e6;
  const double inside = model.time_s(Collective::kAllReduce, bytes, {8, 8});
  const double across = model.time_s(Collective::kAllReduce, bytes, {16, 8});
  const double rails = model.time_s(Collective::kAllReduce, bytes, {16, 1});
  EXPECT_GT(across, inside);
  EXPECT_GT(rails, across);  // one GPU per node: the whole buffer crosses InfiniBand
}

TEST(Collectives, MoreBandwidthIsNeverSlower) {
  ClusterSpec c = analytic_cluster();
  const CollectiveModel slow(c);
  c.inter_node.bandwidth_bytes_per_s *= 2;
  c.intra_node.bandwidth_bytes_per_s *= 2;
  const CollectiveModel fast(c);
  for (GroupPlacement g : {GroupPlacement{8, 8}, GroupPlacement{64, 8}, GroupPlacement{32, 1}})
    for (auto coll : {Collective::kAllReduce, Collective::kReduceScatter, Collective::kAllGather})
      EXPECT_LE(fast.time_s(coll, 1e8, g), slow.time_s(coll, 1e8, g));
}

// Two regimes, as a host's shared-memory all-reduce shows them: buffers in cache move at 5.6 GB/s,
// past 8 MiB they stream from DRAM at 1.6 GB/s with a higher fixed cost. One line cannot follow
// both; the regime fit finds the break, and a clean single line stays one regime.
TEST(Collectives, RegimeFitFindsTheCacheToDramBreak) {
  const AlphaBeta cache{0.8e-6, 5.6e9, 1}, dram{40e-6, 1.6e9, 1};
  std::vector<std::pair<double, double>> points, clean;
  for (double bytes = 1024; bytes <= 256.0 * (1 << 20); bytes *= 2) {
    const AlphaBeta& ab = bytes <= 8.0 * (1 << 20) ? cache : dram;
    points.emplace_back(bytes, alpha_beta_time(ab, Collective::kAllReduce, 2, bytes));
    clean.emplace_back(bytes, alpha_beta_time(cache, Collective::kAllReduce, 2, bytes));
  }
  const RegimeFit fit = fit_alpha_beta_regimes(Collective::kAllReduce, 2, points);
  ASSERT_EQ(fit.regimes.size(), 2u);
  EXPECT_DOUBLE_EQ(fit.regimes[0].max_bytes, 8.0 * (1 << 20));
  EXPECT_DOUBLE_EQ(fit.regimes[1].min_bytes, 16.0 * (1 << 20));
  EXPECT_NEAR(fit.regimes[0].ab.bus_bandwidth_bytes_per_s, 5.6e9, 1e-6 * 5.6e9);
  EXPECT_NEAR(fit.regimes[1].ab.bus_bandwidth_bytes_per_s, 1.6e9, 1e-6 * 1.6e9);
  EXPECT_GT(fit.r2, 0.999999);
  EXPECT_LT(fit_alpha_beta(Collective::kAllReduce, 2, points).r2, 0.99);
  EXPECT_EQ(fit_alpha_beta_regimes(Collective::kAllReduce, 2, clean).regimes.size(), 1u);

  // A cost file with the regimes (and no points) times each size on its own regime's line.
  ClusterSpec cluster = *cluster_preset("local-cpu");
  cluster.collective_points.clear();
  cluster.collective_fits.clear();
  for (const auto& r : fit.regimes)
    cluster.collective_fits.push_back({to_string(Collective::kAllReduce), to_string(LinkLevel::kIntraNode), 2,
                                       r.ab.alpha_s, r.ab.bus_bandwidth_bytes_per_s, r.ab.r2, r.min_bytes,
                                       r.max_bytes});
  const CollectiveModel model(cluster);
  for (double bytes : {4096.0, 1e6, 64e6})
    EXPECT_NEAR(model.flat_time_s(Collective::kAllReduce, bytes, 2, LinkLevel::kIntraNode),
                alpha_beta_time(bytes <= 8.0 * (1 << 20) ? cache : dram, Collective::kAllReduce, 2, bytes),
                1e-6 * alpha_beta_time(dram, Collective::kAllReduce, 2, bytes))
        << bytes;
}

// sim's Collective and LinkLevel are core's: the executor's profile and the cost file name them alike.
static_assert(std::is_same_v<Collective, loom::Collective> && std::is_same_v<LinkLevel, loom::LinkLevel>);

// Every collective and link level, named by core's table in a cost file and read back, reaches the
// model: its measured time is the one the cost file holds, not the link's α–β line.
TEST(Collectives, MeasuredPointsNamedByTheTableReachTheModelThroughACostFile) {
  ClusterSpec cluster = analytic_cluster();
  for (const auto& [c, name] : kCollectiveNames)
    for (const auto& [level, level_name] : kLinkLevelNames)
      for (double bytes : {1e6, 2e6})
        cluster.collective_points.push_back({name, level_name, 2, bytes, 1.0 + bytes / 1e6});
  auto reread = cluster_from_json(to_json(cluster));
  ASSERT_TRUE(reread.ok()) << reread.error().message;
  const CollectiveModel model(*reread);
  for (const auto& [c, name] : kCollectiveNames)
    for (const auto& [level, level_name] : kLinkLevelNames)
      EXPECT_DOUBLE_EQ(model.flat_time_s(c, 1.5e6, 2, level), 2.5) << name << " " << level_name;
}

}  // namespace
}  // namespace loom::sim
