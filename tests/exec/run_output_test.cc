// What `loom run` writes: the JSONL log of DESIGN.md's contract and a Chrome trace per rank whose
// slice names are the simulator's (core/trace_names.h), from a real 2-stage pipeline under mpirun.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include "core/flops.h"
#include "core/json_io.h"
#include "core/presets.h"
#include "core/trace_names.h"
#include "exec/backend.h"
#include "run_util.h"

namespace loom::exec::testing {
namespace {

TEST(ExecRunOutput, LogHasTheContractFieldsAndTraceUsesSimulatorNames) {
  if (!have_mpirun()) GTEST_SKIP() << "built without MPI";
  const std::string dir = scratch_dir("run_output");
  const std::string data = make_token_file(dir, 20000);
  const int steps = 2, micro_batches = 4;
  const ProcessResult r =
      run_shell(fmt::format("{} --model {} --data {} --steps {} --global-batch {} --pp 2 --threads 1 --log "
                            "{}/log.jsonl --trace {}/trace.json",
                            loom_run(2), test_model("micro"), data, steps, micro_batches, dir, dir));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("step     2/2 | loss"), std::string::npos) << r.out;

  const std::vector<Json> log = read_jsonl(dir + "/log.jsonl");
  ASSERT_EQ(log.size(), static_cast<std::size_t>(steps + 1));
  for (int i = 0; i < steps; ++i) {
    const Json& rec = log[i];
    EXPECT_EQ(rec["step"], i + 1);
    for (const char* key : {"loss", "step_time_s", "tokens_per_s", "tflops_per_gpu"}) {
      ASSERT_TRUE(rec.contains(key)) << key;
      EXPECT_GT(rec[key].get<double>(), 0.0) << key;
    }
    for (const char* cat : {"params", "grads", "optimizer", "activations", "buffers", "total"})
      EXPECT_TRUE(rec["memory_peak_gib"].contains(cat)) << cat;
    EXPECT_GT(rec["memory_peak_gib"]["params"].get<double>(), 0.0);
  }
  ASSERT_EQ(log.back()["ranks"].size(), 2u);  // every rank's peaks at the end

  for (int stage = 0; stage < 2; ++stage) {
    auto trace = read_json_file(fmt::format("{}/trace.rank{}.json", dir, stage));
    ASSERT_TRUE(trace.ok()) << trace.error().message;
    int forwards = 0, backwards = 0, optimizer = 0, p2p = 0;
    for (const Json& e : (*trace)["traceEvents"]) {
      if (e["ph"] != "X") continue;
      const std::string name = e["name"];
      for (int mb = 0; mb < micro_batches; ++mb) {
        forwards += name == trace_names::forward(stage, mb);
        backwards += name == trace_names::backward(stage, mb);
      }
      optimizer += name == trace_names::kOptimizer;
      p2p += name.rfind(stage == 0 ? "send F0 mb" : "recv F0 mb", 0) == 0;
      EXPECT_EQ(e["pid"], stage);
    }
    EXPECT_EQ(forwards, steps * micro_batches) << "stage " << stage;
    EXPECT_EQ(backwards, steps * micro_batches) << "stage " << stage;
    EXPECT_EQ(optimizer, steps);
    EXPECT_EQ(p2p, steps * micro_batches);

    // Inside the passes, every op of every layer, of the embedding and of the head is a slice named like
    // the simulator's kernels (sim/cost_model.cc), nested in a pass on the compute lane, none overlapping
    // another, and shorter in total than the passes. The slices are timed by the backend's clock
    // (Tracer::use_clock_of: the host's here, CUDA events on a GPU).
    std::map<std::string, int> ops;
    std::vector<std::pair<double, double>> op_spans, passes;
    double op_us = 0, pass_us = 0;
    for (const Json& e : (*trace)["traceEvents"]) {
      if (e["ph"] != "X") continue;
      const std::string name = e["name"];
      const double ts = e["ts"].get<double>(), dur = e["dur"].get<double>();
      if (e["cat"] == "op") {
        ++ops[name];
        op_us += dur;
        op_spans.emplace_back(ts, ts + dur);
        EXPECT_EQ(e["tid"], 0) << name;
        EXPECT_GE(dur, 0.0) << name;
      } else if (name[0] == 'F' || name[0] == 'B') {
        pass_us += dur;
        passes.emplace_back(ts, ts + dur);
      }
    }
    const int layers_here = 2;  // micro.json: 4 layers over 2 stages
    const int passes_here = steps * micro_batches;
    for (const char* name : {"qkv", "qk softmax", "av", "attn_out", "mlp_up", "gelu", "mlp_down", "qkv_bwd",
                             "attention_bwd", "attn_out_bwd", "mlp_up_bwd", "gelu_bwd", "mlp_down_bwd"})
      EXPECT_EQ(ops[name], passes_here * layers_here) << name << " on stage " << stage;
    EXPECT_EQ(ops["norm"], 2 * passes_here * layers_here);
    // The first stage's embedding (lookup, then the learned positions and dropout, around the TP sum) and
    // the last stage's head; the cross-entropy is cut by its TP all-reduces: at TP 1 only by the sum's
    // (one pass gives the max and the sum), by the max's too otherwise.
    const std::map<std::string, int> ends =
        stage == 0 ? std::map<std::string, int>{{"embedding", 2}, {"embedding_bwd", 2}}
                   : std::map<std::string, int>{{"final_norm", 1},        {"lm_head", 1},     {"cross_entropy", 2},
                                                {"cross_entropy_bwd", 1}, {"lm_head_bwd", 2}, {"final_norm_bwd", 1}};
    for (const auto& [name, per_pass] : ends) EXPECT_EQ(ops[name], per_pass * passes_here) << name;
    for (const char* name : {"embedding", "lm_head"}) EXPECT_EQ(ops.count(name) > 0, (stage == 0) == (name[0] == 'e'));
    std::sort(op_spans.begin(), op_spans.end());
    for (std::size_t i = 1; i < op_spans.size(); ++i)
      EXPECT_LE(op_spans[i - 1].second, op_spans[i].first + 1e-3) << "op slices overlap on stage " << stage;
    for (const auto& [begin, end] : op_spans)
      EXPECT_TRUE(std::any_of(passes.begin(), passes.end(),
                              [&](const auto& p) { return p.first <= begin + 1e-3 && end <= p.second + 1e-3; }))
          << "an op slice at " << begin << " us outside every pass on stage " << stage;
    EXPECT_GT(op_us, 0.0);
    EXPECT_LT(op_us, pass_us);
  }
}

// The op slices of a traced run of 2 steps of 2 micro-batches on one rank, counted by name.
std::map<std::string, int> traced_op_counts(const std::string& scratch, const std::string& model,
                                            const std::string& flags) {
  const std::string dir = scratch_dir(scratch);
  const std::string data = make_token_file(dir, 20000);
  const ProcessResult r =
      run_shell(fmt::format("{} --model {} --data {} --steps 2 --global-batch 2 {} --threads 1 --trace {}/trace.json",
                            loom_run(1), test_model(model), data, flags, dir));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, int> ops;
  auto trace = read_json_file(dir + "/trace.json");
  EXPECT_TRUE(trace.ok()) << (trace.ok() ? "" : trace.error().message);
  if (!trace.ok()) return ops;
  for (const Json& e : (*trace)["traceEvents"])
    if (e["ph"] == "X" && e["cat"] == "op") ++ops[e["name"].get<std::string>()];
  return ops;
}

// Full recomputation runs each layer's forward again in the backward; the trace names those ops
// "recompute <op>", as the simulator names its recomputed kernels, so the forward's own slices count once
// per pass.
TEST(ExecRunOutput, FullRecomputeSlicesAreNamedAsTheSimulatorNamesThem) {
  std::map<std::string, int> ops = traced_op_counts("run_output_full", "micro", "--recompute full");
  const int per_run = 2 * 2 * 4;  // steps × micro-batches × layers
  for (const char* name : {"qkv", "qk softmax", "av", "attn_out", "mlp_up", "gelu", "mlp_down"}) {
    EXPECT_EQ(ops[name], per_run) << name;
    EXPECT_EQ(ops[std::string("recompute ") + name], per_run) << name;
  }
  EXPECT_EQ(ops["recompute norm"], 2 * per_run);
  EXPECT_EQ(ops["qkv_bwd"], per_run);
  EXPECT_EQ(ops["recompute qkv_bwd"], 0);
  EXPECT_EQ(ops["recompute lm_head"], 0);
  EXPECT_EQ(ops["attn_dropout"], 0);  // the micro model has no dropout
}

// With dropout, the attention's mask and its application are a slice of their own, "attn_dropout" as
// the simulator names it, apart from the scores and their softmax ("qk softmax"), in the forward and in
// selective recomputation's rebuild of the attention core.
TEST(ExecRunOutput, AttentionDropoutIsASliceOfItsOwn) {
  std::map<std::string, int> ops =
      traced_op_counts("run_output_attn_dropout", "micro_dropout", "--recompute selective --attention unfused");
  const int per_run = 2 * 2 * 4;
  for (const char* name : {"qk softmax", "attn_dropout", "recompute qk softmax", "recompute attn_dropout", "av"})
    EXPECT_EQ(ops[name], per_run) << name;
}

// Context parallelism's ring in the trace, named as loom sim --cp names it (core/trace_names.h): each
// layer's attention is cp tiles on the compute lane, the next block's K, V beside each tile on the comm
// lane, and in the backward each block's summed dK, dV sent on after its tile.
TEST(ExecRunOutput, RingAttentionStepsUseSimulatorNames) {
  if (!have_mpirun()) GTEST_SKIP() << "built without MPI";
  const std::string dir = scratch_dir("run_output_cp");
  const std::string data = make_token_file(dir, 20000);
  const int steps = 2, micro_batches = 2, layers = 4;
  const ProcessResult r = run_shell(
      fmt::format("{} --model {} --data {} --steps {} --global-batch {} --cp 2 --threads 1 --trace {}/trace.json",
                  loom_run(2), test_model("micro"), data, steps, micro_batches, dir));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const int per_step = steps * micro_batches * layers;
  for (int rank = 0; rank < 2; ++rank) {
    auto trace = read_json_file(fmt::format("{}/trace.rank{}.json", dir, rank));
    ASSERT_TRUE(trace.ok()) << trace.error().message;
    std::map<std::pair<std::string, int>, int> slices;  // (name, lane)
    for (const Json& e : (*trace)["traceEvents"])
      if (e["ph"] == "X") ++slices[{e["name"].get<std::string>(), e["tid"].get<int>()}];
    for (int step = 0; step < 2; ++step) {
      EXPECT_EQ((slices[{trace_names::cp_ring_tile(false, step, 2), 0}]), per_step) << rank;
      EXPECT_EQ((slices[{trace_names::cp_ring_tile(true, step, 2), 0}]), per_step) << rank;
      EXPECT_EQ((slices[{trace_names::cp_ring_send(step, 2, "dkv"), 1}]), per_step) << rank;  // backward only
    }
    // K, V: the next block travels in the forward and again in the backward; the last block stays.
    EXPECT_EQ((slices[{trace_names::cp_ring_send(0, 2, "kv"), 1}]), 2 * per_step) << rank;
    EXPECT_EQ((slices[{trace_names::cp_ring_send(1, 2, "kv"), 1}]), 0) << rank;
    EXPECT_EQ((slices[{"qk softmax", 0}]), 0) << rank;  // no s × s probabilities
  }
}

TEST(ExecRunOutput, LoggedTflopsCountTheModelsVocabularyAsLoomSimDoes) {
  const std::string dir = scratch_dir("run_flops");
  const std::string data = make_token_file(dir, 5000);
  auto json = read_json_file(test_model("micro"));
  ASSERT_TRUE(json.ok());
  ModelSpec model = *model_from_json(*json);
  model.vocab = 200;  // TP pads it to 256: counting the padding would show
  ASSERT_NE(padded_vocab(model.vocab, 1), model.vocab);
  std::ofstream(dir + "/model.json") << to_json(model).dump(2);
  const ProcessResult r =
      run_shell(fmt::format("{} --model {}/model.json --data {} --steps 1 --global-batch 2 "
                            "--threads 1 --log {}/log.jsonl",
                            loom_run(1), dir, data, dir));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json record = read_jsonl(dir + "/log.jsonl").front();
  const double flops = record["tflops_per_gpu"].get<double>() * 1e12 * record["step_time_s"].get<double>();
  const double expected = model_flops_per_step(model, 2, model.seq_len);
  EXPECT_NEAR(flops, expected, 1e-9 * expected);
}

TEST(ExecRunOutput, DataPrepareWritesByteTokens) {
  const std::string dir = scratch_dir("data_prepare");
  std::ofstream(dir + "/in.txt") << "Loom\n";
  const ProcessResult ok =
      run_shell(fmt::format("{} data prepare --input {}/in.txt --out {}/t.bin", loom_binary(), dir, dir));
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  std::ifstream in(dir + "/t.bin", std::ios::binary);
  std::int32_t header[256];
  in.read(reinterpret_cast<char*>(header), sizeof(header));
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  ASSERT_EQ(header[2], 5);
  std::uint16_t tokens[5];
  in.read(reinterpret_cast<char*>(tokens), sizeof(tokens));
  EXPECT_EQ(tokens[0], 'L');
  EXPECT_EQ(tokens[4], '\n');
  const ProcessResult missing =
      run_shell(fmt::format("{} data prepare --input {}/none.txt --out {}/u.bin", loom_binary(), dir, dir));
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("none.txt"), std::string::npos);
  // A directory given as the text: one line naming it (it was read as a stream that failed mid-read,
  // "a bug in Loom", exit 1).
  const ProcessResult directory =
      run_shell(fmt::format("{} data prepare --input {} --out {}/v.bin", loom_binary(), dir, dir));
  EXPECT_EQ(directory.exit_code, 2) << directory.err;
  EXPECT_NE(directory.err.find("is a directory"), std::string::npos) << directory.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/v.bin"));
}

// An unknown backend, and --backend cuda where it cannot start (a build without CUDA, or no device), are
// bad input with make_backend's one line; with a device the cuda run trains (GpuTrain checks how well).
TEST(ExecRunOutput, UnavailableBackendIsBadInput) {
  const std::string dir = scratch_dir("backend");
  const std::string data = make_token_file(dir, 5000);
  auto run = [&](const std::string& backend) {
    return run_shell(
        fmt::format("{} --seq 32 --global-batch 1 --data {} --steps 1 --backend {}", loom_run(1), data, backend), 60);
  };
  const ProcessResult unknown = run("tpu");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("--backend: unknown backend 'tpu'"), std::string::npos) << unknown.err;
  std::string why;
  const bool cuda_starts = make_backend("cuda", &why) != nullptr;
  const ProcessResult cuda = run("cuda");
  if (cuda_starts) {
    EXPECT_EQ(cuda.exit_code, 0) << cuda.err;
  } else {
    EXPECT_EQ(cuda.exit_code, 2);
    EXPECT_NE(cuda.err.find(why), std::string::npos) << "expected '" << why << "' in: " << cuda.err;
  }
}

TEST(ExecRunOutput, ModelStatesThatDoNotFitAreBadInput) {
  const std::string dir = scratch_dir("too_big");
  const std::string data = make_token_file(dir, 5000);
  const ProcessResult r = run_shell(
      fmt::format("{} --model gpt3-175b --seq 128 --global-batch 1 --data {} --steps 1", loom_run(1), data), 60);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("GiB per rank for parameters, gradients and optimizer states"), std::string::npos) << r.err;
}

TEST(ExecRunOutput, RunsAPlanFile) {
  if (!have_mpirun()) GTEST_SKIP() << "built without MPI";
  const std::string dir = scratch_dir("run_plan");
  const std::string data = make_token_file(dir, 20000);
  auto model = read_json_file(test_model("micro"));
  ASSERT_TRUE(model.ok());
  Plan plan;
  plan.model = *model_from_json(*model);
  plan.cluster = "local-cpu";
  plan.training.gpus = 2;
  plan.training.global_batch = 4;
  plan.training.seq_len = 32;
  plan.config.tp = 2;
  plan.config.sequence_parallel = true;
  std::ofstream(dir + "/plan.json") << to_json(plan).dump(2);
  const ProcessResult r =
      run_shell(fmt::format("{} --plan {}/plan.json --data {} --steps 2 --threads 1", loom_run(2), dir, data));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("tp2 pp1 dp1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step     2/2"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace loom::exec::testing
