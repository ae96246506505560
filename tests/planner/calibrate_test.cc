// `loom calibrate --trace`'s fit on passes whose true corrections are known: the measured passes
// are the simulator's own under a cost file whose GEMM timings were scaled, differently for the
// timings taken with one rank and with two ranks running. The fit must find each factor from the
// runs that read those timings, and leave the other concurrency's timings to the nearest fit when
// no run reads them.
#include <gtest/gtest.h>

#include "core/json_io.h"
#include "core/presets.h"
#include "planner/calibrate.h"
#include "sim/collectives.h"
#include "sim/cost_model.h"

namespace loom {
namespace {

// A measured-looking cost file: one GEMM table per concurrency (two ranks slow each other 25 %).
ClusterSpec two_rank_host() {
  ClusterSpec c = *cluster_preset("local-cpu");
  c.gpus_per_node = 2;
  c.gemm_table.clear();
  for (int ranks : {1, 2}) {
    const double rate = ranks == 1 ? 50e9 : 40e9;  // FLOP/s
    for (std::int64_t m : {64, 256, 1024})
      for (std::int64_t n : {64, 256, 1024})
        for (std::int64_t k : {64, 256, 1024}) c.gemm_table.push_back({m, n, k, 2.0 * m * n * k / rate, ranks});
  }
  return c;
}

// The run's passes as `truth` predicts them, in the form a trace gives them.
TraceRun traced(const ClusterSpec& truth, int dp, int micro_batch) {
  TraceRun r;
  r.model = *model_preset("gpt-tiny");
  r.config.dp = dp;
  r.config.micro_batch = micro_batch;
  r.training.gpus = dp;
  r.training.global_batch = 8;
  r.training.seq_len = r.model.seq_len;
  use_fp32_precision(r.training);
  r.training.attention = AttentionKernel::kUnfused;
  const sim::CollectiveModel collectives(truth);
  sim::CostModel cost(r.model, r.training, r.config, truth, collectives);
  const sim::ChunkCost chunk = cost.chunk(0, 0, false);
  r.measured.forward_s[0] = chunk.forward.seconds;
  r.measured.backward_s[0] = chunk.backward.seconds;
  r.measured.optimizer_s = cost.optimizer_s(cost.stage_params(0));
  return r;
}

ClusterSpec scaled(const ClusterSpec& c, double one_rank, double two_ranks) {
  ClusterSpec s = c;
  for (auto& p : s.gemm_table) p.seconds *= p.ranks == 1 ? one_rank : two_ranks;
  return s;
}

TEST(CalibrateTraces, EachConcurrencyIsFittedByTheRunsThatReadIt) {
  const ClusterSpec profile = two_rank_host();
  const ClusterSpec truth = scaled(profile, 1.2, 1.7);
  const std::vector<TraceRun> runs = {traced(truth, 1, 2), traced(truth, 1, 8), traced(truth, 2, 4)};
  ASSERT_EQ(sim::table_concurrency(profile, 1), 1);
  ASSERT_EQ(sim::table_concurrency(profile, 2), 2);
  auto fit = fit_trace_corrections(runs, profile);
  ASSERT_TRUE(fit.ok()) << fit.error().message;
  ASSERT_EQ(fit->groups.size(), 2u);
  EXPECT_EQ(fit->groups[0].ranks, 1);
  EXPECT_NEAR(fit->groups[0].gemm_scale, 1.2, 1e-6);
  EXPECT_EQ(fit->groups[1].ranks, 2);
  EXPECT_NEAR(fit->groups[1].gemm_scale, 1.7, 1e-6);
  // Only GEMMs were off: the memory-bound efficiency stays what it was.
  for (const auto& g : fit->groups)
    EXPECT_NEAR(g.memory_bound_efficiency, profile.compute.memory_bound_efficiency,
                1e-6 * profile.compute.memory_bound_efficiency);
  EXPECT_EQ(fit->groups[0].passes, 6u);  // F, B, optimizer of two runs
  EXPECT_EQ(fit->groups[1].passes, 3u);
  EXPECT_NEAR(fit->gemm_scale, 1.2, 1e-6);  // the group with the most passes
  EXPECT_GT(fit->mean_abs_error_before, 0.05);
  EXPECT_LT(fit->mean_abs_error_after, 1e-6);

  const ClusterSpec corrected = apply_correction(profile, *fit);
  for (std::size_t i = 0; i < profile.gemm_table.size(); ++i)
    EXPECT_NEAR(corrected.gemm_table[i].seconds / profile.gemm_table[i].seconds,
                profile.gemm_table[i].ranks == 1 ? 1.2 : 1.7, 1e-6);
  EXPECT_EQ(corrected.provenance.at("calibration_gemm_scale_ranks2"), "1.7000");
}

TEST(CalibrateTraces, TimingsNoRunReadsTakeTheNearestFit) {
  const ClusterSpec profile = two_rank_host();
  const ClusterSpec truth = scaled(profile, 1.3, 2.0);
  // Single-rank traces only: they cannot see the two-rank slowdown, so the two-rank timings move
  // with the one-rank fit (the measured 25 % between them is kept).
  auto fit = fit_trace_corrections({traced(truth, 1, 2), traced(truth, 1, 8)}, profile);
  ASSERT_TRUE(fit.ok()) << fit.error().message;
  ASSERT_EQ(fit->groups.size(), 1u);
  EXPECT_NEAR(fit->gemm_scale, 1.3, 1e-6);
  const ClusterSpec corrected = apply_correction(profile, *fit);
  for (std::size_t i = 0; i < profile.gemm_table.size(); ++i)
    EXPECT_NEAR(corrected.gemm_table[i].seconds / profile.gemm_table[i].seconds, 1.3, 1e-6);
  EXPECT_EQ(corrected.provenance.count("calibration_gemm_scale_ranks2"), 0u);
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// Ops with an efficiency of their own move with the fitted memory-bound efficiency, by the same
// factor (capped at the full bandwidth).
TEST(CalibrateTraces, OpsWithTheirOwnEfficiencyMoveWithTheFit) {
  ClusterSpec cluster = *cluster_preset("dgx-a100-80gb");
  cluster.compute.memory_bound_efficiency = 0.8;
  cluster.compute.memory_op_efficiency = {{"softmax", 0.5}, {"gelu", 0.9}};
  CostCorrection c;
  c.gemm_scale = 1.0;
  c.memory_bound_efficiency = 0.4;
  ClusterSpec corrected = apply_correction(cluster, c);
  EXPECT_DOUBLE_EQ(corrected.compute.memory_bound_efficiency, 0.4);
  EXPECT_DOUBLE_EQ(corrected.compute.memory_op_efficiency.at("softmax"), 0.25);
  EXPECT_DOUBLE_EQ(corrected.compute.memory_op_efficiency.at("gelu"), 0.45);
  c.memory_bound_efficiency = 1.0;
  corrected = apply_correction(cluster, c);
  EXPECT_DOUBLE_EQ(corrected.compute.memory_op_efficiency.at("gelu"), 1.0);
}

// A fit faster than the stated bandwidth (efficiency above 1) moves the measured ops by all of
// it, and the written file states the full bandwidth: loom reads back what calibrate writes.
TEST(CalibrateTraces, AFitAboveTheFullBandwidthStillWritesAValidFile) {
  ClusterSpec cluster = *cluster_preset("local-cpu");
  cluster.compute.memory_bound_efficiency = 0.6;
  cluster.memory_op_table = {{"gelu", 1e6, 1e-3}};
  CostCorrection c;
  c.gemm_scale = 1.0;
  c.memory_bound_efficiency = 1.2;
  const ClusterSpec corrected = apply_correction(cluster, c);
  EXPECT_DOUBLE_EQ(corrected.compute.memory_bound_efficiency, 1.0);
  EXPECT_DOUBLE_EQ(corrected.memory_op_table.front().seconds, 1e-3 * 0.6 / 1.2);
  auto reread = cluster_from_json(to_json(corrected));
  EXPECT_TRUE(reread.ok()) << reread.error().message;
}

}  // namespace
}  // namespace loom
