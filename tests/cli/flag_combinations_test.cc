// Random combinations of `loom sim` and `loom plan` flags, drawn from a fixed seed so a failure
// replays: every one ends as DESIGN.md says a run ends. An answer exits 0 with output; bad input
// (an impossible or unsupported combination) exits 2 with one line on stderr and nothing on
// stdout; "nothing fits" is an answer: exit 0, its one line naming the memory it does not fit in. Anything
// else — exit 1 (Loom's own failure), a crash, a
// sanitizer report, an internal failure, a refusal of several lines — fails with the command line.
// The flags and values are the ones users combine, legal and illegal together: most draws are
// refused, which exercises the legality rules as much as the simulator.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_loom.h"

namespace loom {
namespace {

using testing::run_loom;

std::string hf(const char* name) { return std::string(LOOM_VALIDATION_DIR) + "/hf_configs/" + name; }

struct Choice {
  const char* flag;
  std::vector<const char*> values;
};

const std::vector<Choice>& choices() {
  static const std::vector<Choice> c = {
      {"--tp", {"1", "2", "4", "8", "3"}},
      {"--pp", {"1", "2", "3", "4"}},
      {"--cp", {"1", "2", "4"}},
      {"--ep", {"1", "2", "4", "8"}},
      {"--zero", {"0", "1", "2", "3"}},
      {"--micro-batch", {"1", "2", "3", "4"}},
      {"--vpp", {"1", "2", "3"}},
      {"--recompute", {"none", "selective", "full", "op"}},
      {"--sp", {"on", "off"}},
      {"--schedule", {"gpipe", "1f1b", "interleaved", "zb"}},
      {"--precision", {"bf16", "fp8"}},
      {"--fp8-recipe", {"delayed", "tensorwise", "rowwise"}},
      {"--attention", {"flash", "unfused"}},
      {"--elementwise", {"fused", "eager"}},
      {"--framework", {"megatron-lm-2021", "megatron-core", "torchtitan", "deepspeed"}},
      {"--cp-comm", {"p2p", "a2a", "all_gather"}},
      {"--cp-attention", {"te", "pytorch"}},
      {"--shard-group", {"0", "2", "8"}},
      {"--first-stage-layers", {"1", "5"}},
      {"--last-stage-layers", {"1", "3"}},
      {"--stage-layers", {"10,22", "8,8,8,8", "1,2,1"}},
      {"--etp", {"tp", "1"}},
      {"--kernel-cv", {"0", "0.05"}},
      {"--gpu-cv", {"0", "0.02"}},
      {"--moe-imbalance", {"1", "1.5"}},
      {"--seq", {"512", "4096", "32768"}},
      {"--grad-bytes", {"2", "4"}},
      {"--host-op-us", {"0", "8", "100"}},
      {"--zero3-prefetch", {"0", "5e7", "1e12"}},
      {"--flash-kernel", {"fused", "fa2"}},
  };
  return c;
}

template <class T>
const T& pick(std::mt19937& rng, const std::vector<T>& v) {
  return v[std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(rng)];
}

std::string draw(std::mt19937& rng) {
  const std::vector<std::string> models = {"gpt3-175b",       "llama2-7b",        "gpt-tiny",
                                           "gpt2-small",      hf("mixtral-8x7b"), hf("deepseek-v2-lite"),
                                           hf("gpt-oss-20b"), hf("gemma-2-9b"),   hf("qwen3-32b"),
                                           hf("phi-2"),       hf("falcon-7b"),    hf("santacoder-gpt-bigcode")};
  const std::vector<std::string> clusters = {"dgx-a100-80gb", "dgx-h100", "dgx-h200", "dgx-b200", "local-cpu"};
  const bool plan = std::bernoulli_distribution(0.3)(rng);
  // Plans search every layout, slow under the sanitizers at thousands of GPUs: they get at most 64.
  const std::vector<std::string> gpus = plan ? std::vector<std::string>{"1", "2", "8", "16", "64"}
                                             : std::vector<std::string>{"1", "2", "8", "16", "64", "128", "1024"};
  std::string args = std::string(plan ? "plan" : "sim") + " --model " + pick(rng, models) + " --cluster " +
                     pick(rng, clusters) + " --gpus " + pick(rng, gpus) + " --global-batch " +
                     pick(rng, std::vector<std::string>{"1", "2", "8", "16", "64", "256", "1024"});
  std::vector<Choice> shuffled = choices();
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  const int flags = std::uniform_int_distribution<int>(0, 8)(rng);
  for (int i = 0; i < flags; ++i) args += std::string(" ") + shuffled[i].flag + " " + pick(rng, shuffled[i].values);
  for (const char* f : {"--account-for-embedding", "--account-for-loss", "--sync-pipeline-sends",
                        "--allow-cross-node-tp", "--moe-shared-expert-overlap"})
    if (std::bernoulli_distribution(0.1)(rng)) args += std::string(" ") + f;
  if (plan) args += " --top 3";
  return args;
}

TEST(Cli, RandomFlagCombinationsAnswerOrRefuseInOneLine) {
  std::mt19937 rng(20261127);
  std::array<int, 3> seen{};
  constexpr int kDraws = 60;
  for (int i = 0; i < kDraws; ++i) {
    const std::string args = draw(rng);
    const auto r = run_loom(args);
    const std::string what = "loom " + args + "\nexit " + std::to_string(r.status) + "\nstderr: " + r.err;
    ASSERT_TRUE(r.status == 0 || r.status == 2) << what;
    const auto lines = std::count(r.err.begin(), r.err.end(), '\n');
    const bool nothing_fits = r.status == 0 && !r.err.empty();
    ++seen[nothing_fits ? 1 : r.status];
    if (r.status == 0) {
      EXPECT_FALSE(r.out.empty()) << what;
    }
    if (r.status == 2 || nothing_fits) {
      EXPECT_EQ(lines, 1) << what;
      EXPECT_EQ(r.err.rfind("loom: ", 0), 0u) << what;
    }
    if (r.status == 2) {
      EXPECT_TRUE(r.out.empty()) << what;
    }
    if (nothing_fits) {
      EXPECT_NE(r.err.find(" fits in "), std::string::npos) << what;
    }
  }
  // The draws must reach both answers and refusals, or the test checks less than it says.
  EXPECT_GT(seen[0], 5);
  EXPECT_GT(seen[2], 5);
}

// Nothing fits is an answer, not an error (DESIGN.md): exit 0, the table's search line and the JSON's
// rejections say why, and stderr says so in one line. It exited 1, the status of Loom's own failures.
TEST(Cli, NothingFitsIsAnAnswerWithExitZero) {
  const std::string spec = "plan --model gpt3-175b --cluster dgx-a100-80gb --gpus 8 --global-batch 64";
  const auto table = run_loom(spec);
  EXPECT_EQ(table.status, 0) << table.err;
  EXPECT_NE(table.out.find(" 0 fit in memory"), std::string::npos) << table.out;
  EXPECT_EQ(table.err, "loom: no configuration of gpt3-175b on 8 GPUs fits in 80 GiB (see --explain)\n");
  const auto json = run_loom(spec + " --format json");
  ASSERT_EQ(json.status, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  EXPECT_TRUE(j["plans"].empty());
  int oom = 0;
  for (const auto& r : j["rejected"]) oom += r["reason"].get<std::string>().rfind("OOM by ", 0) == 0;
  EXPECT_GT(oom, 0);
}

// The combinations above may end in a refusal, so a value refused as not understood would pass there:
// "--etp tp", the default its help names, was refused as "not an integer" and counted as a valid ending.
// Here each value of the table, given alone to a plain `loom sim`, must be understood: it may still be an
// illegal layout (tp 3 does not divide 32 heads), but no refusal may quote it as what it could not read.
TEST(Cli, EveryValueOfTheTableIsUnderstoodAlone) {
  int answered = 0;
  for (const Choice& choice : choices()) {
    for (const char* value : choice.values) {
      std::string args = std::string("sim --model llama2-7b --cluster dgx-h100 --gpus 16 --global-batch 64 ") +
                         choice.flag + " " + value;
      if (std::string(choice.flag) == "--fp8-recipe") args += " --precision fp8";  // it applies to fp8 alone
      const auto r = run_loom(args);
      const std::string what = "loom " + args + "\nexit " + std::to_string(r.status) + "\nstderr: " + r.err;
      ASSERT_TRUE(r.status == 0 || r.status == 2) << what;
      answered += r.status == 0;
      EXPECT_EQ(r.err.find(std::string(choice.flag) + ": '" + value + "'"), std::string::npos) << what;
      EXPECT_EQ(r.err.find(std::string("'") + value + "' is not"), std::string::npos) << what;
      EXPECT_EQ(r.err.find(std::string("unknown value '") + value + "'"), std::string::npos) << what;
    }
  }
  EXPECT_GT(answered, 40);  // most values alone are legal on 16 GPUs: the check is not all refusals
}

}  // namespace
}  // namespace loom
