// The search: memory filter with "OOM by X GiB on stage N", ranking by simulated step time.
#include <algorithm>

#include <gtest/gtest.h>

#include "core/json_io.h"
#include "core/presets.h"
#include "planner/report.h"
#include "planner/search.h"

namespace loom {
namespace {

TEST(Search, RanksByStepTimeAndEveryRowFits) {
  const ModelSpec m = *model_preset("llama2-7b");
  const ClusterSpec cluster = *cluster_preset("dgx-a100-80gb");
  TrainingSpec t{.gpus = 16, .global_batch = 64, .seq_len = 4096};
  auto r = search_plans(m, t, cluster, {});
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_FALSE(r->plans.empty());
  for (std::size_t i = 1; i < r->plans.size(); ++i)
    EXPECT_LE(r->plans[i - 1].metrics.step_time_s, r->plans[i].metrics.step_time_s);
  for (const auto& p : r->plans) {
    EXPECT_TRUE(p.metrics.fits);
    EXPECT_LE(p.metrics.memory_gib.total, 80.0);
    EXPECT_GT(p.metrics.mfu, 0.0);
    EXPECT_LT(p.metrics.mfu, 1.0);
    EXPECT_NEAR(p.metrics.tokens_per_s * p.metrics.step_time_s, 64.0 * 4096, 1e-6 * 64 * 4096);
  }
  EXPECT_EQ(r->simulated, r->plans.size());
}

TEST(Search, APlanRowFromADetailedSimulationIsTheSearchsRow) {
  // `loom sim` simulates once, keeping the graph for its trace, and makes its row from that.
  const ModelSpec m = *model_preset("llama2-7b");
  const ClusterSpec cluster = *cluster_preset("dgx-a100-80gb");
  TrainingSpec t{.gpus = 16, .global_batch = 64, .seq_len = 4096, .tokens = 1e12};
  ParallelConfig c;
  c.tp = 2, c.pp = 2, c.dp = 4, c.zero = 1, c.micro_batch = 1, c.schedule = Schedule::k1F1B;
  const MemoryReport memory = estimate_memory(m, t, c, cluster);
  auto searched = evaluate_config(m, t, cluster, c, memory);
  auto detailed = sim::simulate(m, t, c, cluster, detailed_sim_options(memory, c));
  ASSERT_TRUE(searched.ok() && detailed.ok());
  const PlanRow row = plan_row(*detailed, memory, t);
  EXPECT_EQ(to_json(row.metrics), to_json(searched->metrics));
  EXPECT_EQ(row.config, c);
  EXPECT_EQ(row.micro_batches, searched->micro_batches);
  EXPECT_EQ(row.limited_by, searched->limited_by);
  EXPECT_GT(row.days_to_train, 0.0);
  EXPECT_DOUBLE_EQ(row.days_to_train, searched->days_to_train);
}

TEST(Search, OutOfMemoryIsExplained) {
  const ModelSpec m = *model_preset("gpt3-175b");
  const ClusterSpec cluster = *cluster_preset("dgx-a100-80gb");
  TrainingSpec t{.gpus = 8, .global_batch = 8, .seq_len = 2048};
  auto r = search_plans(m, t, cluster, {});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->plans.empty());  // 175B needs ~2.8 TB of model states: never fits on 8 GPUs
  const bool explained = std::any_of(r->rejected.begin(), r->rejected.end(), [](const Rejection& x) {
    return x.rule == "out of memory" && x.reason.rfind("OOM by ", 0) == 0 &&
           x.reason.find(" GiB on stage ") != std::string::npos;
  });
  EXPECT_TRUE(explained);
  const std::string text = format_rejections(*r, 2);
  EXPECT_NE(text.find("out of memory ("), std::string::npos) << text;
}

TEST(Search, JsonHasTheDesignFields) {
  const ModelSpec m = *model_preset("llama2-7b");
  const ClusterSpec cluster = *cluster_preset("dgx-h100");
  TrainingSpec t{.gpus = 8, .global_batch = 32, .seq_len = 4096};
  auto r = search_plans(m, t, cluster, {});
  ASSERT_TRUE(r.ok());
  const Json j = format_json(m, *r, 3);
  ASSERT_EQ(j["plans"].size(), 3u);
  for (const char* key : {"config", "step_time_s", "tokens_per_s", "tflops_per_gpu", "hw_tflops_per_gpu", "mfu",
                          "bubble_fraction", "exposed_comm_s", "fits", "memory_gib"})
    EXPECT_TRUE(j["plans"][0].contains(key)) << key;
  for (const char* key : {"params", "grads", "optimizer", "activations", "buffers", "total"})
    EXPECT_TRUE(j["plans"][0]["memory_gib"].contains(key)) << key;
  for (const char* key : {"tp", "pp", "dp", "zero", "micro_batch", "vpp", "recompute", "sequence_parallel", "schedule"})
    EXPECT_TRUE(j["plans"][0]["config"].contains(key)) << key;
  EXPECT_TRUE(j["rejected"].is_array());
  // DESIGN.md: the model at the top level, with its total and active parameters.
  EXPECT_EQ(j["model"]["name"], "llama2-7b");
  EXPECT_EQ(j["model"]["parameters"].get<std::int64_t>(), m.total_params());
  EXPECT_EQ(j["model"]["active_parameters"].get<std::int64_t>(), m.total_params());  // dense: every parameter
  EXPECT_EQ(j["model"]["layers"], 32);
  ModelSpec moe = m;
  moe.moe.experts = 8;
  moe.moe.experts_per_token = 2;
  moe.moe.expert_ffn = m.ffn_hidden;
  const Json mj = model_summary_json(moe);
  EXPECT_LT(mj["active_parameters"].get<std::int64_t>(), mj["parameters"].get<std::int64_t>());
  EXPECT_EQ(mj["active_parameters"].get<std::int64_t>(), moe.active_params());
}

}  // namespace
}  // namespace loom
