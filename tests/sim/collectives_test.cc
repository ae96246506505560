// Collective cost: the nccl-tests α–β forms, the fit to measured A100 all-reduce times, and the
// hierarchical composition across nodes.
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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
  const double ring_small = 2.0 * (n - 1) * c.inter_node.latency_s + 2.0 * (n - 1) / n * 1e3 / c.inter_node.bandwidth_bytes_per_s;
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

}  // namespace
}  // namespace loom::sim
