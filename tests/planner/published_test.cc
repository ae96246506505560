// Simulator accuracy on published runs: Korthikanti et al. 2022, Table 5 (8 iteration times on
// DGX A100 nodes). The bar, which this test holds: ≤ 3 % mean and ≤ 6 % max |error|
// (reached: 2.4 % mean, 5.3 % max; the 22B rows, one micro-batch of 4 × 2048 tokens without a
// pipeline, are the worst — see the README's accuracy section). Narayanan et al. 2021, Table 1
// (10 weak-scaling runs on 32–3,072 A100s) under --framework megatron-lm-2021.
#include <cmath>

#include <gtest/gtest.h>

#include "core/presets.h"
#include "planner/published.h"

namespace loom {
namespace {

TEST(Published, KorthikantiTable5) {
  const ClusterSpec cluster = *cluster_preset("dgx-a100-80gb");
  auto rows = reproduce_korthikanti_table5(std::string(LOOM_VALIDATION_DIR) + "/korthikanti2022.json", cluster);
  ASSERT_TRUE(rows.ok()) << rows.error().message;
  ASSERT_EQ(rows->size(), 8u);
  double sum = 0, worst = 0;
  for (const auto& r : *rows) {
    sum += std::abs(r.error());
    worst = std::max(worst, std::abs(r.error()));
  }
  const double mean = sum / rows->size();
  RecordProperty("mean_abs_error_percent", std::to_string(100 * mean));
  RecordProperty("max_abs_error_percent", std::to_string(100 * worst));
  EXPECT_LE(mean, 0.03) << "mean |error| " << 100 * mean << " %";
  EXPECT_LE(worst, 0.06) << "max |error| " << 100 * worst << " %";
  // Full recompute must cost more than sequence parallelism + selective recompute, as measured.
  for (std::size_t i = 0; i < 4; ++i) EXPECT_GT((*rows)[i].predicted_s, (*rows)[i + 4].predicted_s);
}

// The bar for these rows is 5 % mean, 10 % max |error|, not met yet: under the 2021
// software's behaviours Loom reaches 8.1 % mean and 11.5 % max, every row still too fast (the
// README's accuracy section). This holds what is reached, so a change that loses it fails here.
TEST(Published, NarayananTable1UnderTheSoftwareThatRanIt) {
  const ClusterSpec cluster = *cluster_preset("dgx-a100-80gb");
  const std::string file = std::string(LOOM_VALIDATION_DIR) + "/narayanan2021_table1.json";
  auto rows = reproduce_narayanan_table1(file, cluster, "megatron-lm-2021");
  ASSERT_TRUE(rows.ok()) << rows.error().message;
  ASSERT_EQ(rows->size(), 10u);
  double sum = 0, worst = 0;
  for (const auto& r : *rows) {
    sum += std::abs(r.error());
    worst = std::max(worst, std::abs(r.error()));
    // What the 2021 stack ran: no distributed optimizer, no SP, 1F1B or interleaved 1F1B.
    EXPECT_EQ(r.config.zero, 0) << r.model;
    EXPECT_FALSE(r.config.sequence_parallel) << r.model;
    EXPECT_TRUE(r.config.schedule == Schedule::k1F1B || r.config.schedule == Schedule::kInterleaved) << r.model;
    EXPECT_EQ(r.config.recompute, Recompute::kFull) << r.model;
  }
  // The unpublished settings span more than the error: with the published TP and PP, the slowest
  // configuration that fits is slower than the published time for 9 of the 10 rows. The 1T model
  // (pp 64) ran 2.4 % slower than any setting Loom costs, so some cost is missing there whatever was run.
  int inside = 0;
  for (const auto& r : *rows) {
    EXPECT_LE(r.predicted_s, r.slowest_s) << r.model;
    EXPECT_FALSE(r.slowest_setting.empty()) << r.model;
    inside += r.published_s <= r.slowest_s;
    EXPECT_LE(r.published_s, 1.03 * r.slowest_s) << r.model << ": slowest " << r.slowest_setting;
  }
  EXPECT_GE(inside, 9);
  EXPECT_NEAR(rows->back().published_s / rows->back().slowest_s, 1.024, 0.005) << rows->back().model;
  const double mean = sum / rows->size();
  RecordProperty("mean_abs_error_percent", std::to_string(100 * mean));
  RecordProperty("max_abs_error_percent", std::to_string(100 * worst));
  EXPECT_LE(mean, 0.09) << "mean |error| " << 100 * mean << " %";
  EXPECT_LE(worst, 0.125) << "max |error| " << 100 * worst << " %";

  // Each behaviour of the 2021 stack costs time the current one hides: the same rows under
  // megatron-core (overlapped reductions, async TP, flash attention) come out faster.
  auto current = reproduce_narayanan_table1(file, cluster, "megatron-core");
  ASSERT_TRUE(current.ok()) << current.error().message;
  for (std::size_t i = 0; i < rows->size(); ++i) EXPECT_LT((*current)[i].predicted_s, (*rows)[i].predicted_s);
  EXPECT_FALSE(reproduce_narayanan_table1(file, cluster, "megatron-lm-2019").ok());
}

}  // namespace
}  // namespace loom
