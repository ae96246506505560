// Checkpoint and resume: a run stopped after step 3 and resumed from its checkpoint produces the
// same losses, bit for bit, as the run that never stopped — single rank and sharded layouts
// (ZeRO-3 shards parameters and moments per rank; pipeline stages hold different units).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "run_util.h"

namespace loom::exec::testing {
namespace {

struct Case {
  const char* name;
  int ranks;
  const char* flags;
  const char* model = "micro";
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class ExecResume : public ::testing::TestWithParam<Case> {};

TEST_P(ExecResume, GivesBitwiseIdenticalLossCurve) {
  const Case& c = GetParam();
  if (c.ranks > 1 && !have_mpirun()) GTEST_SKIP() << "built without MPI";
  const std::string dir = scratch_dir(std::string("resume_") + c.name);
  const std::string data = make_token_file(dir, 20000);
  const std::string common =
      fmt::format("--model {} --data {} --global-batch 4 --threads 1 --lr 3e-3 {}", test_model(c.model), data, c.flags);
  const ProcessResult whole =
      run_shell(fmt::format("{} {} --steps 6 --log {}/whole.jsonl", loom_run(c.ranks), common, dir));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  const ProcessResult first =
      run_shell(fmt::format("{} {} --steps 6 --checkpoint-dir {}/ckpt --save-every 3 --log {}/first.jsonl",
                            loom_run(c.ranks), common, dir, dir));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  // Keep only the step-3 checkpoint, as if the first run had died after saving it.
  std::filesystem::remove_all(dir + "/ckpt/step_00000006");
  std::ofstream(dir + "/ckpt/latest") << "step_00000003\n";
  const ProcessResult resumed = run_shell(fmt::format(
      "{} {} --steps 6 --checkpoint-dir {}/ckpt --resume --log {}/resumed.jsonl", loom_run(c.ranks), common, dir, dir));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;

  const std::vector<double> expected = losses(dir + "/whole.jsonl");
  const std::vector<double> got = losses(dir + "/resumed.jsonl");
  ASSERT_EQ(expected.size(), 6u);
  ASSERT_EQ(got.size(), 3u);                                                           // steps 4..6
  for (int i = 0; i < 3; ++i) EXPECT_EQ(got[i], expected[3 + i]) << "step " << 4 + i;  // exact, not near
  EXPECT_TRUE(std::filesystem::exists(dir + "/ckpt/step_00000003/manifest.json"));
  for (int r = 0; r < c.ranks; ++r)
    EXPECT_TRUE(std::filesystem::exists(fmt::format("{}/ckpt/step_00000003/rank_{:05d}.bin", dir, r)));
}

INSTANTIATE_TEST_SUITE_P(Layouts, ExecResume,
                         ::testing::Values(Case{"SingleRank", 1, ""}, Case{"DP2_ZeRO3", 2, "--dp 2 --zero 3"},
                                           Case{"PP2xDP2_ZeRO2", 4, "--pp 2 --dp 2 --zero 2"},
                                           Case{"DP4_HSDP2", 4, "--dp 4 --zero 3 --shard-group 2"},
                                           // Each EP rank's experts, sharded over their expert-data-parallel pair.
                                           Case{"Moe_DP4_EP2_ZeRO2", 4, "--dp 4 --ep 2 --zero 2", "micro_moe"},
                                           // ZeRO-3 shards over the dp·cp group.
                                           Case{"CP2xDP2_ZeRO3", 4, "--cp 2 --dp 2 --zero 3"}),
                         [](const auto& info) { return std::string(info.param.name); });

// A checkpoint saved under one layout (4 ranks) resumed under others: the shards are reassembled into
// full tensors and resharded, so the curve continues — within fp32 rounding of the different
// reduction orders, not bit for bit.
void expect_resume_continues(const std::string& name, const std::string& saved_flags,
                             const std::vector<std::pair<int, std::string>>& resumed_layouts,
                             const std::string& model = "micro_llama") {
  if (!have_mpirun()) GTEST_SKIP() << "built without MPI";
  const std::string dir = scratch_dir(name);
  const std::string data = make_token_file(dir, 20000);
  const std::string common =
      fmt::format("--model {} --data {} --global-batch 4 --threads 1 --lr 3e-3 --steps 6", test_model(model), data);
  const ProcessResult whole =
      run_shell(fmt::format("{} {} {} --checkpoint-dir {}/ckpt --save-every 3 --log {}/whole.jsonl", loom_run(4),
                            common, saved_flags, dir, dir));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  std::filesystem::remove_all(dir + "/ckpt/step_00000006");
  std::ofstream(dir + "/ckpt/latest") << "step_00000003\n";
  const std::vector<double> expected = losses(dir + "/whole.jsonl");
  ASSERT_EQ(expected.size(), 6u);
  for (const auto& [ranks, flags] : resumed_layouts) {
    const std::string log = fmt::format("{}/resumed{}.jsonl", dir, ranks);
    const ProcessResult resumed = run_shell(
        fmt::format("{} {} {} --checkpoint-dir {}/ckpt --resume --log {}", loom_run(ranks), common, flags, dir, log));
    ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
    const std::vector<double> got = losses(log);
    ASSERT_EQ(got.size(), 3u);
    for (int i = 0; i < 3; ++i)
      EXPECT_NEAR(got[i], expected[3 + i], 1e-5 * expected[3 + i]) << flags << " step " << 4 + i;
  }
}

TEST(ExecResumeOtherLayout, TP2xPP2CheckpointContinuesUnderDP4AndSingleRank) {
  expect_resume_continues("resume_relayout", "--tp 2 --pp 2", {{4, "--dp 4 --zero 3"}, {1, ""}});
}

// HSDP saves each shard group's shards once (dp ranks 0..g-1); they reassemble the same way.
TEST(ExecResumeOtherLayout, HSDPCheckpointContinuesUnderDP2ZeRO3AndSingleRank) {
  expect_resume_continues("resume_relayout_hsdp", "--dp 4 --zero 3 --shard-group 2", {{2, "--dp 2 --zero 3"}, {1, ""}});
}

// Expert parallelism: each EP rank's routed experts (and their ZeRO-1 shards over the expert-data-parallel
// group) reassemble into every expert's full tensors, taken up by a TP × EP layout and by one rank.
TEST(ExecResumeOtherLayout, ExpertParallelCheckpointContinuesUnderTP2xEP2AndSingleRank) {
  expect_resume_continues("resume_relayout_ep", "--dp 4 --ep 4 --zero 1",
                          {{4, "--tp 2 --dp 2 --ep 2 --sp on"}, {1, ""}}, "micro_moe");
}

// Whole experts folded over TP ranks (etp 1, EP 4 over TP 2 × DP 2) back to experts split over TP.
TEST(ExecResumeOtherLayout, ExpertTp1CheckpointContinuesUnderExpertTpEqualToTp) {
  expect_resume_continues("resume_relayout_etp", "--tp 2 --dp 2 --sp on --etp 1 --ep 4 --zero 2",
                          {{4, "--tp 2 --dp 2 --ep 2 --sp on"}, {1, ""}}, "micro_moe");
}

// Context parallelism: the weights are replicated over the CP ranks and their ZeRO shards spread over
// dp·cp; a CP checkpoint reassembles for one rank and for another CP layout, and a checkpoint without
// CP resumes under CP.
TEST(ExecResumeOtherLayout, ContextParallelCheckpointContinuesOnOneRankAndUnderCp4) {
  expect_resume_continues("resume_relayout_cp", "--cp 2 --dp 2 --zero 1", {{1, ""}, {4, "--cp 4 --zero 3"}});
}
// (The last: HSDP over dp·cp, shard groups of 2 dp ranks' 4 dp·cp ranks.)
TEST(ExecResumeOtherLayout, DataParallelCheckpointContinuesUnderCp2) {
  expect_resume_continues("resume_relayout_to_cp", "--dp 4 --zero 2",
                          {{2, "--cp 2"}, {4, "--cp 2 --tp 2 --sp on"}, {8, "--cp 2 --dp 4 --zero 3 --shard-group 2"}});
}

}  // namespace
}  // namespace loom::exec::testing
