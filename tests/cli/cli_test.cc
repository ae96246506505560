// The `loom` binary as users and scripts see it: bad input gets one clear line on stderr and
// exit status 2 (never a crash, a hang or a half-written file); outputs follow DESIGN.md.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

#include "core/json_io.h"
#include "run_loom.h"

namespace loom {
namespace {

using testing::expect_bad_input;
using testing::run_loom;
using testing::scratch_dir;

const char* kSpec = "--model llama2-7b --gpus 16 --global-batch 64";

void write(const std::filesystem::path& p, const std::string& text) { std::ofstream(p) << text; }

TEST(Cli, BadInputIsOneLineAndExitTwo) {
  const auto dir = scratch_dir();
  write(dir / "malformed.json", "{\"layers\": 2, \"hidden\": ");
  write(dir / "config.json", R"({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
      "num_hidden_layers": 32, "vocab_size": 32000, "max_position_embeddings": 4096})");
  expect_bad_input("plan --model " + (dir / "malformed.json").string() + " --gpus 8 --global-batch 8",
                   "malformed JSON");
  expect_bad_input("plan --model " + (dir / "config.json").string() + " --gpus 8 --global-batch 8",
                   "missing field 'intermediate_size'");
  expect_bad_input("plan --model llama2-7 --gpus 8 --global-batch 8", "did you mean 'llama2-7b'");
  expect_bad_input("plan --model llama2-7b --cluster dgx-h10 --gpus 8 --global-batch 8", "did you mean 'dgx-h100'");
  expect_bad_input("plan --model llama2-7b --gpus 0 --global-batch 8", "--gpus: 0 must be at least 1");
  expect_bad_input("plan --model llama2-7b --gpus -4 --global-batch 8", "--gpus: -4 must be at least 1");
  expect_bad_input("plan --model llama2-7b --gpus 8 --global-batch 0", "--global-batch: 0 must be at least 1");
  expect_bad_input("plan --model llama2-7b --gpus 99999999999 --global-batch 8", "--gpus");
  expect_bad_input("plan --model llama2-7b --gpus 8 --global-batch 8 --seq 999999999", "--seq");
  // 0 is how the inputs say "the default"; typed, it would have meant that silently.
  expect_bad_input("plan --model llama2-7b --gpus 8 --global-batch 8 --seq 0", "--seq: 0 must be at least 1");
  expect_bad_input("sim --model llama2-7b --gpus 8 --global-batch 8 --grad-bytes 0",
                   "--grad-bytes: 0 must be at least 1");
  std::filesystem::create_directories(dir / "checkpoint");
  expect_bad_input("plan --model " + (dir / "checkpoint").string() + " --gpus 8 --global-batch 8",
                   "a directory without a config.json");
  // A checkpoint directory is read through its config.json (here the one above, missing a field).
  expect_bad_input("plan --model " + dir.string() + " --gpus 8 --global-batch 8", "missing field 'intermediate_size'");
  expect_bad_input("plan --model llama2-7b --gpus twelve --global-batch 8", "--gpus");
  expect_bad_input("plan --model gpt3-175b --gpus 97 --global-batch 1536", "no parallel layout of 97 GPUs");
  expect_bad_input("plan --model /nonexistent/model.json --gpus 8 --global-batch 8", "cannot open file");
  expect_bad_input(std::string("plan ") + kSpec + " --format xml", "--format: unknown format 'xml'");
  expect_bad_input(std::string("plan ") + kSpec + " --top -1", "--top: -1 must be at least 0");
  expect_bad_input(std::string("plan ") + kSpec + " --zero 5", "ZeRO stage 5 does not exist");
  expect_bad_input(std::string("plan ") + kSpec + " --schedule pipedream", "unknown schedule 'pipedream'");
  expect_bad_input(std::string("sim ") + kSpec + " --tp 3",
                   "tp 3 × pp 1 = 3 ranks per data-parallel replica do not divide --gpus 16");
  expect_bad_input("sim --model llama2-13b --gpus 16 --global-batch 64 --pp 16", "layers 40 not divisible by pp 16");
  expect_bad_input("calibrate --vtrain /nonexistent.csv --check --out " + (dir / "x.json").string(),
                   "--check fits nothing, so it writes no --out file");
  expect_bad_input("calibrate --trace /nonexistent.json --fit-ceiling", "--fit-ceiling goes with a --vtrain fit");
  expect_bad_input(std::string("plan ") + kSpec + " --framework megatron", "--framework: unknown framework 'megatron'");
  expect_bad_input(std::string("plan ") + kSpec + " --framework megatron-core,megatron-core",
                   "--framework: 'megatron-core' named twice");
  expect_bad_input(std::string("plan ") + kSpec + " --framework megatron-core,", "--framework: empty name");
  expect_bad_input(std::string("plan ") + kSpec + " --framework megatron-core,megatron",
                   "--framework: unknown framework 'megatron'");
  expect_bad_input(std::string("sim ") + kSpec + " --tp 8 --framework megatron-core,torchtitan",
                   "--framework: 'megatron-core,torchtitan' names several stacks");
  expect_bad_input(std::string("sim ") + kSpec + " --tp 8 --zero 1 --framework megatron-lm-2021",
                   "megatron-lm-2021: ZeRO-1 (no distributed optimizer");
  // A NaN passed every comparison and planned days of "nan"; infinity planned "inf" days.
  expect_bad_input(std::string("plan ") + kSpec + " --tokens nan", "--tokens: nan must be a finite number");
  expect_bad_input(std::string("plan ") + kSpec + " --tokens inf", "--tokens: inf must be a finite number");
  expect_bad_input(std::string("plan ") + kSpec + " --tokens -5", "--tokens: -5 must be a finite number, not negative");
  // A stream that never ends is refused at the input limit, not read until memory runs out.
  expect_bad_input("plan --model /dev/zero --gpus 8 --global-batch 8", "/dev/zero: over 256 MiB");
  expect_bad_input("plan --model llama2-7b --cluster /dev/zero --gpus 8 --global-batch 8", "/dev/zero: over 256 MiB");
  expect_bad_input("calibrate --vtrain /dev/zero --check", "/dev/zero: over 256 MiB");
  expect_bad_input("validate --published --validation-dir /nonexistent",
                   "--validation-dir: no folder '/nonexistent' (the published measurements");
  expect_bad_input("validate --published --public-runs", "--published and --public-runs are two reports");
  expect_bad_input("validate --public-runs --profile local-cpu", "--public-runs and --profile are two reports");
  // Each report's own flags, given to another, were ignored without a word.
  expect_bad_input("validate --public-runs --cluster dgx-a100-80gb",
                   "--cluster: does not apply to --public-runs; it is for --published");
  expect_bad_input("validate --published --steps 3", "--steps: does not apply to --published");
  expect_bad_input("validate --profile local-cpu --dry-run --cluster dgx-h100",
                   "--cluster: does not apply to --profile (the on-machine matrix)");
  expect_bad_input("validate --profile local-cpu --dry-run --validation-dir /tmp",
                   "--validation-dir: does not apply to --profile");
  // 2^30 micro-batches on one GPU: the step graph ran the machine out of memory (killed after 24 GB).
  expect_bad_input("plan --model gpt2-small --gpus 1 --global-batch 1073741824",
                   "1073741824 forward passes a step, more than the 2097152 Loom simulates");
  expect_bad_input("frobnicate", "unknown command 'frobnicate'");
  expect_bad_input("plna", "did you mean 'plan'");
}

// Hugging Face configs with a field of the wrong type or value: one line naming the field, exit 2, never
// "internal error" (issue 19).
TEST(Cli, MalformedHfConfigIsOneLineNamingTheField) {
  const auto dir = scratch_dir();
  const std::string base = R"("hidden_size": 512, "intermediate_size": 1024, "num_attention_heads": 8,
    "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 512)";
  const std::pair<std::string, std::string> cases[] = {
      {R"("model_type": "llama", "hidden_dropout": null)", "'hidden_dropout' is null"},
      {R"("model_type": "llama", "attention_dropout": "0.1")", "'attention_dropout' must be a number"},
      {R"("model_type": 5)", "'model_type' must be a string"},
      {R"("model_type": "llama", "hidden_act": "relu3")", "hidden_act 'relu3' is not an activation Loom knows"},
      {R"("model_type": "llama", "num_key_value_heads": "8")", "'num_key_value_heads' must be an integer"},
      {R"("model_type": "llama", "rope_scaling": "llama3")", "rope_scaling: expected a JSON object"},
  };
  int i = 0;
  for (const auto& [fields, expected] : cases) {
    const auto path = dir / ("hf_bad" + std::to_string(i++) + ".json");
    write(path, "{" + fields + ", " + base + "}");
    expect_bad_input("plan --model " + path.string() + " --gpus 8 --global-batch 8", expected);
  }
}

// `loom validate --validation-dir` reads the user's folder: a published-measurements file with a field of
// the wrong type or out of range is one line naming the file and the row, exit 2. Before, a tp of 1e30
// stopped the process with SIGFPE, a tp of "eight" was "a bug in Loom", and a layer count of -5 was
// simulated. Each case edits one field of a copy of ../shared/validation.
TEST(Cli, MalformedValidationFilesAreOneLineNamingTheRow) {
  const auto dir = scratch_dir() / "validation";
  std::filesystem::create_directories(dir);
  const std::string source = LOOM_VALIDATION_DIR;
  auto edit = [&](const char* file, const std::string& pointer, const nlohmann::json& value) {
    for (const char* f : {"korthikanti2022.json", "narayanan2021_table1.json", "h100_public.json"})
      std::filesystem::copy_file(source + "/" + f, dir / f, std::filesystem::copy_options::overwrite_existing);
    auto json = nlohmann::json::parse(std::ifstream(dir / file));
    json[nlohmann::json::json_pointer(pointer)] = value;
    write(dir / file, json.dump());
  };
  const std::string published = "validate --published --validation-dir " + dir.string();
  const std::string runs = "validate --public-runs --validation-dir " + dir.string();
  const std::tuple<const char*, const char*, nlohmann::json, std::string, const char*> cases[] = {
      {"narayanan2021_table1.json", "/rows/0/tp", 1e30, published, "the 1.7B row: 'tp' = 1e+30 is out of range"},
      {"narayanan2021_table1.json", "/rows/0/tp", "eight", published, "the 1.7B row: 'tp' must be an integer"},
      {"narayanan2021_table1.json", "/rows/0/layers", -5, published, "'layers' = -5 is out of range"},
      {"narayanan2021_table1.json", "/rows/0/iteration_time_s_derived", 0, published,
       "'iteration_time_s_derived' = 0 is out of range"},
      {"korthikanti2022.json", "/configs/0/tp", 3, published, "22B: 8 GPUs do not split over tp 3 × pp 1"},
      {"korthikanti2022.json", "/table5_iteration_time_s/full_recompute/22B", "fast", published,
       "the full_recompute time must be a positive number of seconds"},
      {"h100_public.json", "/rows/0/tp", 1e30, runs, "row 'nemo2407-GPT3-5B-64': 'tp' = 1e+30 is out of range"},
      {"h100_public.json", "/rows/0/model/layers", "many", runs, "model: 'layers' must be an integer"},
      {"h100_public.json", "/rows/0/fsdp", "yes", runs, "'fsdp' must be true or false"},
      {"h100_public.json", "/rows/0/source", 5, runs, "source: expected a JSON object"},
  };
  for (const auto& [file, pointer, value, command, expected] : cases) {
    edit(file, pointer, value);
    expect_bad_input(command, expected);
  }
}

// MoE and structure fields of the wrong type or value are bad input too, and so is a sequence longer
// than a model's learned positions (issue 19).
TEST(Cli, BadMoeFieldsAndSequencesBeyondLearnedPositionsAreOneLine) {
  const auto dir = scratch_dir();
  const std::string base = R"("model_type": "mixtral", "hidden_size": 512, "intermediate_size": 1024,
    "num_attention_heads": 8, "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 512)";
  const std::pair<std::string, std::string> cases[] = {
      {R"("num_local_experts": "8", "num_experts_per_tok": 2)", "'num_local_experts' must be an integer"},
      {R"("num_local_experts": 8, "num_experts_per_tok": 9)", "'num_experts_per_tok' = 9 is out of range"},
      {R"("num_local_experts": 8)", "missing field 'num_experts_per_tok'"},
      {R"("num_local_experts": 8, "num_experts_per_tok": 2, "head_dim": 0)", "'head_dim' = 0 is out of range"},
  };
  int i = 0;
  for (const auto& [fields, expected] : cases) {
    const auto path = dir / ("moe_bad" + std::to_string(i++) + ".json");
    write(path, "{" + fields + ", " + base + "}");
    expect_bad_input("plan --model " + path.string() + " --gpus 8 --global-batch 8", expected);
  }
  // GPT-2 has 1024 learned positions: 2048 cannot be trained without new ones.
  expect_bad_input("plan --model gpt2-small --gpus 8 --global-batch 8 --seq 2048",
                   "--seq: 2048 is beyond the 1024 learned positions");
}

// The plan says where its sequence length came from when --seq is absent: for Llama 3.1 the pretraining
// context (8192), not the RoPE-scaled 131072.
TEST(Cli, PlanSaysWhereItsSequenceLengthCameFrom) {
  const std::string config = std::string(LOOM_VALIDATION_DIR) + "/hf_configs/llama-3.1-8b/config.json";
  const auto r = testing::run_loom("plan --model " + config + " --gpus 64 --global-batch 512 --top 1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("x 8192 tokens (sequence from the model's context: config.json "
                       "rope_scaling.original_max_position_embeddings"),
            std::string::npos)
      << r.out;
  const auto given = testing::run_loom("plan --model " + config + " --gpus 64 --global-batch 512 --seq 4096 --top 1");
  EXPECT_NE(given.out.find("x 4096 tokens (sequence from --seq)"), std::string::npos) << given.out;
}

TEST(Cli, NoHalfWrittenFiles) {
  const auto dir = scratch_dir();
  const auto out = dir / "missing_folder" / "plan.txt";
  expect_bad_input(std::string("plan ") + kSpec + " --top 3 --out " + out.string(), "cannot write");
  EXPECT_FALSE(std::filesystem::exists(out));
  // A failed run leaves an existing output untouched.
  const auto kept = dir / "kept.txt";
  write(kept, "previous contents\n");
  expect_bad_input("plan --model llama2-7 --gpus 8 --global-batch 8 --out " + kept.string(), "did you mean");
  EXPECT_EQ(testing::slurp(kept), "previous contents\n");
}

TEST(Cli, PlanJsonFollowsTheContract) {
  const auto r = run_loom(std::string("plan ") + kSpec + " --format json --top 5");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["plans"].size(), 5u);
  EXPECT_TRUE(j["rejected"].is_array());
  for (const auto& p : j["plans"]) {
    for (const char* k : {"config", "step_time_s", "tokens_per_s", "tflops_per_gpu", "hw_tflops_per_gpu", "mfu",
                          "bubble_fraction", "exposed_comm_s", "fits", "memory_gib"})
      EXPECT_TRUE(p.contains(k)) << k;
    EXPECT_TRUE(p["fits"].get<bool>());
  }
  EXPECT_LE(j["plans"][0]["step_time_s"].get<double>(), j["plans"][4]["step_time_s"].get<double>());
}

TEST(Cli, EmitPlanWritesWhatRunReads) {
  const auto plan_path = scratch_dir() / "winner.json";
  const auto r = run_loom(std::string("plan ") + kSpec + " --top 1 --emit-plan " + plan_path.string());
  ASSERT_EQ(r.status, 0) << r.err;
  auto json = read_json_file(plan_path.string());
  ASSERT_TRUE(json.ok()) << json.error().message;
  auto plan = plan_from_json(*json);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->config.world_size(), 16);
  EXPECT_EQ(plan->model.name, "llama2-7b");
  ASSERT_TRUE(plan->predicted.has_value());
  EXPECT_GT(plan->predicted->step_time_s, 0.0);
}

// The planner ranks what `loom run` does not run yet (FP8, asked for): the plan is written, and stderr
// says so where the search can still be restricted. Zero-bubble, which wins on two stages otherwise, and
// op-level recompute run: no note.
TEST(Cli, EmitPlanSaysWhenRunCannotRunIt) {
  const auto path = scratch_dir() / "fp8.json";
  const std::string spec = "plan --model gpt-tiny --cluster dgx-h100 --gpus 2 --global-batch 8 --pp 2 --top 1 ";
  const auto fp8 = run_loom(spec + "--precision fp8 --emit-plan " + path.string());
  ASSERT_EQ(fp8.status, 0) << fp8.err;
  ASSERT_EQ(plan_from_json(*read_json_file(path.string()))->training.precision, Precision::kFp8);
  EXPECT_EQ(fp8.err, "loom: note: " + path.string() +
                         " holds a plan loom run cannot run yet (the executor does not run --precision fp8 yet (it "
                         "is planned and simulated)); restrict the search (--precision) for one it runs\n");
  for (const char* runs : {"", "--recompute op "}) {
    const auto runnable = run_loom(spec + runs + "--emit-plan " + path.string());
    ASSERT_EQ(runnable.status, 0) << runnable.err;
    const auto plan = plan_from_json(*read_json_file(path.string()));
    EXPECT_EQ(plan->config.schedule, Schedule::kZeroBubble) << runs;
    EXPECT_TRUE(runnable.err.empty()) << runs << runnable.err;
  }
}

TEST(Cli, SimJsonAndTrace) {
  const auto trace = scratch_dir() / "trace.json";
  const auto r =
      run_loom(std::string("sim ") + kSpec +
               " --tp 2 --pp 2 --dp 4 --micro-batch 2 --schedule 1f1b --format json --trace " + trace.string());
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* k : {"config", "step_time_s", "tokens_per_s", "mfu", "bubble_fraction", "exposed_comm_s",
                        "memory_gib", "memory_per_stage_gib", "critical_path"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["memory_per_stage_gib"].size(), 2u);
  const auto t = nlohmann::json::parse(testing::slurp(trace));
  EXPECT_GT(t["traceEvents"].size(), 100u);
}

// --gpu-cv: the step waits for the slowest GPU; `loom sim` shows the wait, the plan states the assumption,
// and without it neither appears.
TEST(Cli, StatedGpuVariationShowsAsAWaitForStragglers) {
  const auto base = run_loom(std::string("sim ") + kSpec + " --tp 2 --dp 8");
  const auto slow = run_loom(std::string("sim ") + kSpec + " --tp 2 --dp 8 --gpu-cv 0.03");
  ASSERT_EQ(base.status, 0) << base.err;
  ASSERT_EQ(slow.status, 0) << slow.err;
  EXPECT_EQ(base.out.find("stragglers"), std::string::npos);
  EXPECT_NE(slow.out.find("--gpu-cv 0.03)"), std::string::npos) << slow.out;
  const auto plan = run_loom(std::string("plan ") + kSpec + " --top 1 --gpu-cv 0.03");
  ASSERT_EQ(plan.status, 0) << plan.err;
  EXPECT_NE(plan.out.find("# stragglers: each GPU's speed differs persistently by 3.0 %"), std::string::npos)
      << plan.out;
}

TEST(Cli, TableStatesItsAssumptions) {
  const auto r = run_loom(std::string("plan ") + kSpec + " --top 3 --tokens 2e12");
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* k : {"# model llama2-7b", "# precision:", "framework reserve", "# cluster dgx-a100-80gb", "days"})
    EXPECT_NE(r.out.find(k), std::string::npos) << k;
  EXPECT_TRUE(r.err.empty()) << "piped output shows no progress bar: " << r.err;
}

// --framework: the stack's behaviours show in the table's assumptions, what it cannot run is
// rejected for that reason (--explain), and `loom frameworks` lists every behaviour's source.
TEST(Cli, FrameworkAppliesItsBehavioursAndLimits) {
  const auto r = run_loom(std::string("plan ") + kSpec + " --framework megatron-lm-2021 --top 3 --explain");
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* k : {"# software: --framework megatron-lm-2021; gradients reduced after the backward; TP "
                        "input-gradient reduction after the weight-gradient GEMM; pipeline sends block the next pass",
                        "unfused attention", "4-byte grads", "not run by the --framework"})
    EXPECT_NE(r.out.find(k), std::string::npos) << k << "\n" << r.out;
  // DeepSpeed's ZeRO-3 differs from Loom's default in its unit and its prefetch, and says so; a flag wins.
  const auto ds = run_loom(std::string("plan ") + kSpec + " --framework deepspeed --top 1");
  ASSERT_EQ(ds.status, 0) << ds.err;
  EXPECT_NE(ds.out.find("; ZeRO-3 gathers each linear module, prefetching 5e+07 parameter elements ahead "
                        "(--zero3-prefetch)"),
            std::string::npos)
      << ds.out;
  const auto deeper = run_loom(std::string("plan ") + kSpec + " --framework deepspeed --zero3-prefetch 2e8 --top 1");
  ASSERT_EQ(deeper.status, 0) << deeper.err;
  EXPECT_NE(deeper.out.find("prefetching 2e+08 parameter elements ahead"), std::string::npos) << deeper.out;
  EXPECT_EQ(r.out.find("ZeRO-3 gathers"), std::string::npos) << r.out;  // Megatron-LM 2021: no ZeRO-3 to describe
  const auto list = run_loom("frameworks");
  ASSERT_EQ(list.status, 0) << list.err;
  for (const char* k : {"megatron-lm-2021", "megatron-core", "torchtitan", "megatron/training.py train_step", "FSDP2",
                        "stage3_prefetch_bucket_size"})
    EXPECT_NE(list.out.find(k), std::string::npos) << k;
}

// --zero3-prefetch describes ZeRO-3's gathers: `sim` of a layout without them refuses it in one line (it
// changed nothing, silently), and takes it at ZeRO-3, where DeepSpeed's per-module gathers over 1,536 ranks
// wait less with a deeper prefetch.
TEST(Cli, SimTakesZero3PrefetchOnlyForZero3) {
  const std::string sim =
      "sim --model gpt3-175b --cluster dgx-a100-80gb --gpus 1536 --global-batch 1536 --tp 1 --pp 1 --framework "
      "deepspeed";
  for (const char* zero : {"0", "1", "2"})
    expect_bad_input(sim + " --zero " + zero + " --zero3-prefetch 5e7",
                     std::string("--zero3-prefetch: applies to --zero 3 only (zero is ") + zero + ")");
  const auto step = [&](const std::string& extra) {
    const auto r = run_loom(sim + " --zero 3 --format json" + extra);
    EXPECT_EQ(r.status, 0) << r.err;
    return r.status == 0 ? nlohmann::json::parse(r.out)["step_time_s"].get<double>() : 0.0;
  };
  const double one_unit = step(" --zero3-prefetch 0"), deep = step(" --zero3-prefetch 1e12");
  EXPECT_GT(one_unit, 0);
  EXPECT_LT(deep, one_unit);
}

// --framework a,b in `plan`: each stack is searched as if named alone, and their rows are ranked together,
// each naming its stack, with one precision and software line per stack; --emit-plan writes the fastest
// row's stack.
TEST(Cli, SeveralFrameworksAreRankedTogether) {
  const std::string space = std::string(kSpec) + " --tp 1,2 --pp 1,2 --micro-batch 1,2 --format json";
  const auto core = run_loom("plan " + space + " --framework megatron-core");
  const auto titan = run_loom("plan " + space + " --framework torchtitan");
  const auto plan_path = scratch_dir() / "two-stacks.json";
  const auto both =
      run_loom("plan " + space + " --framework megatron-core,torchtitan --emit-plan " + plan_path.string());
  ASSERT_EQ(core.status, 0) << core.err;
  ASSERT_EQ(titan.status, 0) << titan.err;
  ASSERT_EQ(both.status, 0) << both.err;
  const auto c = nlohmann::json::parse(core.out), t = nlohmann::json::parse(titan.out),
             m = nlohmann::json::parse(both.out);
  ASSERT_GT(c["plans"].size(), 0u);
  ASSERT_GT(t["plans"].size(), 0u);
  ASSERT_EQ(m["plans"].size(), c["plans"].size() + t["plans"].size());
  EXPECT_EQ(m["rejected"].size(), c["rejected"].size() + t["rejected"].size());
  // Every merged row is its own stack's row, step for step, and the merged list is ranked by step.
  std::map<std::string, int> rows_of;
  double previous = 0;
  for (const auto& row : m["plans"]) {
    const std::string stack = row["framework"];
    ++rows_of[stack];
    const auto& alone = stack == "megatron-core" ? c["plans"] : t["plans"];
    const auto same =
        std::find_if(alone.begin(), alone.end(), [&](const auto& r) { return r["config"] == row["config"]; });
    ASSERT_NE(same, alone.end()) << stack << " " << row["config"].dump();
    EXPECT_EQ((*same)["step_time_s"], row["step_time_s"]);
    EXPECT_EQ((*same)["framework"], stack);
    EXPECT_GE(row["step_time_s"].get<double>(), previous);
    previous = row["step_time_s"];
  }
  EXPECT_EQ(rows_of["megatron-core"], static_cast<int>(c["plans"].size()));
  EXPECT_EQ(rows_of["torchtitan"], static_cast<int>(t["plans"].size()));
  // torchtitan has no ZeRO-1: those layouts are rejected under its name only.
  bool titan_zero1 = false;
  for (const auto& r : m["rejected"]) {
    const std::string reason = r["reason"];
    EXPECT_EQ(reason.rfind(r["framework"].get<std::string>() + ": ", 0), 0u) << reason;
    titan_zero1 = titan_zero1 || reason.rfind("torchtitan: ZeRO-1", 0) == 0;
  }
  EXPECT_TRUE(titan_zero1);
  auto plan = plan_from_json(*read_json_file(plan_path.string()));
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->training.framework, m["plans"][0]["framework"].get<std::string>());

  const auto table = run_loom(std::string("plan ") + kSpec + " --top 4 --framework megatron-core,torchtitan");
  ASSERT_EQ(table.status, 0) << table.err;
  for (const char* k :
       {"# software: --framework megatron-core;", "# software: --framework torchtitan;",
        "# precision under megatron-core: 2-byte params, 2-byte grads",
        "# precision under torchtitan: 2-byte params, 4-byte grads", "over 2 software stacks", "  framework\n"})
    EXPECT_NE(table.out.find(k), std::string::npos) << k << "\n" << table.out;
}

TEST(Cli, VersionNamesBackends) {
  const auto r = run_loom("--version");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("backends: cpu"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace loom
