// Checkpoints that survive damage and crashes, and the --on-nan policies, as real `loom run` processes:
// a corrupt, truncated or missing shard and another run's checkpoint are refused with one line and
// exit 2; an unfinished save is passed over; a rank killed mid-save loses nothing; NaNs stop or skip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "run_util.h"

namespace loom::exec::testing {
namespace {

namespace fs = std::filesystem;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

// The per-step records of a --log file (not the closing memory_peaks event).
std::vector<Json> step_records(const std::string& path) {
  std::vector<Json> records;
  for (const Json& r : read_jsonl(path))
    if (r.contains("step")) records.push_back(r);
  return records;
}

// The step directories under `dir`, sorted.
std::vector<std::string> step_dirs(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory()) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Two ranks (DP2, ZeRO-3: each shard holds different values) train 4 steps saving every 2; each test
// damages a copy of that checkpoint directory and resumes from it.
class ExecCheckpointDamage : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!have_mpirun()) return;
    base_ = scratch_dir("damage_base");
    data_ = make_token_file(base_, 20000);
    const ProcessResult r = run_shell(
        fmt::format("{} {} --steps 4 --checkpoint-dir {}/ckpt --save-every 2", loom_run(2), common(data_), base_));
    saved_ = r.exit_code == 0;
    if (!saved_) error_ = r.err;
  }
  static std::string common(const std::string& data, const std::string& model = "micro") {
    return fmt::format("--model {} --data {} --global-batch 4 --threads 1 --lr 3e-3 --dp 2 --zero 3", test_model(model),
                       data);
  }
  void SetUp() override {
    if (!have_mpirun()) GTEST_SKIP() << "built without MPI: two-rank checkpoint damage cases not run";
    ASSERT_TRUE(saved_) << error_;
    dir_ = scratch_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::copy(base_ + "/ckpt", dir_, fs::copy_options::recursive);
  }
  ProcessResult resume(const std::string& extra = "") {
    return run_shell(fmt::format("{} {} --steps 6 --checkpoint-dir {} --resume --log {}/resumed.jsonl {}", loom_run(2),
                                 common(data_), dir_, dir_, extra),
                     60);
  }
  static void expect_refused(const ProcessResult& r, const std::vector<std::string>& fragments) {
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(count_lines_starting(r.err, "loom:"), 1) << r.err;
    for (const std::string& f : fragments)
      EXPECT_NE(r.err.find(f), std::string::npos) << "expected '" << f << "' in: " << r.err;
    EXPECT_EQ(r.out.find("step "), std::string::npos) << "no step may run: " << r.out;
  }
  std::string shard(int rank) const { return fmt::format("{}/step_00000004/rank_{:05d}.bin", dir_, rank); }

  static inline std::string base_, data_, error_;
  static inline bool saved_ = false;
  std::string dir_;
};

TEST_F(ExecCheckpointDamage, IntactCheckpointResumes) {  // the control: the damage below is what fails
  const ProcessResult r = resume();
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(losses(dir_ + "/resumed.jsonl").size(), 2u);
}

// A finished run resumed again (a requeued job, --steps already reached): exit 0 saying so, no step run and
// no record logged. It had appended a memory record of zeros to the log.
TEST_F(ExecCheckpointDamage, FinishedRunResumedAgainTrainsNothing) {
  const ProcessResult r = run_shell(fmt::format("{} {} --steps 4 --checkpoint-dir {} --resume --log {}/again.jsonl",
                                                loom_run(2), common(data_), dir_, dir_),
                                    60);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("loom: the checkpoint is at step 4, --steps is 4: nothing left to train"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("step "), std::string::npos) << r.out;
  std::ifstream log(dir_ + "/again.jsonl");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(log), {}), "");
}

TEST_F(ExecCheckpointDamage, FlippedByteInAShardIsRefusedByChecksum) {
  {
    std::fstream f(shard(1), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(200);
    char c = 0;
    f.get(c);
    f.seekp(200);
    f.put(static_cast<char>(c ^ 0x10));  // one bit of a parameter value: size and header stay valid
  }
  expect_refused(resume(), {shard(1), "checksum"});
}

TEST_F(ExecCheckpointDamage, TruncatedShardIsRefused) {
  fs::resize_file(shard(0), fs::file_size(shard(0)) - 100);
  expect_refused(resume(), {shard(0), "truncated"});
}

TEST_F(ExecCheckpointDamage, MissingShardIsRefused) {
  fs::remove(shard(1));
  expect_refused(resume(), {shard(1), "missing"});
}

TEST_F(ExecCheckpointDamage, CheckpointOfAnotherSeedIsRefused) {
  expect_refused(resume("--seed 7"), {"step_00000004/manifest.json", "--seed"});
}

TEST_F(ExecCheckpointDamage, CheckpointOfAnotherModelIsRefused) {
  const ProcessResult r = run_shell(
      fmt::format("{} {} --steps 6 --checkpoint-dir {} --resume", loom_run(2), common(data_, "micro_llama"), dir_), 60);
  expect_refused(r, {"step_00000004/manifest.json", "holds model 'micro'"});
}

// A hand-edited manifest whose counts are not whole numbers of their type (the fuzzer's 1e31 updates, a
// fractional step, a sequence length past an int) is refused in one line: nlohmann's get<int>() would have
// cast them unchecked.
TEST_F(ExecCheckpointDamage, ManifestCountsOutOfRangeAreRefused) {
  const std::string path = dir_ + "/step_00000004/manifest.json";
  const Json manifest = Json::parse(std::ifstream(path));
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, Json>>{{"optimizer_updates", Json::parse("44444444444444444444444444444444")},
                                                 {"step", 4.5},
                                                 {"seq_len", 1000000000000LL}}) {
    Json edited = manifest;
    edited[key] = value;
    std::ofstream(path, std::ios::trunc) << edited.dump(1);
    expect_refused(resume(), {"step_00000004/manifest.json", "'" + key + "'", "not a whole number"});
  }
}

TEST_F(ExecCheckpointDamage, UnfinishedSaveNamedByLatestFallsBackToNewestComplete) {
  // A crash after `latest` moved to a save that then lost its manifest (a later re-save of the same
  // step removes the manifest first): step 4 is incomplete, step 2 is the newest complete one.
  ASSERT_EQ(read_text(dir_ + "/latest"), "step_00000004");
  fs::remove(dir_ + "/step_00000004/manifest.json");
  const ProcessResult r = resume();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("no manifest.json"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("resuming from " + dir_ + "/step_00000002"), std::string::npos) << r.err;
  const std::vector<Json> records = step_records(dir_ + "/resumed.jsonl");
  ASSERT_EQ(records.size(), 4u);  // steps 3..6
  EXPECT_EQ(records.front()["step"].get<int>(), 3);
}

TEST(ExecCheckpointKeep, KeepsExactlyTheNewestTwo) {
  const std::string dir = scratch_dir("keep");
  const std::string data = make_token_file(dir, 20000);
  const ProcessResult r =
      run_shell(fmt::format("{} --model {} --data {} --global-batch 4 --threads 1 --steps 8 --checkpoint-dir {}/ckpt "
                            "--save-every 2 --keep-checkpoints 2",
                            loom_run(1), test_model("micro"), data, dir));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(step_dirs(dir + "/ckpt"), (std::vector<std::string>{"step_00000006", "step_00000008"}));
  EXPECT_EQ(read_text(dir + "/ckpt/latest"), "step_00000008");
}

// A rank SIGKILLs itself in the middle of a save (LOOM_TEST_KILL_DURING_SAVE): after its shard is
// durable under the temporary name but before the rename, or after the manifest but before `latest`
// moves. The job dies; resuming gives the uninterrupted run's loss curve bit for bit.
class ExecCrashDuringSave : public ::testing::TestWithParam<const char*> {};

TEST_P(ExecCrashDuringSave, ResumeGivesTheUninterruptedCurveBitForBit) {
  if (!have_mpirun()) GTEST_SKIP() << "built without MPI";
  const std::string phase = GetParam();
  const std::string dir = scratch_dir("crash_" + phase);
  const std::string data = make_token_file(dir, 20000);
  const std::string run =
      fmt::format("{} --model {} --data {} --global-batch 4 --threads 1 --lr 3e-3 --dp 2 --zero 3 --steps 6",
                  loom_run(2), test_model("micro"), data);
  const ProcessResult whole = run_shell(fmt::format("{} --log {}/whole.jsonl", run, dir));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  const ProcessResult crashed =
      run_shell(fmt::format("LOOM_TEST_KILL_DURING_SAVE=4:{} {} --checkpoint-dir {}/ckpt --save-every 2 --log "
                            "{}/crashed.jsonl",
                            phase, run, dir, dir));
  ASSERT_NE(crashed.exit_code, 0) << "the job must die in the save of step 4";
  ASSERT_NE(crashed.exit_code, 124) << "the job hung instead of dying";
  EXPECT_EQ(read_text(dir + "/ckpt/latest"), "step_00000002") << "latest moves only after the whole save";
  if (phase == "shard") {
    EXPECT_FALSE(fs::exists(dir + "/ckpt/step_00000004/manifest.json"));
    EXPECT_FALSE(fs::exists(dir + "/ckpt/step_00000004/rank_00000.bin")) << "killed before its rename";
  } else {
    EXPECT_TRUE(fs::exists(dir + "/ckpt/step_00000004/manifest.json"));
  }
  const ProcessResult resumed = run_shell(
      fmt::format("{} --checkpoint-dir {}/ckpt --save-every 2 --resume --log {}/resumed.jsonl", run, dir, dir));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;

  const std::vector<double> expected = losses(dir + "/whole.jsonl");
  const std::vector<double> before = losses(dir + "/crashed.jsonl");
  const std::vector<double> after = losses(dir + "/resumed.jsonl");
  ASSERT_EQ(expected.size(), 6u);
  ASSERT_EQ(before.size(), 4u);  // steps 1..4, the last one's save cut short
  ASSERT_EQ(after.size(), 4u);   // steps 3..6 from the step-2 checkpoint
  for (int i = 0; i < 4; ++i) EXPECT_EQ(before[i], expected[i]) << "step " << i + 1;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(after[i], expected[2 + i]) << "step " << 3 + i;  // exact, not near
  EXPECT_EQ(read_text(dir + "/ckpt/latest"), "step_00000006");
  EXPECT_TRUE(fs::exists(dir + "/ckpt/step_00000004/manifest.json")) << "the resumed run saves step 4 again";
}

INSTANTIATE_TEST_SUITE_P(Phases, ExecCrashDuringSave, ::testing::Values("shard", "manifest"),
                         [](const auto& info) { return std::string(info.param); });

// --on-nan, with a NaN injected (LOOM_TEST_INJECT_NAN=STEP:TENSOR) after the gradients are reduced.
struct NanCase {
  const char* name;
  int ranks;
  const char* flags;
  const char* tensor;
};

void PrintTo(const NanCase& c, std::ostream* os) { *os << c.name; }

class ExecOnNan : public ::testing::TestWithParam<NanCase> {
 protected:
  void SetUp() override {
    if (GetParam().ranks > 1 && !have_mpirun()) GTEST_SKIP() << "built without MPI";
    dir_ = scratch_dir(std::string("nan_") + GetParam().name);
    data_ = make_token_file(dir_, 20000);
  }
  std::string run(const std::string& tail) const {
    const NanCase& c = GetParam();
    return fmt::format("LOOM_TEST_INJECT_NAN=3:{} {} --model {} --data {} --global-batch 4 --threads 1 --lr 3e-3 {} {}",
                       c.tensor, loom_run(c.ranks), test_model("micro"), data_, c.flags, tail);
  }
  std::string dir_, data_;
};

TEST_P(ExecOnNan, StopExitsThreeNamingStepAndTensorAndKeepsLastGoodCheckpoint) {
  const ProcessResult r =
      run_shell(run(fmt::format("--steps 6 --checkpoint-dir {}/ckpt --save-every 2 --log {}/log.jsonl", dir_, dir_)));
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(count_lines_starting(r.err, "loom:"), 1) << r.err;
  EXPECT_NE(r.err.find("step 3:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(GetParam().tensor), std::string::npos) << r.err;
  EXPECT_EQ(read_text(dir_ + "/ckpt/latest"), "step_00000002");
  EXPECT_EQ(step_dirs(dir_ + "/ckpt"), (std::vector<std::string>{"step_00000002"}));
  const std::vector<Json> records = step_records(dir_ + "/log.jsonl");
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[2]["nonfinite"], GetParam().tensor);
  EXPECT_FALSE(records[2]["skipped"].get<bool>());
}

// With a warm-up (the learning rate changes every step), a dropped update must not advance the
// schedule or Adam's step count: the skip run's k-th applied update is the clean run's k-th.
TEST_P(ExecOnNan, SkipDropsTheStepsUpdateAndContinues) {
  const ProcessResult clean = run_shell(fmt::format(
      "{} --model {} --data {} --global-batch 4 --threads 1 --lr 3e-3 --warmup 10 {} --steps 6 --log {}/clean.jsonl",
      loom_run(GetParam().ranks), test_model("micro"), data_, GetParam().flags, dir_));
  ASSERT_EQ(clean.exit_code, 0) << clean.err;
  const ProcessResult r = run_shell(run(fmt::format("--warmup 10 --steps 6 --on-nan skip --log {}/log.jsonl", dir_)));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("step 3:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("update skipped"), std::string::npos) << r.err;
  const std::vector<Json> records = step_records(dir_ + "/log.jsonl");
  const std::vector<Json> reference = step_records(dir_ + "/clean.jsonl");
  ASSERT_EQ(records.size(), 6u);
  ASSERT_EQ(reference.size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(records[i].contains("skipped"), i == 2) << "step " << i + 1;
  EXPECT_TRUE(records[2]["skipped"].get<bool>());
  EXPECT_EQ(records[2]["nonfinite"], GetParam().tensor);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(records[i]["loss"].get<double>(), reference[i]["loss"].get<double>());
  for (int i = 3; i < 6; ++i) {
    ASSERT_TRUE(records[i]["loss"].is_number()) << records[i].dump();
    EXPECT_TRUE(std::isfinite(records[i]["loss"].get<double>())) << "step " << i + 1;
    EXPECT_TRUE(std::isfinite(records[i]["grad_norm"].get<double>())) << "step " << i + 1;
    // Steps 4-6 apply updates 3-5.
    EXPECT_EQ(records[i]["lr"].get<double>(), reference[i - 1]["lr"].get<double>()) << "step " << i + 1;
  }
  // Step 3's update was dropped, so step 4 trains from step 2's weights: not the clean run's step 4.
  EXPECT_NE(records[3]["loss"].get<double>(), reference[3]["loss"].get<double>());

  // The count of applied updates survives a checkpoint: 4 steps (one skipped), saved, resumed to 6,
  // give the uninterrupted skip run's steps 5 and 6 bit for bit.
  const ProcessResult first =
      run_shell(run(fmt::format("--warmup 10 --steps 4 --on-nan skip --checkpoint-dir {}/ckpt --save-every 4", dir_)));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  std::ifstream manifest_file(dir_ + "/ckpt/step_00000004/manifest.json");
  const Json manifest = Json::parse(manifest_file);
  EXPECT_EQ(manifest["optimizer_updates"], 3);
  const ProcessResult resumed = run_shell(fmt::format(
      "{} --model {} --data {} --global-batch 4 --threads 1 --lr 3e-3 --warmup 10 {} --steps 6 --checkpoint-dir "
      "{}/ckpt --resume --log {}/resumed.jsonl",
      loom_run(GetParam().ranks), test_model("micro"), data_, GetParam().flags, dir_, dir_));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const std::vector<Json> after = step_records(dir_ + "/resumed.jsonl");
  ASSERT_EQ(after.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(after[i]["loss"].get<double>(), records[4 + i]["loss"].get<double>()) << "step " << 5 + i;
    EXPECT_EQ(after[i]["lr"].get<double>(), records[4 + i]["lr"].get<double>()) << "step " << 5 + i;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, ExecOnNan,
                         ::testing::Values(NanCase{"OneRankLoss", 1, "", "loss"},
                                           NanCase{"OneRankGradient", 1, "", "layers.2.mlp.fc.weight"},
                                           NanCase{"DP2_ZeRO3Gradient", 2, "--dp 2 --zero 3", "layers.2.mlp.fc.weight"},
                                           NanCase{"PP2Loss", 2, "--pp 2", "loss"}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace loom::exec::testing
