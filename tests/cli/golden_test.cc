// Golden outputs of the machine-readable and human-readable formats: one `loom plan` table, one
// `loom sim --format json` object and one `loom sim --trace` per pipeline schedule. After an
// intended change, regenerate them with
//   LOOM_UPDATE_GOLDEN=1 ctest --test-dir build -R Golden
// and review the diff like any other change.
#include <cstdlib>

#include <gtest/gtest.h>

#include "run_loom.h"

namespace loom {
namespace {

bool updating() {
  const char* update = std::getenv("LOOM_UPDATE_GOLDEN");
  return update != nullptr && std::string(update) == "1";
}

// Compares `actual` with the golden file `name` (or rewrites it when updating).
void expect_golden(const std::string& name, const std::string& actual) {
  const std::string golden = std::string(LOOM_TEST_DATA_DIR) + "/cli/golden/" + name;
  if (updating()) {
    std::ofstream(golden) << actual;
    GTEST_SKIP() << "golden file rewritten: " << golden;
  }
  const std::string expected = testing::slurp(golden);
  ASSERT_FALSE(expected.empty()) << "missing " << golden << " (LOOM_UPDATE_GOLDEN=1 writes it)";
  EXPECT_EQ(actual, expected) << "differs from " << golden;
}

TEST(Golden, PlanTableLlama2_7bOn16A100) {
  const auto r = testing::run_loom(
      "plan --model llama2-7b --cluster dgx-a100-80gb --gpus 16 --global-batch 64 --top 12 --tokens 2e12");
  ASSERT_EQ(r.status, 0) << r.err;
  expect_golden("plan_llama2_7b_16xa100.txt", r.out);
}

TEST(Golden, SimJsonLlama2_7bOn16A100) {
  const auto r = testing::run_loom(
      "sim --model llama2-7b --cluster dgx-a100-80gb --gpus 16 --global-batch 64 --tp 2 --pp 2 --dp 4 --zero 1 "
      "--micro-batch 2 --recompute selective --sp on --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  expect_golden("sim_llama2_7b_16xa100.json", r.out);
}

// One trace per schedule: a 2-stage pipeline of a small model, 4 micro-batches, so each file
// stays small enough to review while still showing warm-up, steady state and cool-down.
struct TraceCase {
  const char* schedule;
  const char* flags;
};

class GoldenTrace : public ::testing::TestWithParam<TraceCase> {};

TEST_P(GoldenTrace, SimTraceOfEachScheduleIsUnchanged) {
  const TraceCase& c = GetParam();
  const auto trace = testing::scratch_dir() / (std::string("golden_trace_") + c.schedule + ".json");
  const auto r = testing::run_loom(
      std::string("sim --model gpt-tiny --cluster dgx-a100-80gb --gpus 4 --global-batch 8 --tp 2 --pp 2 --dp 1 "
                  "--micro-batch 2 --schedule ") +
      c.schedule + " " + c.flags + " --trace " + trace.string());
  ASSERT_EQ(r.status, 0) << r.err;
  expect_golden(std::string("trace_gpt_tiny_") + c.schedule + ".json", testing::slurp(trace));
}

INSTANTIATE_TEST_SUITE_P(Schedules, GoldenTrace,
                         ::testing::Values(TraceCase{"gpipe", ""}, TraceCase{"1f1b", ""},
                                           TraceCase{"interleaved", "--vpp 2"}, TraceCase{"zb", ""}),
                         [](const auto& info) { return std::string(info.param.schedule); });

}  // namespace
}  // namespace loom
