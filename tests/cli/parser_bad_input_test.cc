// Bad input through every parser the CLI reads files with, and sizes past 64-bit arithmetic:
// exit status 2 and one line naming the problem (issue 18). The parsers' own tests hold the
// detail; these check that each file kind reaches the user as one line, not a crash or a wrap.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "run_loom.h"

namespace loom {
namespace {

using testing::expect_bad_input;
using testing::scratch_dir;

std::string write(const std::string& name, const std::string& text) {
  const auto path = scratch_dir() / name;
  std::ofstream(path) << text;
  return path.string();
}

const char* kModel = R"("layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 32)";

TEST(CliParsers, CostFileContent) {
  const std::string spec = " --model llama2-7b --gpus 8 --global-batch 8";
  expect_bad_input("plan --cluster " + write("no_node.json", R"({"name": "x"})") + spec, "missing section 'node'");
  expect_bad_input("plan --cluster " + write("cluster_list.json", "[1, 2]") + spec, "expected a JSON object");
}

TEST(CliParsers, ModelSizesBeyondTheLimit) {
  // 4096 layers of hidden 2^20 with 65,536 experts: the int64 parameter count used to wrap around.
  const std::string moe = write("huge_moe.json", R"({"layers": 4096, "hidden": 1048576, "heads": 16, "vocab": 100,
      "seq_len": 32, "moe": {"experts": 65536, "experts_per_token": 2, "expert_ffn": 67108864}})");
  expect_bad_input("plan --model " + moe + " --gpus 8 --global-batch 8", "more than Loom's limit");
  const std::string hf = write("huge_hf.json", R"({"model_type": "llama", "hidden_size": 1048576,
      "intermediate_size": 67108864, "num_attention_heads": 16, "num_hidden_layers": 4096, "vocab_size": 100,
      "max_position_embeddings": 32})");
  expect_bad_input("plan --model " + hf + " --gpus 8 --global-batch 8", "more than Loom's limit");
}

TEST(CliParsers, SizeFlagsPastAnyCluster) {
  expect_bad_input("plan --model llama2-7b --gpus 10000000 --global-batch 8", "more GPUs than any cluster has");
  expect_bad_input("plan --model llama2-7b --gpus 8 --global-batch 8 --seq 1099511627776",
                   "--seq: 1099511627776 is absurdly long");
  expect_bad_input("plan --model llama2-7b --gpus 8 --global-batch 1099511627776",
                   "--global-batch: 1099511627776 is absurdly large");
}

TEST(CliParsers, PlanFileContent) {
  // tp·pp = 2^40 used to wrap to a world size of 0.
  const std::string wrap = write("wrap_plan.json", std::string(R"({"format": "loom-plan/1", "model": {)") + kModel +
                                                       R"(}, "training": {"gpus": 1, "global_batch": 1},
      "config": {"tp": 1048576, "pp": 1048576}})");
  expect_bad_input("run --plan " + wrap + " --data /nonexistent.bin --steps 1", "tp·cp·pp·dp = 1099511627776");
  const std::string cluster = write("cluster_plan.json", std::string(R"({"format": "loom-plan/1", "model": {)") +
                                                             kModel + R"(}, "training": {"gpus": 1, "global_batch": 1},
      "config": {}, "cluster": 5})");
  expect_bad_input("run --plan " + cluster + " --data /nonexistent.bin --steps 1", "'cluster' must be");
  // A plan file names the model, training and layout: a spec or config flag beside it was ignored without a word.
  for (const char* flag : {"--tp 2", "--model gpt2-small", "--global-batch 4", "--precision fp8", "--account-for-loss"})
    expect_bad_input("run --plan " + cluster + " --data /nonexistent.bin --steps 1 " + flag,
                     std::string(flag).substr(0, std::string(flag).find(' ')) +
                         ": the plan file names the model, the training and the layout");
}

TEST(CliParsers, VtrainCsvContent) {
  expect_bad_input("calibrate --check --vtrain " + write("nan.csv", "2,16,8,nan,16,24,1024,1,1,2,372\n"),
                   "'nan' is not a number");
  expect_bad_input("calibrate --check --vtrain " + write("huge.csv", "2,16,8,1e300,16,24,1024,1,1,2,372\n"),
                   "hidden size 1e+300 is not a whole number");
}

TEST(CliParsers, ExecutorTraceContent) {
  expect_bad_input("calibrate --trace " + write("dur.json", R"({"traceEvents": [{"ph": "X", "name": "F0 mb0",
      "dur": "40"}]})"),
                   "'dur' that is not a duration");
  expect_bad_input("calibrate --trace " + write("run.json", R"({"traceEvents": [{"ph": "X", "name": "F0 mb0",
      "dur": 40}], "otherData": {"loom_run": [1]}})"),
                   "'otherData.loom_run' must be an object");
}

}  // namespace
}  // namespace loom
