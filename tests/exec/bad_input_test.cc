// Bad input to `loom run`, as real processes under mpirun: every case ends with exactly one
// "loom:" line on stderr (from rank 0), exit status 2 from every rank, and no hang (a timeout
// would show as exit 124).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "core/json_io.h"
#include "core/presets.h"
#include "run_util.h"

namespace loom::exec::testing {
namespace {

void expect_one_clear_error(const ProcessResult& r, const std::string& fragment) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(count_lines_starting(r.err, "loom:"), 1) << r.err;
  EXPECT_NE(r.err.find(fragment), std::string::npos) << "expected '" << fragment << "' in: " << r.err;
  EXPECT_EQ(r.out.find("step"), std::string::npos) << "no step may run: " << r.out;
}

class ExecBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_mpirun()) GTEST_SKIP() << "built without MPI: multi-rank bad-input cases not run";
    dir_ = scratch_dir("bad_input");
    data_ = make_token_file(dir_, 5000);
  }
  std::string dir_, data_;
};

TEST_F(ExecBadInput, PlanWorldSizeDiffersFromLaunchedRanks) {
  Plan plan;
  plan.model = *model_preset("gpt-tiny");
  plan.cluster = "local-cpu";
  plan.training.gpus = 4;
  plan.training.global_batch = 8;
  plan.training.seq_len = 32;
  plan.config.tp = 2;
  plan.config.dp = 2;
  const std::string path = dir_ + "/plan.json";
  std::ofstream(path) << to_json(plan).dump(2);
  const ProcessResult r = run_shell(fmt::format("{} --plan {} --data {} --steps 1", loom_run(3), path, data_), 60);
  expect_one_clear_error(r, "4 ranks but 3 were launched");
}

TEST_F(ExecBadInput, MissingDataFile) {
  const ProcessResult r =
      run_shell(fmt::format("{} --seq 32 --global-batch 2 --data {}/nope.bin --steps 1", loom_run(2), dir_), 60);
  expect_one_clear_error(r, "nope.bin");
}

TEST_F(ExecBadInput, TruncatedDataFile) {
  const std::string cut = dir_ + "/cut.bin";
  std::filesystem::copy_file(data_, cut, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(cut, 1024 + 2 * 1000);  // the header still says 5000 tokens
  const ProcessResult r =
      run_shell(fmt::format("{} --seq 32 --global-batch 2 --data {} --steps 1", loom_run(2), cut), 60);
  expect_one_clear_error(r, "truncated");
}

TEST_F(ExecBadInput, NotATokenFile) {
  const std::string junk = dir_ + "/junk.bin";
  std::ofstream(junk) << std::string(4096, 'x');
  const ProcessResult r =
      run_shell(fmt::format("{} --seq 32 --global-batch 2 --data {} --steps 1", loom_run(2), junk), 60);
  expect_one_clear_error(r, "bad magic");
}

TEST_F(ExecBadInput, LayoutTheModelCannotTake) {
  // gpt-tiny has 4 attention heads: TP 3 cannot split them.
  const ProcessResult r =
      run_shell(fmt::format("{} --tp 3 --seq 32 --global-batch 2 --data {} --steps 1", loom_run(3), data_), 60);
  expect_one_clear_error(r, "heads 4 not divisible by tp 3");
}

TEST_F(ExecBadInput, MorePipelineStagesThanLayers) {
  const ProcessResult r =
      run_shell(fmt::format("{} --pp 5 --seq 32 --global-batch 5 --data {} --steps 1", loom_run(5), data_), 60);
  expect_one_clear_error(r, "more pipeline stages than the 4 layers");
}

TEST_F(ExecBadInput, ExpertParallelismTheModelCannotTake) {
  // A dense model has no experts to split; micro-moe's 8 experts do not split over 3 ranks.
  ProcessResult r =
      run_shell(fmt::format("{} --dp 2 --ep 2 --seq 32 --global-batch 2 --data {} --steps 1", loom_run(2), data_), 60);
  expect_one_clear_error(r, "needs a mixture-of-experts model");
  r = run_shell(fmt::format("{} --model {} --dp 3 --ep 3 --global-batch 3 --data {} --steps 1", loom_run(3),
                            test_model("micro_moe"), data_),
                60);
  expect_one_clear_error(r, "8 experts are not divisible by ep 3");
}

TEST_F(ExecBadInput, MixtureOfExpertsPartsTheExecutorDoesNotRunYet) {
  auto json = read_json_file(test_model("micro_moe"));
  ASSERT_TRUE(json.ok());
  (*json)["moe"]["expert_bias"] = true;  // gpt-oss: biases on every expert projection and the router
  const std::string path = dir_ + "/biased_moe.json";
  std::ofstream(path) << json->dump();
  const ProcessResult r =
      run_shell(fmt::format("{} --model {} --global-batch 2 --data {} --steps 1", loom_run(2), path, data_), 60);
  expect_one_clear_error(r, "expert and router biases");
}

// torchtitan's op-level activation checkpointing keeps scaled-dot-product attention's output and
// log-sum-exp: not with the unfused kernel's probabilities.
TEST_F(ExecBadInput, OpLevelRecomputeWithUnfusedAttention) {
  const ProcessResult r =
      run_shell(fmt::format("{} --seq 32 --global-batch 2 --recompute op --attention unfused --data {} --steps 1",
                            loom_run(1), data_),
                60);
  expect_one_clear_error(r, "not --attention unfused's probabilities");
}

// Context parallelism the layout cannot take, refused by every rank before any collective.
TEST_F(ExecBadInput, ContextParallelTheLayoutCannotTake) {
  // Ulysses gives each tp·cp rank whole heads: micro-llama's 2 key/value heads do not split over 4.
  ProcessResult r = run_shell(fmt::format("{} --model {} --cp 4 --cp-comm a2a --global-batch 2 --data {} --steps 1",
                                          loom_run(4), test_model("micro_llama"), data_),
                              60);
  expect_one_clear_error(r, "a2a context parallelism needs heads 4 and kv_heads 2 divisible by tp·cp = 4");
  // Causal load balancing needs 2·cp chunks of the sequence.
  r = run_shell(fmt::format("{} --cp 3 --seq 32 --global-batch 2 --data {} --steps 1", loom_run(3), data_), 60);
  expect_one_clear_error(r, "sequence 32 not divisible by 2·cp = 6");
}

// The optimizer's settings as AdamW takes them: a NaN or negative learning rate, a dropout of 1 and a
// negative warm-up trained on before (a dropout of 1 was the only one refused).
TEST_F(ExecBadInput, OptimizerSettingsOutOfRange) {
  const std::pair<const char*, const char*> cases[] = {
      {"--lr nan", "--lr: nan must be a learning rate from 0 to 1000"},
      {"--lr -1e-3", "--lr: -0.001 must be a learning rate"},
      {"--dropout 1", "--dropout: 1 must be a probability from 0, below 1"},
      {"--dropout -0.5", "--dropout: -0.5 must be a probability"},
      {"--warmup -2", "--warmup: -2 must not be negative"},
      {"--grad-clip nan", "--grad-clip: nan must be a gradient norm"},
  };
  for (const auto& [flag, expected] : cases) {
    const ProcessResult r =
        run_shell(fmt::format("{} --seq 32 --global-batch 2 --data {} --steps 1 {}", loom_run(1), data_, flag), 60);
    expect_one_clear_error(r, expected);
  }
}

// Checkpoint flags that would do nothing alone are refused: the run trained and saved nothing.
TEST_F(ExecBadInput, CheckpointFlagsThatWouldDoNothing) {
  const std::string run = fmt::format("{} --seq 32 --global-batch 2 --data {} --steps 2", loom_run(1), data_);
  expect_one_clear_error(run_shell(run + " --checkpoint-dir " + dir_ + "/ck --keep-checkpoints 2", 60),
                         "--keep-checkpoints prunes after each save: it needs --save-every K");
  expect_one_clear_error(run_shell(run + " --checkpoint-dir " + dir_ + "/ck", 60),
                         "--checkpoint-dir: nothing would be saved to it or resumed from it");
}

// A --checkpoint-dir that is a file is refused before the first step, not at the first save.
TEST_F(ExecBadInput, CheckpointDirThatIsAFile) {
  const std::string file = dir_ + "/not_a_dir";
  std::ofstream(file) << "x";
  const ProcessResult r =
      run_shell(fmt::format("{} --seq 32 --global-batch 2 --data {} --steps 2 --save-every 1 --checkpoint-dir {}",
                            loom_run(1), data_, file),
                60);
  expect_one_clear_error(r, "--checkpoint-dir: '" + file + "' is not a directory");
  EXPECT_EQ(r.out.find("step "), std::string::npos) << "no step may run: " << r.out;
}

// A --log or --trace that cannot be written is refused before the first step: the trace is written once,
// after the last step, and was lost there with exit 0. Two ranks: each checks its own trace file.
TEST_F(ExecBadInput, LogOrTraceThatCannotBeWritten) {
  const std::pair<std::string, std::string> cases[] = {
      {"--log " + dir_ + "/missing/run.jsonl", "--log: cannot write '" + dir_ + "/missing/run.jsonl': no directory"},
      {"--trace " + dir_ + "/missing/t.json",
       "--trace: cannot write '" + dir_ + "/missing/t.rank0.json': no directory"},
      {"--trace " + dir_, "--trace: '" + dir_ + ".rank0' is a directory"},
  };
  for (const auto& [flag, expected] : cases) {
    if (flag == "--trace " + dir_) std::filesystem::create_directories(dir_ + ".rank0");
    const ProcessResult r =
        run_shell(fmt::format("{} --seq 32 --global-batch 2 --data {} --steps 1 {}", loom_run(2), data_, flag), 60);
    expect_one_clear_error(r, expected);
  }
}

// A directory given as the token file is named as one (it read as "shorter than the header").
TEST_F(ExecBadInput, DataThatIsADirectory) {
  const ProcessResult r =
      run_shell(fmt::format("{} --seq 32 --global-batch 2 --data {} --steps 1", loom_run(1), dir_), 60);
  expect_one_clear_error(r, "data file '" + dir_ + "': is a directory");
}

TEST_F(ExecBadInput, ResumeWithoutCheckpoint) {
  const ProcessResult r =
      run_shell(fmt::format("{} --seq 32 --global-batch 2 --data {} --steps 1 --checkpoint-dir {}/empty --resume",
                            loom_run(2), data_, dir_),
                60);
  expect_one_clear_error(r, "no complete checkpoint");
}

}  // namespace
}  // namespace loom::exec::testing
