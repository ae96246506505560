// bf16 mixed precision emulated on the CPU (`loom run --backend cpu-bf16`): the model code and the
// parallel layers in bf16 with fp32 master weights, moments and main gradients give the fp32 loss curve
// within bf16 tolerance on one rank and under mpirun, charge 2 + 4 + 12 bytes per parameter and bf16
// activations as the planner's memory model says, and checkpoint the fp32 master across backends.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "core/presets.h"
#include "planner/memory_model.h"
#include "run_util.h"

namespace loom::exec::testing {
namespace {

constexpr int kSteps = 12;
// bf16 keeps 8 significant bits: one rounding moves a value by up to 2^-9 ≈ 2e-3 relative. The loss is a
// mean over every token of the batch, so the per-value roundings of activations and weights average out
// instead of adding up, and the fp32 master keeps Adam's small updates: the curve stays within one bf16
// rounding of the fp32 one (measured: about 2.3e-4 relative at most over 12 steps on every layout here).
constexpr double kBf16Tolerance = 2e-3;

std::string data_file() {
  static const std::string data = make_token_file(scratch_dir("bf16_data"), 20000);
  return data;
}

std::vector<double> train(int ranks, const std::string& backend, const std::string& flags, const std::string& tag,
                          const std::string& model = "micro") {
  const std::string log = fmt::format("{}/{}.jsonl", scratch_dir("bf16_run"), tag);
  const ProcessResult r = run_shell(fmt::format(
      "{} --model {} --data {} --steps {} --global-batch 8 --micro-batch 1 --threads 1 --lr 3e-3 --warmup 2 "
      "--backend {} {} --log {}",
      loom_run(ranks), test_model(model), data_file(), kSteps, backend, flags, log));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return losses(log);
}

const std::vector<double>& fp32_curve(const std::string& model) {
  static std::map<std::string, std::vector<double>> curves;
  auto it = curves.find(model);
  if (it == curves.end()) it = curves.emplace(model, train(1, "cpu", "", "fp32_" + model, model)).first;
  return it->second;
}

using Layout = RunLayout;

class Bf16Emulation : public ::testing::TestWithParam<Layout> {};

TEST_P(Bf16Emulation, TrainsTheFp32LossCurveWithinBf16Tolerance) {
  const Layout& l = GetParam();
  if (l.ranks > 1 && !have_mpirun()) GTEST_SKIP() << "built without MPI: multi-rank layouts not run";
  const std::vector<double>& expected = fp32_curve(l.model);
  const std::vector<double> got = train(l.ranks, "cpu-bf16", l.flags, l.name, l.model);
  ASSERT_EQ(expected.size(), static_cast<std::size_t>(kSteps));
  ASSERT_EQ(got.size(), expected.size());
  double largest = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], expected[i], kBf16Tolerance * expected[i]) << l.name << " step " << i + 1;
    largest = std::max(largest, std::fabs(got[i] / expected[i] - 1));
  }
  // The emulation really rounds: the curve is not the fp32 one.
  EXPECT_GT(largest, 1e-6) << l.name;
  EXPECT_LT(got.back(), got.front() - 0.05) << l.name;
  std::printf("%-12s largest relative gap to fp32: %.2e\n", l.name, largest);
}

INSTANTIATE_TEST_SUITE_P(Layouts, Bf16Emulation,
                         ::testing::Values(Layout{"SingleRank", 1, ""}, Layout{"TP2_SP", 2, "--tp 2 --sp on"},
                                           Layout{"PP2", 2, "--pp 2"}, Layout{"DP2_ZeRO3", 2, "--dp 2 --zero 3"},
                                           Layout{"Selective", 1, "--recompute selective"},
                                           // bf16 rows through the dispatch and combine all-to-alls.
                                           Layout{"Moe_DP2_EP2", 2, "--dp 2 --ep 2", "micro_moe"},
                                           // Ring attention's blocks and travelling dK, dV in bf16.
                                           Layout{"CP2", 2, "--cp 2"}, Layout{"CP2_Llama", 2, "--cp 2", "micro_llama"},
                                           // The other kinds' gathers, reduce-scatters and all-to-alls in bf16.
                                           Layout{"CP2_AllGather", 2, "--cp 2 --cp-comm all_gather"},
                                           Layout{"CP2_A2A", 2, "--cp 2 --cp-comm a2a"}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Bf16Emulation, MemoryFollowsTheMixedPrecisionMemoryModel) {
  const std::string dir = scratch_dir("bf16_memory");
  const std::string log = dir + "/log.jsonl";
  const ProcessResult r = run_shell(
      fmt::format("{} --model {} --data {} --steps 2 --global-batch 8 --threads 1 --backend cpu-bf16 --log {}",
                  loom_run(1), test_model("micro"), data_file(), log));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<Json> records = read_jsonl(log);
  ASSERT_FALSE(records.empty());
  ASSERT_EQ(records.back()["event"], "memory_peaks");
  const ModelSpec spec = *model_from_json(*read_json_file(test_model("micro")));
  const TrainingSpec training{.gpus = 1,
                              .global_batch = 8,
                              .seq_len = spec.seq_len,
                              .param_bytes = 2,
                              .grad_bytes = 4,
                              .optimizer_bytes = 12,
                              .activation_bytes = 2,
                              .attention = AttentionKernel::kUnfused};
  const StageMemory expected =
      estimate_memory(spec, training, ParallelConfig{}, *cluster_preset("local-cpu")).stages.front();
  const Json& measured = records.back()["ranks"][0]["memory_peak_gib"];
  const std::pair<const char*, double> categories[] = {{"params", expected.params_bytes},
                                                       {"grads", expected.grads_bytes},
                                                       {"optimizer", expected.optimizer_bytes},
                                                       {"activations", expected.activations_bytes}};
  for (const auto& [name, bytes] : categories)
    EXPECT_NEAR(measured[name].get<double>() * (1 << 30), bytes, 0.05 * bytes) << name;
}

// The parameters a shard holds (its first array), read as fp32.
std::vector<float> shard_parameters(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(8 + 3 * sizeof(std::int64_t));
  std::int64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), sizeof(n));
  std::vector<float> values(static_cast<std::size_t>(n));
  in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(n * sizeof(float)));
  return values;
}

bool any_beyond_bf16(const std::vector<float>& values) {
  for (float v : values) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &v, sizeof(bits));
    if ((bits & 0xFFFFu) != 0) return true;
  }
  return false;
}

class Bf16Checkpoint : public ::testing::TestWithParam<Layout> {};

// A cpu-bf16 checkpoint holds the fp32 master: resuming on cpu-bf16 continues bit for bit, resuming on
// cpu (fp32) continues within bf16 tolerance, and the cpu run's checkpoint resumes on cpu-bf16 again.
TEST_P(Bf16Checkpoint, HoldsTheFp32MasterAndResumesOnEitherBackend) {
  const Layout& l = GetParam();
  if (l.ranks > 1 && !have_mpirun()) GTEST_SKIP() << "built without MPI";
  const std::string dir = scratch_dir(std::string("bf16_ckpt_") + l.name);
  const std::string common = fmt::format("--model {} --data {} --global-batch 4 --threads 1 --lr 3e-3 {}",
                                         test_model("micro"), data_file(), l.flags);
  auto run = [&](const std::string& backend, int steps, const std::string& extra, const std::string& tag) {
    const ProcessResult r = run_shell(fmt::format("{} {} --backend {} --steps {} {} --log {}/{}.jsonl",
                                                  loom_run(l.ranks), common, backend, steps, extra, dir, tag));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return losses(fmt::format("{}/{}.jsonl", dir, tag));
  };
  // Runs of 6 steps (the learning-rate schedule spans --steps) cut short by keeping one checkpoint.
  auto keep_only = [&](const std::string& ckpt, int step) {
    for (int later = step + 2; later <= 6; later += 2)
      std::filesystem::remove_all(fmt::format("{}/{}/step_{:08d}", dir, ckpt, later));
    std::ofstream(fmt::format("{}/{}/latest", dir, ckpt)) << fmt::format("step_{:08d}\n", step);
  };
  const std::vector<double> whole = run("cpu-bf16", 6, "", "whole");
  run("cpu-bf16", 6, fmt::format("--checkpoint-dir {}/a --save-every 2", dir), "first");
  keep_only("a", 2);
  EXPECT_TRUE(any_beyond_bf16(shard_parameters(dir + "/a/step_00000002/rank_00000.bin")))
      << "the checkpoint holds parameters rounded to bf16, not the fp32 master";
  std::filesystem::copy(dir + "/a", dir + "/b", std::filesystem::copy_options::recursive);

  const std::vector<double> same = run("cpu-bf16", 6, fmt::format("--checkpoint-dir {}/a --resume", dir), "same");
  ASSERT_EQ(whole.size(), 6u);
  ASSERT_EQ(same.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(same[i], whole[2 + i]) << "bf16 resumed, step " << 3 + i;  // exact

  const std::vector<double> fp32 =
      run("cpu", 6, fmt::format("--checkpoint-dir {}/b --resume --save-every 2", dir), "fp32");
  ASSERT_EQ(fp32.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(fp32[i], whole[2 + i], kBf16Tolerance * whole[2 + i]) << "step " << 3 + i;
  keep_only("b", 4);
  const std::vector<double> back = run("cpu-bf16", 6, fmt::format("--checkpoint-dir {}/b --resume", dir), "back");
  ASSERT_EQ(back.size(), 2u);
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(back[i], whole[4 + i], kBf16Tolerance * whole[4 + i]) << "step " << 5 + i;
}

INSTANTIATE_TEST_SUITE_P(Layouts, Bf16Checkpoint,
                         ::testing::Values(Layout{"SingleRank", 1, ""}, Layout{"DP2_ZeRO1", 2, "--dp 2 --zero 1"},
                                           Layout{"DP2_ZeRO3", 2, "--dp 2 --zero 3"}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace loom::exec::testing
