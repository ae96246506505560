// `loom validate`: the simulator against measurements. --published reproduces Korthikanti et al.
// 2022 Table 5 and Narayanan et al. 2021 Table 1 (predicted, published, error); --profile FILE runs
// the on-machine matrix.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <sstream>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "cli/command.h"
#include "cli/output.h"
#include "cli/validate_matrix.h"
#include "core/json_io.h"
#include "core/presets.h"
#include "core/stats.h"
#include "core/units.h"
#include "exec/backend.h"
#include "planner/public_runs.h"
#include "planner/published.h"

namespace loom::cli {
namespace {

struct ValidateFlags {
  bool published = false;
  bool public_runs = false;
  std::string validation_dir = "../shared/validation";
  std::string cluster = "dgx-a100-80gb";
  std::string profile;
  std::string backend = "cpu";
  bool dry_run = false;
  std::string format = "table";
  std::string configs;  // comma list of matrix names; empty: all
  std::string work_dir;
  std::string mpirun = "mpirun";
  int steps = 8;
  int warmup = 3;
  int rounds = 1;
};

struct ErrorSummary {
  double mean = 0, worst = 0;
};
ErrorSummary summarize(const std::vector<PublishedRow>& rows) {
  ErrorSummary e;
  for (const auto& r : rows) {
    e.mean += std::abs(r.error());
    e.worst = std::max(e.worst, std::abs(r.error()));
  }
  if (!rows.empty()) e.mean /= static_cast<double>(rows.size());
  return e;
}

// "--published", "--public-runs" or "--profile (the on-machine matrix)" for each bit of `reports` (1, 2, 4).
std::string report_names(int reports) {
  std::string out;
  for (const auto& [bit, name] :
       {std::pair{1, "--published"}, std::pair{2, "--public-runs"}, std::pair{4, "--profile (the on-machine matrix)"}})
    if ((reports & bit) != 0) out += (out.empty() ? "" : " and ") + std::string(name);
  return out;
}

Json published_json(const std::vector<PublishedRow>& rows) {
  Json list = Json::array();
  for (const auto& r : rows) {
    Json row = {{"model", r.model},
                {"setting", r.setting},
                {"config", to_json(r.config)},
                {"published_s", r.published_s},
                {"predicted_s", r.predicted_s},
                {"error", r.error()}};
    if (r.slowest_s > 0) {
      row["slowest_s"] = r.slowest_s;
      row["slowest_setting"] = r.slowest_setting;
    }
    list.push_back(row);
  }
  return list;
}

std::string published_table(const std::vector<PublishedRow>& rows, const ErrorSummary& e, const char* setting) {
  const bool span = !rows.empty() && rows.front().slowest_s > 0;  // rows with unpublished settings
  std::string text = fmt::format("{:<7} {:<34} {:>5} {:>4} {:>5} {:>5} {:>4} {:>12} {:>12} {:>8}{}\n", "model", setting,
                                 "GPUs", "TP", "PP", "DP", "VPP", "published_s", "predicted_s", "error%",
                                 span ? fmt::format(" {:>10}  {}", "slowest_s", "slowest setting") : "");
  int inside = 0;
  std::string above;
  for (const auto& r : rows) {
    text += fmt::format("{:<7} {:<34} {:>5} {:>4} {:>5} {:>5} {:>4} {:>12.2f} {:>12.2f} {:>+8.2f}", r.model, r.setting,
                        r.gpus, r.config.tp, r.config.pp, r.config.dp, r.config.vpp, r.published_s, r.predicted_s,
                        100.0 * r.error());
    if (span) {
      text += fmt::format(" {:>10.2f}  {}", r.slowest_s, r.slowest_setting);
      if (r.published_s <= r.slowest_s)
        ++inside;
      else
        above += fmt::format("{}{} ({:+.1f} %)", above.empty() ? "" : ", ", r.model,
                             100.0 * (r.published_s / r.slowest_s - 1.0));
    }
    text += "\n";
  }
  text += fmt::format("# mean |error| {:.2f} %, max |error| {:.2f} %\n", 100.0 * e.mean, 100.0 * e.worst);
  if (span)
    text += fmt::format(
        "# published time within Loom's span over the unpublished settings (fastest to slowest that fits): {} of {} "
        "rows{}\n",
        inside, rows.size(), above.empty() ? "" : "; slower than Loom's slowest: " + above);
  return text;
}

// Narayanan et al. 2021 Table 1 under the software that ran it.
constexpr const char* kNarayananFramework = "megatron-lm-2021";

int run_published(const ValidateFlags& f) {
  const ClusterSpec cluster = value_or_exit(load_cluster(f.cluster));
  const auto rows = value_or_exit(reproduce_korthikanti_table5(f.validation_dir + "/korthikanti2022.json", cluster));
  const auto weak = value_or_exit(
      reproduce_narayanan_table1(f.validation_dir + "/narayanan2021_table1.json", cluster, kNarayananFramework));
  const ErrorSummary e = summarize(rows), w = summarize(weak);
  if (f.format == "json") {
    Json out;
    out["source"] = "Korthikanti et al. 2022, Table 5";
    out["cluster"] = cluster.name;
    out["rows"] = published_json(rows);
    out["mean_abs_error"] = e.mean;
    out["max_abs_error"] = e.worst;
    out["narayanan2021_table1"] = {{"source", "Narayanan et al. 2021, Table 1"},
                                   {"framework", kNarayananFramework},
                                   {"rows", published_json(weak)},
                                   {"mean_abs_error", w.mean},
                                   {"max_abs_error", w.worst}};
    write_output("", out.dump(2) + "\n");
    return kExitOk;
  }
  std::string text = fmt::format("# Korthikanti et al. 2022, Table 5: iteration time on DGX A100 ({})\n", cluster.name);
  text += published_table(rows, e, "setting");
  text += fmt::format(
      "\n# Narayanan et al. 2021, Table 1: iteration time on DGX A100 ({}), --framework {}, full recompute; "
      "micro-batch and interleaving unpublished: the planner's fastest\n",
      cluster.name, kNarayananFramework);
  text += published_table(weak, w, "planned (unpublished settings)");
  write_output("", text);
  return kExitOk;
}

// h100_public.json: every row simulated on its GPU's preset, or the reason it cannot be.
int run_public_runs(const ValidateFlags& f) {
  const auto runs = value_or_exit(reproduce_public_runs(f.validation_dir + "/h100_public.json"));
  const auto summaries = summarize(runs);
  if (f.format == "json") {
    Json list = Json::array();
    for (const auto& r : runs) {
      Json row = {{"id", r.id}, {"source", r.source}, {"cluster", r.cluster}};
      if (r.simulated()) {
        row["config"] = to_json(r.config);
        row["config"]["precision"] = to_string(r.training.precision);
        row["predicted_s"] = r.predicted_s;
        row["predicted_peak_memory_gib"] = r.predicted_peak_gib;
        row["predicted_tflops_per_gpu"] = r.predicted_tflops;
        if (!r.micro_batch_note.empty()) row["micro_batch_note"] = r.micro_batch_note;
        if (!r.recompute_note.empty()) row["recompute_note"] = r.recompute_note;
        if (!r.config_note.empty()) row["config_note"] = r.config_note;
      } else {
        row["refused"] = r.refused;
      }
      if (r.published_s > 0) row["published_s"] = r.published_s;
      if (r.published_tflops > 0) row["published_tflops_per_gpu"] = r.published_tflops;
      if (r.published_peak_gib > 0) row["published_peak_memory_gib"] = r.published_peak_gib;
      if (r.scored()) row["error"] = r.error();
      if (r.memory_scored()) row["memory_error"] = r.memory_error();
      list.push_back(row);
    }
    Json sources = Json::array();
    for (const auto& s : summaries)
      sources.push_back({{"source", s.source.empty() ? "all" : s.source},
                         {"rows", s.rows},
                         {"simulated", s.simulated},
                         {"scored", s.scored},
                         {"mean_abs_error", s.mean_abs_error},
                         {"max_abs_error", s.max_abs_error},
                         {"mean_error", s.mean_error}});
    write_output("", Json{{"rows", list}, {"summary", sources}}.dump(2) + "\n");
    return kExitOk;
  }
  std::string text = "# published H100/H200/B200 runs (h100_public.json), each on its GPU's cluster preset\n";
  text += fmt::format("{:<40} {:<9} {:<4} {:>5} {:>3} {:>3} {:>3} {:>3} {:>4} {:>3} {:>6} {:>7} {:>11} {:>11} {:>8}\n",
                      "id", "cluster", "prec", "GPUs", "TP", "CP", "PP", "VPP", "DP", "MB", "mem", "pub_mem",
                      "published_s", "predicted_s", "error%");
  for (const auto& r : runs) {
    const std::string published = r.published_s > 0 ? fmt::format("{:.3f}", r.published_s) : "-";
    if (!r.simulated()) {
      text += fmt::format("{:<40} {:<9} refused: {}\n", r.id, r.cluster, r.refused);
      continue;
    }
    const ParallelConfig& c = r.config;
    const std::string published_mem = r.published_peak_gib > 0 ? fmt::format("{:.1f}", r.published_peak_gib) : "-";
    text += fmt::format(
        "{:<40} {:<9} {:<4} {:>5} {:>3} {:>3} {:>3} {:>3} {:>4} {:>3} {:>6.1f} {:>7} {:>11} {:>11.3f} {:>8}\n", r.id,
        r.cluster, to_string(r.training.precision), r.training.gpus, c.tp, c.cp, c.pp, c.vpp, c.dp, c.micro_batch,
        r.predicted_peak_gib, published_mem, published, r.predicted_s,
        r.scored() ? fmt::format("{:+.1f}", 100.0 * r.error()) : "-");
    if (r.published_tflops > 0 && !r.scored())
      text.insert(text.size() - 1, fmt::format("   TFLOP/s/GPU: published {:.0f} (formula not stated), Loom {:.0f}",
                                               r.published_tflops, r.predicted_tflops));
    if (!r.micro_batch_note.empty()) text.insert(text.size() - 1, fmt::format("; {}", r.micro_batch_note));
    if (!r.recompute_note.empty()) text.insert(text.size() - 1, fmt::format("; {}", r.recompute_note));
    if (!r.config_note.empty()) text.insert(text.size() - 1, fmt::format("; {}", r.config_note));
  }
  for (const auto& s : summaries)
    text += fmt::format(
        "# {}: {} rows, {} simulated, {} with a step time: mean |error| {:.1f} %, max {:.1f} %, mean "
        "{:+.1f} %\n",
        s.source.empty() ? "all sources" : s.source, s.rows, s.simulated, s.scored, 100.0 * s.mean_abs_error,
        100.0 * s.max_abs_error, 100.0 * s.mean_error);
  // Peak memory, where a row publishes it (torchtitan's: the allocator's max reserved), with and without pipelines.
  for (const bool pipelined : {false, true}) {
    int n = 0;
    double sum = 0, worst = 0;
    for (const auto& r : runs)
      if (r.memory_scored() && (r.config.pp > 1) == pipelined) {
        ++n;
        sum += std::abs(r.memory_error());
        worst = std::max(worst, std::abs(r.memory_error()));
      }
    if (n > 0)
      text += fmt::format("# peak memory where published, {}: {} rows, mean |error| {:.1f} %, max {:.1f} %\n",
                          pipelined ? "pipelined" : "no pipeline", n, 100.0 * sum / n, 100.0 * worst);
  }
  write_output("", text);
  return kExitOk;
}

std::vector<MatrixConfig> chosen_configs(const std::string& list, MatrixBackend backend) {
  const std::vector<MatrixConfig> all = validation_matrix(backend);
  if (list.empty()) return all;
  std::vector<MatrixConfig> chosen;
  std::stringstream ss(list);
  std::string name;
  while (std::getline(ss, name, ',')) {
    auto it = std::find_if(all.begin(), all.end(), [&](const MatrixConfig& c) { return c.name == name; });
    if (it == all.end()) {
      std::string names;
      for (const auto& c : all) names += (names.empty() ? "" : ", ") + c.name;
      throw InputError(fmt::format("--configs: unknown configuration '{}' ({})", name, names));
    }
    chosen.push_back(*it);
  }
  return chosen;
}

MatrixBackend matrix_backend(const std::string& name) {
  if (name == "cpu") return MatrixBackend::kCpu;
  if (name == "cuda") return MatrixBackend::kCuda;
  throw InputError(fmt::format("--backend: '{}' is neither cpu nor cuda", name));
}

// The model, sequence length and batch a configuration trains, as one cell ("gpt-1.3b s2048 gb8", and
// "flash" after it where the attention is).
std::string workload(const MatrixConfig& c) {
  return fmt::format("{} s{} gb{}{}", c.model, c.seq_len, c.global_batch,
                     c.attention == AttentionKernel::kFlash ? " flash" : "");
}

// What a configuration trains, in the JSON of both --dry-run and a run.
Json config_fields(const MatrixConfig& c) {
  return {{"name", c.name},
          {"model", c.model},
          {"seq_len", c.seq_len},
          {"attention", to_string(c.attention)},
          {"config", to_json(c.config)},
          {"ranks", c.ranks()},
          {"global_batch", c.global_batch}};
}

Json model_list(MatrixBackend backend) {
  Json models = Json::array();
  for (const ModelSpec& m : matrix_models(backend)) models.push_back(to_json(m));
  return models;
}

// --dry-run: what the matrix would run, with the simulator's step time and the memory model's peak
// per configuration, and whether it fits the cost file's device.
int print_dry_run(const ValidateFlags& f, const ClusterSpec& cluster, const std::vector<MatrixConfig>& configs,
                  MatrixBackend backend) {
  std::vector<MatrixPrediction> predictions;
  for (const MatrixConfig& c : configs)
    predictions.push_back(value_or_exit(predict_matrix_config(c, cluster, backend)));
  if (f.format == "json") {
    Json rows = Json::array();
    for (std::size_t i = 0; i < configs.size(); ++i) {
      Json row = config_fields(configs[i]);
      row["predicted_step_time_s"] = predictions[i].step_time_s;
      row["predicted_peak_memory_gib"] = predictions[i].peak_gib();
      row["fits"] = predictions[i].fits;
      rows.push_back(row);
    }
    write_output("", Json{{"profile", f.profile},
                          {"backend", to_string(backend)},
                          {"dry_run", true},
                          {"models", model_list(backend)},
                          {"rows", rows}}
                             .dump(2) +
                         "\n");
    return kExitOk;
  }
  std::string t =
      fmt::format("# loom validate --dry-run: the {} matrix against {} ({}, {:.1f} GiB), not run\n", to_string(backend),
                  f.profile, cluster.device.name, bytes_to_gib(cluster.device.memory_bytes));
  const char* row = "{:<22} {:>5} {:<30} {:>3} {:>3} {:>3} {:>4} {:>3} {:>9} {:>10} {:>10} {:>5}\n";
  t += fmt::format(fmt::runtime(row), "config", "ranks", "workload", "tp", "pp", "dp", "zero", "mb", "recompute",
                   "step (s)", "mem (GiB)", "fits");
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const MatrixConfig& c = configs[i];
    const ParallelConfig& p = c.config;
    t += fmt::format(fmt::runtime(row), c.name, c.ranks(), workload(c), p.tp, p.pp, p.dp, p.zero, p.micro_batch,
                     to_string(p.recompute), fmt::format("{:.4f}", predictions[i].step_time_s),
                     fmt::format("{:.2f}", predictions[i].peak_gib()), predictions[i].fits ? "yes" : "NO");
  }
  write_output("", t);
  return kExitOk;
}

std::string own_binary() {
  std::error_code ec;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("loom") : path.string();
}

int run_matrix(const ValidateFlags& f) {
  const MatrixBackend backend = matrix_backend(f.backend);
  const ClusterSpec cluster = value_or_exit(load_cluster(f.profile));
  const std::vector<MatrixConfig> chosen = chosen_configs(f.configs, backend);
  if (f.steps <= f.warmup) throw InputError(fmt::format("--steps {} must exceed --warmup {}", f.steps, f.warmup));
  if (f.rounds < 1 || f.rounds > 100) throw InputError(fmt::format("--rounds {}: must be 1..100", f.rounds));
  if (f.dry_run) return print_dry_run(f, cluster, chosen, backend);
  // On GPUs each rank needs a GPU of its own (timings of ranks sharing one say nothing about the
  // simulator): a layout with more ranks than this machine has GPUs is listed as skipped.
  std::vector<MatrixConfig> configs;
  std::vector<std::pair<MatrixConfig, std::string>> skipped;
  if (backend == MatrixBackend::kCuda) {
    std::string why;
    const int gpus = exec::visible_gpus(&why);
    if (gpus == 0) throw InputError(fmt::format("validate --backend cuda: no GPU to run on ({})", why));
    for (const MatrixConfig& c : chosen) {
      if (c.ranks() <= gpus)
        configs.push_back(c);
      else
        skipped.emplace_back(c, fmt::format("needs {} GPUs, this machine has {}", c.ranks(), gpus));
    }
    if (configs.empty())
      throw InputError(fmt::format("validate: every chosen configuration needs more than {} GPU(s)", gpus));
  } else {
    configs = chosen;
  }
  MatrixOptions o;
  o.backend = backend;
  // A GPU's run checks its model states against the device the profile measured.
  if (backend == MatrixBackend::kCuda) o.run_cluster = f.profile;
  o.loom_binary = own_binary();
  o.mpirun = f.mpirun;
  o.steps = f.steps;
  o.warmup_steps = f.warmup;
  o.work_dir = !f.work_dir.empty()
                   ? f.work_dir
                   : (std::filesystem::temp_directory_path() / fmt::format("loom_validate_{}", getpid())).string();
  check(prepare_matrix_inputs(o, configs));
  // Whole rounds over the configurations, each configuration keeping its fastest round: on a
  // shared host a slow spell then spoils one round of every configuration, not all rounds of one
  // (the profile keeps its fastest timings for the same reason).
  std::vector<MatrixRow> all_rows(configs.size());
  std::vector<std::string> failures(configs.size());
  {
    ProgressBar bar("validate");
    for (int round = 0; round < f.rounds; ++round) {
      for (std::size_t i = 0; i < configs.size(); ++i) {
        if (!failures[i].empty()) continue;  // failed in an earlier round: not run again
        auto row = run_matrix_config(configs[i], cluster, o);
        if (!row) {
          // The others still run: one failing configuration does not cost the rest of the matrix.
          failures[i] = row.error().message;
          std::fprintf(stderr, "loom: %s\n", failures[i].c_str());
          continue;
        }
        std::vector<double> rounds = all_rows[i].round_step_times_s;
        rounds.push_back(row->measured_step_time_s);
        if (round == 0 || row->measured_step_time_s < all_rows[i].measured_step_time_s) all_rows[i] = *row;
        all_rows[i].round_step_times_s = std::move(rounds);
        bar.update(round * configs.size() + i + 1, f.rounds * configs.size());
      }
    }
  }
  std::vector<MatrixRow> rows;                              // the configurations that ran
  std::vector<std::pair<std::string, std::string>> failed;  // name, why
  for (std::size_t i = 0; i < configs.size(); ++i) {
    if (failures[i].empty())
      rows.push_back(all_rows[i]);
    else
      failed.emplace_back(configs[i].name, failures[i]);
  }
  if (rows.empty()) {
    std::fprintf(stderr, "loom: validate: every configuration failed (the first: %s)\n", failed.front().second.c_str());
    return kExitFailure;
  }
  std::vector<double> step_errors, memory_errors;
  double min_share = 1.0;
  for (const auto& r : rows) {
    step_errors.push_back(std::abs(r.step_error()));
    memory_errors.push_back(r.memory_error());
    min_share = std::min(min_share, r.cpu_share);
  }
  const double median_step = median(step_errors);
  const double max_step = *std::max_element(step_errors.begin(), step_errors.end());
  const double max_memory = *std::max_element(memory_errors.begin(), memory_errors.end());
  if (f.format == "json") {
    Json list = Json::array();
    for (const auto& r : rows) {
      Json ranks = Json::array();
      for (const auto& m : r.ranks)
        ranks.push_back({{"rank", m.rank},
                         {"predicted_peak_memory_gib", m.predicted_gib},
                         {"measured_peak_memory_gib", m.measured_gib}});
      Json row = config_fields(r.config);
      row.update(Json{{"predicted_step_time_s", r.predicted_step_time_s},
                      {"measured_step_time_s", r.measured_step_time_s},
                      {"measured_step_times_s", r.measured_step_times_s},
                      {"round_step_times_s", r.round_step_times_s},
                      {"step_time_error", r.step_error()},
                      {"predicted_peak_memory_gib", r.predicted_peak_memory_gib},
                      {"measured_peak_memory_gib", r.measured_peak_memory_gib},
                      {"memory_error", r.memory_error()},
                      {"per_rank", ranks},
                      {"oversubscribed", r.oversubscribed},
                      {"cpu_share", r.cpu_share}});
      list.push_back(row);
    }
    Json skipped_list = Json::array();
    for (const auto& [c, why] : skipped)
      skipped_list.push_back({{"name", c.name}, {"ranks", c.ranks()}, {"reason", why}});
    Json failed_list = Json::array();
    for (const auto& [name, why] : failed) failed_list.push_back({{"name", name}, {"error", why}});
    Json out = {{"profile", f.profile},
                {"backend", to_string(backend)},
                {"model", to_json(validation_model())},
                {"models", model_list(backend)},
                {"rows", list},
                {"skipped", skipped_list},
                {"failed", failed_list},
                {"median_abs_step_time_error", median_step},
                {"max_abs_step_time_error", max_step},
                {"max_abs_memory_error", max_memory},
                {"min_cpu_share", min_share}};
    write_output("", out.dump(2) + "\n");
    return failed.empty() ? kExitOk : kExitFailure;
  }
  std::string t =
      backend == MatrixBackend::kCpu
          ? fmt::format("# loom validate: simulator with {} vs loom run under mpirun ({} threads/rank), model {}\n",
                        f.profile, o.threads_per_rank, validation_model().name)
          : fmt::format(
                "# loom validate --backend cuda: simulator with {} vs loom run --backend cuda (bf16, one rank "
                "per GPU) on {}\n",
                f.profile, cluster.device.name);
  t += fmt::format("# step time: median of steps {}..{}{}; memory: peak per rank (worst rank's error)\n", f.warmup + 1,
                   f.steps, f.rounds > 1 ? fmt::format(", the fastest of {} interleaved rounds", f.rounds) : "");
  if (backend == MatrixBackend::kCpu) {
    const char* header =
        "{:<18} {:>5} {:>3} {:>3} {:>3} {:>4} {:>3} {:>6} {:>9} {:>10} {:>10} {:>7} {:>9} {:>9} {:>7} {:>8} {:>5}\n";
    t += fmt::format(fmt::runtime(header), "config", "ranks", "tp", "pp", "dp", "zero", "mb", "sched", "recompute",
                     "predicted", "measured", "error", "pred_mem", "meas_mem", "error", "oversub", "cpu");
    t += fmt::format(fmt::runtime(header), "", "", "", "", "", "", "", "", "", "(s)", "(s)", "(%)", "(MiB)", "(MiB)",
                     "(%)", "", "(%)");
    for (const auto& r : rows) {
      const ParallelConfig& p = r.config.config;
      t += fmt::format(
          "{:<18} {:>5} {:>3} {:>3} {:>3} {:>4} {:>3} {:>6} {:>9} {:>10.4f} {:>10.4f} {:>+7.2f} {:>9.2f} {:>9.2f} "
          "{:>7.2f} "
          "{:>8} {:>5.0f}\n",
          r.config.name, r.config.ranks(), p.tp, p.pp, p.dp, p.zero, p.micro_batch, to_string(p.schedule),
          to_string(p.recompute), r.predicted_step_time_s, r.measured_step_time_s, 100 * r.step_error(),
          r.predicted_peak_memory_gib * 1024, r.measured_peak_memory_gib * 1024, 100 * r.memory_error(),
          r.oversubscribed ? "yes" : "no", 100 * r.cpu_share);
    }
  } else {
    const char* header =
        "{:<22} {:>5} {:<30} {:>3} {:>3} {:>3} {:>4} {:>3} {:>9} {:>10} {:>10} {:>7} {:>9} {:>9} {:>7}\n";
    t += fmt::format(fmt::runtime(header), "config", "ranks", "workload", "tp", "pp", "dp", "zero", "mb", "recompute",
                     "predicted", "measured", "error", "pred_mem", "meas_mem", "error");
    t += fmt::format(fmt::runtime(header), "", "", "", "", "", "", "", "", "", "(s)", "(s)", "(%)", "(GiB)", "(GiB)",
                     "(%)");
    for (const auto& r : rows) {
      const ParallelConfig& p = r.config.config;
      t +=
          fmt::format(fmt::runtime(header), r.config.name, r.config.ranks(), workload(r.config), p.tp, p.pp, p.dp,
                      p.zero, p.micro_batch, to_string(p.recompute), fmt::format("{:.4f}", r.predicted_step_time_s),
                      fmt::format("{:.4f}", r.measured_step_time_s), fmt::format("{:+.2f}", 100 * r.step_error()),
                      fmt::format("{:.2f}", r.predicted_peak_memory_gib),
                      fmt::format("{:.2f}", r.measured_peak_memory_gib), fmt::format("{:.2f}", 100 * r.memory_error()));
    }
    for (const auto& [c, why] : skipped) t += fmt::format("{:<22} skipped: {}\n", c.name, why);
  }
  t += fmt::format(
      "# step time |error|: median {:.2f} % (bar 5 %), max {:.2f} % (bar 10 %); peak memory |error| max {:.2f} % (bar "
      "5 %)\n",
      100 * median_step, 100 * max_step, 100 * max_memory);
  if (f.rounds > 1) {
    double spread = 0;
    for (const auto& r : rows) {
      const auto [lo, hi] = std::minmax_element(r.round_step_times_s.begin(), r.round_step_times_s.end());
      spread = std::max(spread, *hi / *lo - 1.0);
    }
    t += fmt::format("# host noise: a configuration's slowest round took up to {:.1f} % longer than its fastest\n",
                     100 * spread);
  }
  // CPU time over wall time of the whole mpirun, launch and MPI start-up included: ranks waiting on
  // each other there (or in a blocking receive) lower it as much as other work on the host does.
  if (backend == MatrixBackend::kCpu)
    t += fmt::format(
        "# least CPU share a run's ranks received over the whole run (launch and waits included): {:.0f} %\n",
        100 * min_share);
  for (const auto& [name, why] : failed) t += fmt::format("{:<22} failed: {}\n", name, why);
  t += fmt::format(
      "# bars: {}{}\n",
      failed.empty() && median_step <= 0.05 && max_step <= 0.10 && max_memory <= 0.05 ? "met" : "NOT met",
      failed.empty() ? "" : fmt::format(" ({} of {} configurations failed to run)", failed.size(), configs.size()));
  write_output("", t);
  return failed.empty() ? kExitOk : kExitFailure;
}

std::function<int()> add_validate(CLI::App& root) {
  auto flags = std::make_shared<ValidateFlags>();
  CLI::App* app = root.add_subcommand("validate", "compare the simulator with measured step times");
  app->add_flag("--published", flags->published,
                "reproduce published measurements (Korthikanti et al. 2022, Table 5; Narayanan et al. 2021, Table 1)");
  app->add_flag("--public-runs", flags->public_runs,
                "simulate the published H100/H200/B200 runs (h100_public.json: NeMo, Megatron-Bridge, torchtitan)");
  // Each report's own flags (published: 1, public runs: 2, the on-machine matrix: 4); given to another
  // report they were ignored without a word.
  std::vector<std::pair<CLI::Option*, int>> own;
  auto only = [&own](CLI::Option* option, int reports) {
    own.emplace_back(option, reports);
    return option;
  };
  only(app->add_option("--validation-dir", flags->validation_dir, "folder with the published numbers"), 1 | 2)
      ->capture_default_str();
  only(app->add_option(
           "--cluster", flags->cluster,
           "cluster preset or cost file for --published (--public-runs simulates each run on its own GPU's preset)"),
       1)
      ->capture_default_str();
  app->add_option("--profile", flags->profile, "cost file measured on this machine (runs the on-machine matrix)");
  only(app->add_option("--backend", flags->backend,
                       "with --profile: cpu (fp32, the CPU matrix) or cuda (bf16 on this machine's GPUs, the GPU "
                       "matrix)"),
       4)
      ->capture_default_str();
  only(app->add_flag("--dry-run", flags->dry_run,
                     "with --profile: print the matrix's configurations, predicted step time and memory, without "
                     "running"),
       4);
  app->add_option("--format", flags->format, "table or json")->capture_default_str();
  only(app->add_option("--configs", flags->configs, "comma list of matrix configurations (default: all)"), 4);
  only(app->add_option("--work-dir", flags->work_dir, "where the model, tokens and run logs go (default: a temp dir)"),
       4);
  only(app->add_option("--mpirun", flags->mpirun, "MPI launcher"), 4)->capture_default_str();
  only(app->add_option("--steps", flags->steps, "steps per run"), 4)->capture_default_str();
  only(app->add_option("--warmup", flags->warmup, "steps dropped before the median"), 4)->capture_default_str();
  only(app->add_option("--rounds", flags->rounds,
                       "run the matrix this many times, interleaved; keep each configuration's fastest"),
       4)
      ->capture_default_str();
  return [flags, own]() -> int {
    check(check_format(flags->format, {"table", "json"}));
    if (flags->published && flags->public_runs)
      throw InputError("validate: --published and --public-runs are two reports; give one");
    // The reports as bits, as `own` names them; more than one given is refused, one given checks its flags.
    const int given = (flags->published ? 1 : 0) | (flags->public_runs ? 2 : 0) | (flags->profile.empty() ? 0 : 4);
    if ((given & (given - 1)) != 0)
      throw InputError(fmt::format("validate: {} and --profile are two reports; give one",
                                   flags->published ? "--published" : "--public-runs"));
    for (const auto& [option, reports] : own)
      if (given != 0 && option->count() > 0 && (reports & given) == 0)
        throw InputError(fmt::format("{}: does not apply to {}; it is for {}", option->get_name(), report_names(given),
                                     report_names(reports)));
    // The default is relative to the checkout's root, where `loom validate` usually runs: elsewhere the
    // folder is missing, said once instead of as the first file that cannot be opened.
    if ((flags->published || flags->public_runs) && !std::filesystem::is_directory(flags->validation_dir))
      throw InputError(fmt::format(
          "--validation-dir: no folder '{}' (the published measurements, ../shared/validation beside the checkout "
          "when run from its root)",
          flags->validation_dir));
    if (flags->published) return run_published(*flags);
    if (flags->public_runs) return run_public_runs(*flags);
    if (!flags->profile.empty()) return run_matrix(*flags);
    throw InputError(
        "validate: give --published, --public-runs or --profile FILE (a cost file measured on this machine)");
  };
}

}  // namespace

LOOM_REGISTER_COMMAND("validate", add_validate);

}  // namespace loom::cli
