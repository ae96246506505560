// Golden output of one `loom plan` table. After an intended change, regenerate it with
//   LOOM_UPDATE_GOLDEN=1 ctest --test-dir build -R Golden
// and review the diff like any other change.
#include <cstdlib>

#include <gtest/gtest.h>

#include "run_loom.h"

namespace loom {
namespace {

TEST(Golden, PlanTableLlama2_7bOn16A100) {
  const std::string golden = std::string(LOOM_TEST_DATA_DIR) + "/cli/golden/plan_llama2_7b_16xa100.txt";
  const auto r = testing::run_loom(
      "plan --model llama2-7b --cluster dgx-a100-80gb --gpus 16 --global-batch 64 --top 12 --tokens 2e12");
  ASSERT_EQ(r.status, 0) << r.err;
  if (const char* update = std::getenv("LOOM_UPDATE_GOLDEN"); update && std::string(update) == "1") {
    std::ofstream(golden) << r.out;
    GTEST_SKIP() << "golden file rewritten: " << golden;
  }
  const std::string expected = testing::slurp(golden);
  ASSERT_FALSE(expected.empty()) << "missing " << golden << " (LOOM_UPDATE_GOLDEN=1 writes it)";
  EXPECT_EQ(r.out, expected);
}

}  // namespace
}  // namespace loom
