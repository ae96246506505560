// `--cp` and `--cp-comm` as users see them: bad values are one line and exit 2, `loom run` takes every
// kind of context parallelism, and plan/sim outputs carry cp.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "run_loom.h"

namespace loom {
namespace {

using testing::expect_bad_input;
using testing::run_loom;
using testing::scratch_dir;

TEST(CliContextParallel, BadCpValuesAreOneLineAndExitTwo) {
  const std::string spec = "--model llama2-7b --cluster dgx-h100 --gpus 16 --global-batch 64";
  expect_bad_input("plan " + spec + " --cp 0", "--cp");
  expect_bad_input("sim " + spec + " --cp 0", "--cp");
  expect_bad_input("plan " + spec + " --cp-comm bogus", "--cp-comm: unknown value 'bogus'");
  expect_bad_input("sim " + spec + " --cp 2 --cp-comm bogus", "--cp-comm: unknown value 'bogus'");
  // 4096 tokens do not cut into 2·3 chunks.
  const std::string six = "--model llama2-7b --cluster dgx-h100 --gpus 6 --global-batch 6 --seq 4096";
  expect_bad_input("sim " + six + " --cp 3", "sequence 4096 not divisible by 2·cp = 6");
  expect_bad_input("plan " + six + " --cp 3", "sequence 4096 not divisible by 2·cp = 6");
  // tp·cp·pp·dp must be the GPU count.
  expect_bad_input("sim " + spec + " --cp 2 --dp 16", "tp 1 × cp 2 × pp 1 × dp 16 = 32 but --gpus is 16");
  // Without --dp, cp 2 on one GPU leaves no data-parallel size to name.
  expect_bad_input("run --model gpt-tiny --cp 2 --data /nonexistent.bin --steps 1",
                   "tp 1 × cp 2 × pp 1 = 2 ranks per data-parallel replica do not divide --gpus 1");
  // The all-to-all needs llama2-7b's 32 heads over tp·cp ranks: 64 is too many.
  expect_bad_input(
      "sim --model llama2-7b --cluster dgx-h100 --gpus 64 --global-batch 64 --seq 8192 --tp 8 --cp 8 "
      "--cp-comm a2a",
      "a2a context parallelism needs heads 32 and kv_heads 32 divisible by tp·cp = 64");
}

TEST(CliContextParallel, RunTakesEveryCpKindAndCountsCpInTheLaunchedRanks) {
  // Every kind runs: on one launched rank what is wrong is the world size.
  for (const std::string kind : {"p2p", "all_gather", "a2a"})
    expect_bad_input("run --model gpt-tiny --gpus 2 --cp 2 --cp-comm " + kind + " --data /nonexistent.bin --steps 1",
                     "the plan needs tp 1 × cp 2 × pp 1 × dp 1 = 2 ranks but 1 were launched");
  // From a plan file that loom plan wrote.
  const auto plan = scratch_dir() / "cp_plan.json";
  const auto r = run_loom(
      "plan --model gpt-tiny --cluster dgx-h100 --gpus 2 --global-batch 2 --cp 2 --cp-comm a2a --top 1 --emit-plan " +
      plan.string());
  ASSERT_EQ(r.status, 0) << r.err;
  expect_bad_input("run --plan " + plan.string() + " --data /nonexistent.bin --steps 1",
                   "the plan needs tp 1 × cp 2 × pp 1 × dp 1 = 2 ranks but 1 were launched");
}

TEST(CliContextParallel, PlanWithCp2ShowsCp2Rows) {
  const std::string spec = "plan --model llama2-7b --cluster dgx-h100 --gpus 16 --global-batch 64 --seq 8192 --cp 2";
  const auto csv = run_loom(spec + " --format csv --top 5");
  ASSERT_EQ(csv.status, 0) << csv.err;
  std::istringstream lines(csv.out);
  std::string line;
  std::getline(lines, line);
  ASSERT_EQ(line.rfind("rank,TP,CP,PP,DP,", 0), 0u) << line;
  int rows = 0;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    ++rows;
    // rank, TP, then CP.
    const auto first = line.find(','), second = line.find(',', first + 1), third = line.find(',', second + 1);
    EXPECT_EQ(line.substr(second + 1, third - second - 1), "2") << line;
  }
  EXPECT_EQ(rows, 5);

  const auto table = run_loom(spec + " --top 3");
  ASSERT_EQ(table.status, 0) << table.err;
  EXPECT_NE(table.out.find(" CP "), std::string::npos) << table.out;

  const auto json = run_loom(spec + " --format json --top 3");
  ASSERT_EQ(json.status, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  ASSERT_EQ(j["plans"].size(), 3u);
  for (const auto& p : j["plans"]) {
    EXPECT_EQ(p["config"]["cp"], 2);
    EXPECT_EQ(p["config"]["cp_comm"], "p2p");
    EXPECT_TRUE(p["exposed_comm"].contains("cp_s"));
  }
}

TEST(CliContextParallel, SimJsonAndTraceCarryCp) {
  const auto trace = scratch_dir() / "cp_trace.json";
  const auto r = run_loom(
      "sim --model llama3-8b --cluster dgx-h100 --gpus 16 --global-batch 16 --seq 32768 --tp 2 --cp 4 "
      "--recompute full --format json --trace " +
      trace.string());
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["config"]["cp"], 4);
  EXPECT_EQ(j["config"]["dp"], 2);
  EXPECT_TRUE(j["exposed_comm"].contains("cp_s"));
  const std::string text = testing::slurp(trace);
  for (const char* name :
       {"flash_attention ring 4/4", "send_recv cp ring 3/4 kv", "send_recv cp ring 2/4 kv+dkv", "\"cp comm\""})
    EXPECT_NE(text.find(name), std::string::npos) << name;
}

}  // namespace
}  // namespace loom
