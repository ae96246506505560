// `loom profile` under mpirun writes a cost file the simulator accepts, with provenance, raw
// points and α–β fits that are the fits of those points; `loom validate --profile` runs a
// 3-configuration subset end to end with every field of DESIGN.md's JSON contract; bad input
// ends with one line and exit status 2.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include "core/json_io.h"
#include "core/stats.h"
#include "run_util.h"
#include "sim/collectives.h"

namespace loom::exec::testing {
namespace {

std::string mpirun(int ranks) {
  return fmt::format("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 {} --oversubscribe -np {} {}",
                     LOOM_MPIEXEC, ranks, loom_binary());
}

int lines(const std::string& text) {
  int n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

// Under mpirun the launcher adds its own report of a non-zero exit; Loom's own lines start "loom:".
int loom_lines(const std::string& text) {
  int n = 0;
  for (std::size_t at = 0; at < text.size(); at = text.find('\n', at) + 1) {
    n += text.compare(at, 5, "loom:") == 0;
    if (text.find('\n', at) == std::string::npos) break;
  }
  return n;
}

// One quick 2-rank profile per test process, shared by the tests that read it.
class ProfileQuick : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!have_mpirun()) return;
    dir_ = scratch_dir("profile");
    path_ = dir_ + "/cost.json";
    result_ = run_shell(mpirun(2) + fmt::format(" profile --backend cpu --quick --out {}", path_), 300);
  }
  void SetUp() override {
    if (!have_mpirun()) GTEST_SKIP() << "built without MPI: collectives cannot be measured";
    ASSERT_EQ(result_.exit_code, 0) << result_.err;
  }
  static inline std::string dir_, path_;
  static inline ProcessResult result_;
};

TEST_F(ProfileQuick, WritesCostFileTheSimulatorAccepts) {
  auto json = read_json_file(path_);
  ASSERT_TRUE(json.ok()) << json.error().message;
  EXPECT_EQ((*json)["schema"], "loom-cost/1");
  auto cluster = cluster_from_json(*json);
  ASSERT_TRUE(cluster.ok()) << cluster.error().message;
  for (const char* key : {"host", "date", "loom_version", "gemm_library", "mpi_library", "compiler", "cpu"})
    EXPECT_FALSE(cluster->provenance[key].empty()) << "provenance." << key;
  EXPECT_GT(cluster->device.peak_flops, 1e8);  // any CPU of this century does 0.1 GFLOP/s in fp32
  EXPECT_GT(cluster->device.memory_bandwidth_bytes_per_s, 1e8);
  EXPECT_GT(cluster->compute.memory_bound_efficiency, 0.0);
  EXPECT_GT(cluster->gemm_table.size(), 20u);
  // Timed with both ranks running and with rank 0 alone: every GEMM shape under both tags, and the
  // memory-bound ops (softmax points are derived by subtracting timed matmuls, so a noisy host
  // can leave one out of either set) and the optimizer step under both.
  std::map<int, int> gemms_by_ranks;
  std::map<int, std::set<std::string>> ops_by_ranks;
  for (const auto& g : cluster->gemm_table) ++gemms_by_ranks[g.ranks];
  for (const auto& o : cluster->memory_op_table) ops_by_ranks[o.ranks].insert(o.op);
  EXPECT_EQ(gemms_by_ranks.size(), 2u);
  EXPECT_EQ(gemms_by_ranks[1], gemms_by_ranks[2]);
  for (int ranks : {1, 2})
    for (const char* op : {"norm", "gelu_bwd", "residual", "optimizer"})
      EXPECT_TRUE(ops_by_ranks[ranks].count(op)) << op << " " << ranks;
  // Raw points from 1 KiB to 1 MiB (the --quick sweep) for every collective on the pair.
  std::map<std::string, std::pair<double, double>> range;
  for (const auto& p : cluster->collective_points) {
    EXPECT_EQ(p.group_size, 2);
    auto& [lo, hi] = range.try_emplace(p.collective, 1e30, 0.0).first->second;
    lo = std::min(lo, p.bytes);
    hi = std::max(hi, p.bytes);
  }
  for (const char* c : {"all_reduce", "reduce_scatter", "all_gather", "send_recv"}) {
    ASSERT_TRUE(range.count(c)) << c;
    EXPECT_EQ(range[c].first, 1024.0) << c;
    EXPECT_EQ(range[c].second, 1024.0 * 1024.0) << c;
  }
  // nccl-tests-style table: column names, then units.
  EXPECT_NE(result_.out.find("busbw"), std::string::npos) << result_.out;
  EXPECT_NE(result_.out.find("(GB/s)"), std::string::npos);
  EXPECT_NE(result_.out.find("R2"), std::string::npos);
}

TEST_F(ProfileQuick, FitsAreTheFitsOfTheStoredPoints) {
  auto cluster = cluster_from_json(*read_json_file(path_));
  ASSERT_TRUE(cluster.ok());
  const std::map<std::string, sim::Collective> kinds = {{"all_reduce", sim::Collective::kAllReduce},
                                                        {"reduce_scatter", sim::Collective::kReduceScatter},
                                                        {"all_gather", sim::Collective::kAllGather},
                                                        {"send_recv", sim::Collective::kSendRecv}};
  // One or more regimes per collective, each the least-squares line of its own stored points.
  std::map<std::string, int> regimes;
  for (const auto& fit : cluster->collective_fits) ++regimes[fit.collective];
  ASSERT_EQ(regimes.size(), 4u);
  for (const auto& [name, count] : regimes) {
    std::vector<std::pair<double, double>> points;
    for (const auto& p : cluster->collective_points)
      if (p.collective == name) points.emplace_back(p.bytes, p.seconds);
    const sim::RegimeFit again = sim::fit_alpha_beta_regimes(kinds.at(name), 2, points);
    ASSERT_EQ(static_cast<int>(again.regimes.size()), count) << name;
    int i = 0;
    for (const auto& fit : cluster->collective_fits) {
      if (fit.collective != name) continue;
      const sim::AlphaBetaRegime& r = again.regimes[static_cast<std::size_t>(i++)];
      EXPECT_NEAR(fit.alpha_s, r.ab.alpha_s, 1e-9 + 1e-6 * r.ab.alpha_s) << name;
      EXPECT_NEAR(fit.bus_bandwidth_bytes_per_s, r.ab.bus_bandwidth_bytes_per_s, 1e-6 * r.ab.bus_bandwidth_bytes_per_s);
      EXPECT_DOUBLE_EQ(fit.min_bytes, r.min_bytes);
      EXPECT_DOUBLE_EQ(fit.max_bytes, r.max_bytes);
      EXPECT_LE(fit.r2, 1.0);
      EXPECT_GT(fit.bus_bandwidth_bytes_per_s, 1e6) << name;  // shared memory moves more than 1 MB/s
    }
    EXPECT_NEAR(std::stod(cluster->provenance.at("alpha_beta_r2_" + name + "_intra_node_2")), again.r2, 1e-5);
  }
  // The pipeline sends of the simulator read the link: it carries the measured pair's figures.
  std::vector<std::pair<double, double>> pairs;
  for (const auto& p : cluster->collective_points)
    if (p.collective == "send_recv") pairs.emplace_back(p.bytes, p.seconds);
  const sim::AlphaBeta line = sim::fit_alpha_beta(sim::Collective::kSendRecv, 2, pairs);
  EXPECT_NEAR(cluster->intra_node.latency_s, line.alpha_s, 1e-9 + 1e-6 * line.alpha_s);
  EXPECT_NEAR(cluster->intra_node.bandwidth_bytes_per_s, line.bus_bandwidth_bytes_per_s,
              1e-6 * line.bus_bandwidth_bytes_per_s);

  // The fused attention, timed at the validation model's micro-batches 1 and 8 (--quick): through two
  // points the curve e(w) = E·w/(w + H) passes exactly, where one fits (E ≤ 1, H ≥ 0); else E is the
  // better point's efficiency, flat.
  const Json flash = (*read_json_file(path_))["measurements"]["flash_attention"];
  ASSERT_EQ(flash.size(), 2u);
  const ComputeEfficiency& c = cluster->compute;
  ASSERT_GT(c.flash_attention_efficiency, 0.0);
  ASSERT_LE(c.flash_attention_efficiency, 1.0);
  EXPECT_NE(cluster->provenance.at("flash_attention_fit").find("2 point(s)"), std::string::npos);
  double best = 0;
  for (const Json& p : flash) {
    const double w = 3.5 * p["forward_flops"].get<double>(),
                 e = w / ((p["forward_seconds"].get<double>() + p["backward_seconds"].get<double>()) *
                          cluster->device.peak_flops);
    best = std::max(best, e);
    if (c.flash_attention_half_saturation_flops > 0) {
      EXPECT_NEAR(c.flash_attention_efficiency * w / (w + c.flash_attention_half_saturation_flops), e, 1e-6 * e);
    }
  }
  if (c.flash_attention_half_saturation_flops == 0) {
    EXPECT_NEAR(c.flash_attention_efficiency, best, 1e-9);
  }
}

TEST_F(ProfileQuick, CalibrateFromExecutorTracesWritesCorrectedProfile) {
  // Two traced single-rank runs of gpt-tiny (micro-batches of 1 and 2), then the profile fitted
  // to both: each trace carries its run, so calibrate needs no layout flags.
  const std::string data = make_token_file(dir_, 20000);
  std::vector<std::string> traces;
  for (int mb : {1, 2}) {
    traces.push_back(fmt::format("{}/run-mb{}.trace.json", dir_, mb));
    const ProcessResult run =
        run_shell(mpirun(1) + fmt::format(" run --model gpt-tiny --data {} --global-batch 4 --micro-batch {} "
                                          "--steps 3 --threads 1 --trace {}",
                                          data, mb, traces.back()));
    ASSERT_EQ(run.exit_code, 0) << run.err;
    auto json = read_json_file(traces.back());
    ASSERT_TRUE(json.ok());
    EXPECT_EQ((*json)["otherData"]["loom_run"]["config"]["micro_batch"].get<int>(), mb);
  }
  const std::string out = dir_ + "/calibrated.json";
  const ProcessResult cal = run_shell(
      fmt::format("{} calibrate --cluster {} --trace {} {} --out {}", loom_binary(), path_, traces[0], traces[1], out));
  ASSERT_EQ(cal.exit_code, 0) << cal.err;
  for (const char* pass :
       {"run-mb1.trace.json stage 0 F0", "run-mb2.trace.json stage 0 B0", "run-mb2.trace.json stage 0 optimizer"})
    EXPECT_NE(cal.out.find(pass), std::string::npos) << cal.out;
  auto calibrated = cluster_from_json(*read_json_file(out));
  ASSERT_TRUE(calibrated.ok()) << calibrated.error().message;
  auto measured = cluster_from_json(*read_json_file(path_));
  const double scale = std::stod(calibrated->provenance["calibration_gemm_scale"]);
  EXPECT_GT(scale, 0.0);
  // The whole GEMM table moved by the fitted factor (printed with four decimals), and the measured
  // memory-bound ops with the efficiency.
  EXPECT_NEAR(calibrated->gemm_table.front().seconds / measured->gemm_table.front().seconds, scale,
              1e-4 * scale + 1e-4);
  ASSERT_FALSE(measured->memory_op_table.empty());
  const double fitted_efficiency = std::stod(calibrated->provenance["calibration_memory_bound_efficiency"]);
  // The provenance prints the efficiency to four decimals: its rounding (±5e-5) is the tolerance,
  // relative to the efficiency (a fit of 0.12 gives 4e-4 of the ratio).
  const double op_ratio = measured->compute.memory_bound_efficiency / fitted_efficiency;
  EXPECT_NEAR(calibrated->memory_op_table.front().seconds / measured->memory_op_table.front().seconds, op_ratio,
              op_ratio * (5e-5 / fitted_efficiency + 1e-6));
  EXPECT_NEAR(calibrated->compute.memory_bound_efficiency, std::min(1.0, fitted_efficiency),
              1e-4);  // printed to 4 places
  EXPECT_NE(calibrated->provenance["calibrated_from"].find(traces[0]), std::string::npos);

  // A repeat of the micro-batch-2 run taken in a slow spell (every slice twice as long) is left
  // out: the fastest trace of each run is kept, and the fit is the one above.
  auto slow = read_json_file(traces[1]);
  ASSERT_TRUE(slow.ok());
  for (auto& e : (*slow)["traceEvents"])
    if (e.contains("dur")) e["dur"] = 2.0 * e["dur"].get<double>();
  const std::string slow_path = dir_ + "/run-mb2-slow.trace.json";
  std::ofstream(slow_path) << slow->dump();
  const std::string again = dir_ + "/calibrated-again.json";
  const ProcessResult cal2 = run_shell(fmt::format("{} calibrate --cluster {} --trace {} {} {} --out {}", loom_binary(),
                                                   path_, slow_path, traces[0], traces[1], again));
  ASSERT_EQ(cal2.exit_code, 0) << cal2.err;
  EXPECT_NE(cal2.out.find("the fastest of each repeated run kept"), std::string::npos) << cal2.out;
  EXPECT_EQ(cal2.out.find("run-mb2-slow"), std::string::npos) << cal2.out;
  EXPECT_EQ(cluster_from_json(*read_json_file(again))->provenance["calibration_gemm_scale"],
            calibrated->provenance["calibration_gemm_scale"]);
}

TEST(ValidateSubset, JsonHasEveryContractField) {
  if (!have_mpirun()) GTEST_SKIP() << "built without MPI: the matrix runs under mpirun";
  const std::string dir = scratch_dir("validate");
  const std::string cost = dir + "/cost.json";
  const ProcessResult p = run_shell(mpirun(2) + fmt::format(" profile --backend cpu --quick --out {}", cost), 300);
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const auto validate = [&](const std::string& configs) {
    const ProcessResult v = run_shell(
        fmt::format(
            "{} validate --profile {} --configs {} --steps 3 --warmup 1 --format json --work-dir {} --mpirun {}",
            loom_binary(), cost, configs, dir + "/work", LOOM_MPIEXEC),
        600);
    EXPECT_EQ(v.exit_code, 0) << v.err;
    auto json = parse_json(v.out, "validate output");
    EXPECT_TRUE(json.ok()) << v.out;
    return json.ok() ? (*json)["rows"] : Json::array();
  };
  const auto step_ratio = [](const Json& r) {
    return r["predicted_step_time_s"].get<double>() / r["measured_step_time_s"].get<double>();
  };
  const Json rows = validate("single,dp2-zero1,pp2-1f1b-m4");
  ASSERT_EQ(rows.size(), 3u);
  for (const Json& r : rows) {
    for (const char* key :
         {"tp", "pp", "dp", "zero", "micro_batch", "vpp", "recompute", "sequence_parallel", "schedule"})
      EXPECT_TRUE(r["config"].contains(key)) << key;
    for (const char* key :
         {"predicted_step_time_s", "measured_step_time_s", "predicted_peak_memory_gib", "measured_peak_memory_gib"}) {
      ASSERT_TRUE(r.contains(key) && r[key].is_number()) << key;
      EXPECT_GT(r[key].get<double>(), 0.0) << r["name"] << " " << key;
    }
    ASSERT_TRUE(r.contains("oversubscribed") && r["oversubscribed"].is_boolean());
    // Two steps after a one-step warm-up.
    EXPECT_EQ(r["measured_step_times_s"].size(), 2u);
    // Memory, which the host's speed does not change, within the 5 % bar: simulating another model,
    // batch or layout shows here.
    EXPECT_LT(r["memory_error"].get<double>(), 0.05) << r["name"];
    // Step times only within two orders of magnitude (seconds read as milliseconds would show):
    // the quick profile times each op in a tight loop on warm memory, while this shared host has
    // measured whole runs 9-20x slower than that (first touch of a page 15-40 us instead of under
    // 1 us, a warm 256 MiB memset 0.04-1.4 s; see the README's "validate on a shared host").
    EXPECT_GT(step_ratio(r), 0.01) << r["name"];
    EXPECT_LT(step_ratio(r), 100.0) << r["name"];
    ASSERT_EQ(r["round_step_times_s"].size(), 1u);  // one round by default
    EXPECT_DOUBLE_EQ(r["round_step_times_s"][0].get<double>(), r["measured_step_time_s"].get<double>());
  }
  EXPECT_EQ(rows[1]["per_rank"].size(), 2u);  // DP2: both ranks' peaks
  // A slow host slows every layout alike (CI measured 0.048/0.053/0.063 and 0.045/0.080/0.092 for
  // these three rows); a layout simulated wrong (its bubble, its micro-batch count, its collective
  // left out or doubled) moves its own row away from the others.
  std::vector<double> ratios;
  for (const Json& r : rows) ratios.push_back(step_ratio(r));
  const double median = loom::median(ratios);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_GT(ratios[i] / median, 1.0 / 3.0) << rows[i]["name"];
    EXPECT_LT(ratios[i] / median, 3.0) << rows[i]["name"];
  }
}

// The GPU matrix as `--dry-run` lists it against the dgx-h100 preset (no GPU needed): at least 12
// single-GPU configurations spanning model size, micro-batch, gradient accumulation, recompute
// none/selective/full, sequence length and flash/unfused attention, each fitting an 80 GB GPU by the
// memory model, then 2-GPU
// layouts; and each predicted step is what `loom sim` gives for the executor's bf16 training.
TEST(ValidateGpuMatrix, DryRunSpansTheDimensionsAndFitsAnH100) {
  const ProcessResult r =
      run_shell(loom_binary() + " validate --profile dgx-h100 --backend cuda --dry-run --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto json = parse_json(r.out, "dry run");
  ASSERT_TRUE(json.ok()) << r.out;
  EXPECT_EQ((*json)["backend"], "cuda");
  EXPECT_TRUE((*json)["dry_run"].get<bool>());
  std::set<std::string> models, recomputes, names, attentions;
  std::map<std::string, std::set<int>> seqs;
  int single = 0, accumulating = 0, multi = 0;
  for (const Json& row : (*json)["rows"]) {
    const std::string name = row["name"];
    EXPECT_TRUE(names.insert(name).second) << "two configurations named " << name;
    EXPECT_TRUE(row["fits"].get<bool>()) << name;
    EXPECT_LT(row["predicted_peak_memory_gib"].get<double>(), 80.0) << name;
    EXPECT_GT(row["predicted_step_time_s"].get<double>(), 0.0) << name;
    const int ranks = row["ranks"].get<int>();
    if (ranks > 1) {
      ++multi;
      continue;
    }
    ++single;
    models.insert(row["model"].get<std::string>());
    recomputes.insert(row["config"]["recompute"].get<std::string>());
    attentions.insert(row["attention"].get<std::string>());
    seqs[row["model"]].insert(row["seq_len"].get<int>());
    accumulating += row["global_batch"].get<int>() / row["config"]["micro_batch"].get<int>() >= 4;
  }
  EXPECT_GE(single, 12);
  EXPECT_GE(multi, 3);
  EXPECT_GE(models.size(), 3u);
  EXPECT_EQ(recomputes, (std::set<std::string>{"none", "selective", "full", "op"}));
  EXPECT_EQ(attentions, (std::set<std::string>{"flash", "unfused"}));
  EXPECT_GE(accumulating, 2);
  int models_at_two_lengths = 0;
  for (const auto& [model, lengths] : seqs) models_at_two_lengths += lengths.size() >= 2;
  EXPECT_GE(models_at_two_lengths, 2);

  // 1.3b-mb2 through `loom sim` with the executor's training: bf16 weights and activations, fp32 main
  // gradients, unfused attention.
  const Json* gpt13 = nullptr;
  for (const Json& row : (*json)["rows"])
    if (row["name"] == "1.3b-mb2") gpt13 = &row;
  ASSERT_NE(gpt13, nullptr);
  const std::string dir = scratch_dir("gpu_matrix");
  for (const Json& m : (*json)["models"])
    if (m["name"] == "gpt-1.3b") std::ofstream(dir + "/gpt-1.3b.json") << m.dump();
  const ProcessResult sim = run_shell(fmt::format(
      "{} sim --model {}/gpt-1.3b.json --cluster dgx-h100 --gpus 1 --global-batch 8 --micro-batch 2 --seq 2048 "
      "--tp 1 --pp 1 --dp 1 --zero 0 --recompute none --sp off --schedule 1f1b --attention unfused --grad-bytes 4 "
      "--format json",
      loom_binary(), dir));
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  auto simulated = parse_json(sim.out, "sim");
  ASSERT_TRUE(simulated.ok()) << sim.out;
  EXPECT_DOUBLE_EQ((*simulated)["step_time_s"].get<double>(), (*gpt13)["predicted_step_time_s"].get<double>());

  // The CPU matrix lists its 15 configurations the same way, the pipelines under GPipe, 1F1B and zero-bubble,
  // recomputation none, full and op-level (with flash attention).
  const ProcessResult cpu = run_shell(loom_binary() + " validate --profile local-cpu --dry-run --format json");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  const Json cpu_rows = (*parse_json(cpu.out, "cpu dry run"))["rows"];
  EXPECT_EQ(cpu_rows.size(), 15u);
  std::set<std::string> pipeline_schedules, cpu_recomputes;
  for (const Json& row : cpu_rows) {
    if (row["config"]["pp"].get<int>() > 1) pipeline_schedules.insert(row["config"]["schedule"].get<std::string>());
    cpu_recomputes.insert(row["config"]["recompute"].get<std::string>());
    if (row["config"]["recompute"] == "op") {
      EXPECT_EQ(row["attention"], "flash");
    }
  }
  EXPECT_EQ(pipeline_schedules, (std::set<std::string>{"gpipe", "1f1b", "zb"}));
  EXPECT_EQ(cpu_recomputes, (std::set<std::string>{"none", "full", "op"}));
}

// An unknown matrix backend, and the GPU matrix on a machine without a GPU (or a build without CUDA),
// are one line and exit status 2 before anything runs.
TEST(BadInput, ValidateBackend) {
  const ProcessResult tpu = run_shell(loom_binary() + " validate --profile dgx-h100 --backend tpu");
  EXPECT_EQ(tpu.exit_code, 2);
  EXPECT_EQ(lines(tpu.err), 1) << tpu.err;
  EXPECT_NE(tpu.err.find("'tpu' is neither cpu nor cuda"), std::string::npos) << tpu.err;
  const std::string work = scratch_dir("validate_no_gpu") + "/work";
  const ProcessResult cuda =
      run_shell(fmt::format("{} validate --profile dgx-h100 --backend cuda --configs small-mb8 --steps 2 --warmup 1 "
                            "--work-dir {}",
                            loom_binary(), work),
                300);
  if (cuda.err.find("no GPU to run on") == std::string::npos && cuda.exit_code == 0)
    GTEST_SKIP() << "a GPU is present: the matrix ran";
  EXPECT_EQ(cuda.exit_code, 2);
  EXPECT_EQ(lines(cuda.err), 1) << cuda.err;
  EXPECT_NE(cuda.err.find("validate --backend cuda: no GPU to run on ("), std::string::npos) << cuda.err;
  EXPECT_FALSE(std::filesystem::exists(work)) << "nothing is written before the GPU is found";
}

// A configuration whose run fails is reported with its error, and the others still run: a launcher that
// refuses two ranks fails dp2-zero0, single runs; the JSON lists the failure, the exit status is 1.
TEST(ValidateSubset, AFailingConfigurationIsReportedAndTheOthersRun) {
  if (!have_mpirun()) GTEST_SKIP() << "built without MPI: the matrix runs under mpirun";
  const std::string dir = scratch_dir("validate_failing");
  const std::string launcher = dir + "/one-rank-mpirun";
  std::ofstream(launcher) << fmt::format(
      "#!/bin/sh\ncase \"$*\" in *\"-np 2 \"*) echo 'two ranks refused' >&2; exit 7;; esac\nexec {} \"$@\"\n",
      LOOM_MPIEXEC);
  std::filesystem::permissions(launcher, std::filesystem::perms::owner_all);
  const ProcessResult v = run_shell(
      fmt::format("{} validate --profile local-cpu --configs single,dp2-zero0 --steps 2 --warmup 1 --format json "
                  "--work-dir {} --mpirun {}",
                  loom_binary(), dir + "/work", launcher),
      600);
  EXPECT_EQ(v.exit_code, 1) << v.err;
  auto json = parse_json(v.out, "validate output");
  ASSERT_TRUE(json.ok()) << v.out << v.err;
  ASSERT_EQ((*json)["rows"].size(), 1u);
  EXPECT_EQ((*json)["rows"][0]["name"], "single");
  EXPECT_GT((*json)["rows"][0]["measured_step_time_s"].get<double>(), 0.0);
  ASSERT_EQ((*json)["failed"].size(), 1u);
  EXPECT_EQ((*json)["failed"][0]["name"], "dp2-zero0");
  EXPECT_NE((*json)["failed"][0]["error"].get<std::string>().find("two ranks refused"), std::string::npos)
      << (*json)["failed"][0]["error"];
}

TEST(BadInput, MissingProfileFile) {
  const ProcessResult r = run_shell(loom_binary() + " validate --profile /nonexistent/cost.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/cost.json"), std::string::npos) << r.err;
}

TEST(BadInput, UnwritableOut) {
  const std::string launcher = have_mpirun() ? mpirun(2) : loom_binary();
  const ProcessResult r = run_shell(launcher + " profile --backend cpu --quick --out /nonexistent/dir/cost.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(loom_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/dir/cost.json"), std::string::npos) << r.err;
}

// A backend this build lacks is named with the ones it has; a GPU backend without its GPU says why in one
// line before any measuring. Where a GPU is present, `--backend cuda` profiles it instead.
TEST(BadInput, ProfileBackendNotBuiltOrWithoutItsDevice) {
  const std::string cost = scratch_dir("profile_backend") + "/cost.json";
  const ProcessResult unknown = run_shell(loom_binary() + " profile --backend tpu --quick --out " + cost);
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_EQ(lines(unknown.err), 1) << unknown.err;
  EXPECT_NE(unknown.err.find("'tpu' is not built into this binary (cpu"), std::string::npos) << unknown.err;
  EXPECT_FALSE(std::filesystem::exists(cost));
  const bool cuda_built = run_shell(loom_binary() + " --version").out.find("cuda") != std::string::npos;
  const ProcessResult cuda = run_shell(loom_binary() + " profile --backend cuda --quick --out " + cost, 300);
  if (!cuda_built) {
    EXPECT_EQ(cuda.exit_code, 2);
    EXPECT_NE(cuda.err.find("'cuda' is not built into this binary"), std::string::npos) << cuda.err;
  } else if (cuda.exit_code != 0) {
    EXPECT_EQ(cuda.exit_code, 2);
    EXPECT_NE(cuda.err.find("--backend cuda: no CUDA device"), std::string::npos) << cuda.err;
  } else {
    EXPECT_TRUE(std::filesystem::exists(cost)) << "a GPU is present: the profile is written";
  }
  if (cuda.exit_code != 0) {
    EXPECT_EQ(lines(cuda.err), 1) << cuda.err;
    EXPECT_FALSE(std::filesystem::exists(cost));
  }
}

// --model adds that model's layers as the planner asks for them: micro_headdim (hidden 32, 4 query heads
// of 12 on 2 key/value heads, SwiGLU FFN 64, sequence 32) at TP 1 and 2 (its key/value heads stop TP 4),
// micro-batches 1 and 2 under --quick; its attention output (48 wide, not the hidden 32) sized right. A model that
// cannot be read is one line and exit status 2.
TEST(ProfileModel, TimesTheModelsShapesAtEachTensorParallelDegree) {
  const std::string cost = scratch_dir("profile_model") + "/cost.json";
  const ProcessResult r = run_shell(fmt::format("{} profile --backend cpu --quick --model {} --out {}", loom_binary(),
                                                test_model("micro_headdim"), cost),
                                    300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto file = read_json_file(cost);
  ASSERT_TRUE(file.ok()) << file.error().message;
  std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t>> shapes;
  for (const Json& g : (*file)["gemm_table"])
    shapes.insert({g["m"].get<std::int64_t>(), g["n"].get<std::int64_t>(), g["k"].get<std::int64_t>()});
  for (int tp : {1, 2})
    for (int b : {1, 2}) {
      const std::int64_t T = 32 * b, qkv = (4 + 2 * 2) / tp * 12;
      EXPECT_TRUE(shapes.count({T, qkv, 32})) << "qkv at tp " << tp << ", micro-batch " << b;
      EXPECT_TRUE(shapes.count({T, 2 * 64 / tp, 32})) << "mlp_up at tp " << tp << ", micro-batch " << b;
    }
  EXPECT_NE((*file)["provenance"]["command"].get<std::string>().find("--model"), std::string::npos);

  const ProcessResult bad =
      run_shell(fmt::format("{} profile --quick --model /nonexistent/model.json --out {}", loom_binary(), cost));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(lines(bad.err), 1) << bad.err;
  EXPECT_NE(bad.err.find("--model"), std::string::npos) << bad.err;
}

TEST(BadInput, UnknownConfiguration) {
  const std::string cost = scratch_dir("unknown") + "/cost.json";
  ASSERT_EQ(run_shell(loom_binary() + " profile --backend cpu --quick --out " + cost, 300).exit_code, 0);
  const ProcessResult r = run_shell(fmt::format("{} validate --profile {} --configs single,dp9", loom_binary(), cost));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("dp9"), std::string::npos) << r.err;
  const ProcessResult rounds = run_shell(fmt::format("{} validate --profile {} --rounds 0", loom_binary(), cost));
  EXPECT_EQ(rounds.exit_code, 2);
  EXPECT_EQ(lines(rounds.err), 1) << rounds.err;
  EXPECT_NE(rounds.err.find("--rounds"), std::string::npos) << rounds.err;
}

}  // namespace
}  // namespace loom::exec::testing
