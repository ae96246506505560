// The pipeline split flags through the real binary: `loom sim` costs the split and shows each
// stage's layers, `loom plan` shows the split in every format and its plan files keep it, and
// bad split flags are one line with exit status 2.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/json_io.h"
#include "run_loom.h"

namespace loom {
namespace {

using testing::expect_bad_input;
using testing::run_loom;
using testing::scratch_dir;

// Llama 2 13B: 40 layers, which do not divide by pp 16 or 3.
const char* kSpec = "--model llama2-13b --gpus 16 --global-batch 64";

TEST(SplitFlags, BadSplitFlagsAreOneLineAndExitTwo) {
  const std::string sim = std::string("sim ") + kSpec;
  // (flags after `loom sim` and the spec, what the one line says)
  const std::pair<const char*, const char*> cases[] = {
      {" --pp 4 --first-stage-layers 0", "--first-stage-layers: 0 must be at least 1"},
      {" --pp 4 --first-stage-layers x", "--first-stage-layers: 'x' is not an integer"},
      {" --pp 4 --first-stage-layers 9 --account-for-loss",
       "cannot be combined with --account-for-embedding/--account-for-loss"},
      {" --pp 4 --first-stage-layers 9", "layers 40 − first stage 9 − last stage 0 = 31"},
      {" --pp 16 --account-for-embedding", "layers 40 + embedding = 41 not divisible by pp 16"},
      {" --first-stage-layers 8", "first/last stage layers need pp of at least 2"},
      {" --stage-layers 10,10,10,9", "stage layers 10x3/9 add up to 39 but llama2-13b has 40 layers"},
      {" --stage-layers 20,20 --pp 4", "stage layers 20x2 name 2 stages but pp is 4"},
      {" --stage-layers 20,20 --first-stage-layers 20",
       "--stage-layers lists every stage: it cannot be combined with --first/--last-stage-layers"},
      {" --stage-layers 20,x", "--stage-layers: 'x' is not an integer"},
      {" --stage-layers 9,11,11,9 --vpp 2", "stage 0's 9 layers not divisible by vpp 2"},
  };
  for (const auto& [flags, message] : cases) expect_bad_input(sim + flags, message);
  expect_bad_input(std::string("plan ") + kSpec + " --first-stage-layers 8,9", "--first-stage-layers takes one value");
}

// DESIGN.md's `--stage-layers a,b,...`: every stage's layers, middle stages unlike each other too; pp is
// the list's length unless given. `plan` searches that split alone and its plan file keeps it.
TEST(SplitFlags, StageLayersListEveryStageAndFixThePipelineDepth) {
  const auto r = run_loom(std::string("sim ") + kSpec + " --tp 4 --stage-layers 9,11,12,8 --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["config"]["pp"], 4);
  EXPECT_EQ(j["config"]["stage_layers"], nlohmann::json({9, 11, 12, 8}));
  EXPECT_EQ(j["model"]["name"], "llama2-13b");  // DESIGN.md's top-level model, in sim's JSON too
  EXPECT_GT(j["model"]["parameters"].get<double>(), 13e9);
  EXPECT_EQ(j["memory_per_stage_gib"][2]["layers"], 12);
  const auto even = run_loom(std::string("sim ") + kSpec + " --tp 4 --pp 4 --format json");
  ASSERT_EQ(even.status, 0) << even.err;
  // The 12-layer stage paces the pipeline: slower than 10 on every stage.
  EXPECT_GT(j["step_time_s"].get<double>(), nlohmann::json::parse(even.out)["step_time_s"].get<double>());

  const auto path = scratch_dir() / "listed_plan.json";
  const auto plan =
      run_loom(std::string("plan ") + kSpec + " --stage-layers 9,11,12,8 --format csv --emit-plan " + path.string());
  ASSERT_EQ(plan.status, 0) << plan.err;
  EXPECT_NE(plan.out.find(",9/11/12/8,"), std::string::npos) << plan.out;
  auto file = read_json_file(path.string());
  ASSERT_TRUE(file.ok()) << file.error().message;
  auto p = plan_from_json(*file);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->config.pp, 4);
  EXPECT_EQ(p->config.split.stage_layers, (std::vector<int>{9, 11, 12, 8}));
}

TEST(SplitFlags, SimCostsTheSplitAndShowsEachStagesLayers) {
  const auto r = run_loom(std::string("sim ") + kSpec + " --tp 4 --pp 4 --last-stage-layers 7 --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["config"]["stage_layers"], nlohmann::json({11, 11, 11, 7}));
  EXPECT_EQ(j["config"]["last_stage_layers"], 7);
  EXPECT_EQ(j["memory_per_stage_gib"][0]["layers"], 11);
  EXPECT_EQ(j["memory_per_stage_gib"][3]["layers"], 7);
}

TEST(SplitFlags, PlanShowsTheSplitInEveryFormatAndItsPlanFileKeepsIt) {
  // (40 + 2) / 3 = 14: 13, 14 and 13 layers on 12 GPUs at tp 4.
  const std::string spec = "--model llama2-13b --gpus 12 --global-batch 60 --tp 4 --pp 3 --vpp 1";
  const std::string split = " --account-for-embedding --account-for-loss";
  const auto table = run_loom("plan " + spec + split + " --top 1");
  ASSERT_EQ(table.status, 0) << table.err;
  EXPECT_NE(table.out.find("stage_layers"), std::string::npos);
  EXPECT_NE(table.out.find("13/14/13"), std::string::npos) << table.out;
  const auto csv = run_loom("plan " + spec + split + " --top 1 --format csv");
  EXPECT_NE(csv.out.find(",13/14/13,"), std::string::npos) << csv.out;
  const auto json = run_loom("plan " + spec + split + " --top 1 --format json");
  const auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["plans"][0]["config"]["stage_layers"], nlohmann::json({13, 14, 13}));
  EXPECT_EQ(j["plans"][0]["config"]["account_for_embedding"], true);

  const auto path = scratch_dir() / "split_plan.json";
  const auto emitted = run_loom("plan " + spec + split + " --top 1 --emit-plan " + path.string());
  ASSERT_EQ(emitted.status, 0) << emitted.err;
  auto file = read_json_file(path.string());
  ASSERT_TRUE(file.ok()) << file.error().message;
  auto p = plan_from_json(*file);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->config.split, (PipelineSplit{.account_for_embedding = true, .account_for_loss = true}));
  EXPECT_EQ((*file)["config"]["stage_layers"], Json({13, 14, 13}));
}

}  // namespace
}  // namespace loom
