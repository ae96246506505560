// `loom calibrate`: fit a cost file's compute-efficiency curve to measured step times and write
// the calibrated cost file. --vtrain CSV uses the published vTrain measurements (A100, Megatron);
// --trace FILE (from `loom run --trace`) fits a measured profile's GEMM scale and memory-bound
// efficiency to the executor's own passes on this machine.
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/command.h"
#include "cli/output.h"
#include "cli/spec_flags.h"
#include "core/json_io.h"
#include "core/presets.h"
#include "planner/calibrate.h"

namespace loom::cli {
namespace {

struct CalibrateFlags {
  std::string vtrain;
  std::string cluster = "dgx-a100-80gb";
  std::string out;
  std::string residuals;
  bool check_only = false;
  bool fit_ceiling = false;
  int threads = 0;
  // --trace: the traced run's model, batch and layout (as given to `loom run`).
  std::vector<std::string> traces;
  std::string model = "gpt-tiny";
  long long gpus = 1;
  long long global_batch = 0;
  ConfigFlags config;
};

int run_trace_calibration(const CalibrateFlags& f) {
  const ClusterSpec cluster = value_or_exit(load_cluster(f.cluster));
  const TraceFallback fallback{f.model, f.config.text, static_cast<int>(f.gpus), f.global_batch};
  const std::vector<TraceRun> runs = keep_fastest_repeats(value_or_exit(read_trace_runs(f.traces, fallback)));
  std::vector<std::string> labels;
  for (const TraceRun& r : runs) labels.push_back(r.label);
  const CostCorrection fit = value_or_exit(fit_trace_corrections(runs, cluster));
  std::string text = fmt::format(
      "# calibrating {} against {} traced passes ({} trace file(s){})\n", cluster.name, fit.passes, f.traces.size(),
      runs.size() < f.traces.size()
          ? fmt::format("; the fastest of each repeated run kept: {}", fmt::join(labels, ", "))
          : "");
  text += fmt::format("before: GEMM table ×1, memory_bound_efficiency {:.4f}: mean |pass error| {:.2f} %\n",
                      cluster.compute.memory_bound_efficiency, 100 * fit.mean_abs_error_before);
  text += fmt::format("after:  GEMM table ×{:.4f}, memory_bound_efficiency {:.4f}: mean |pass error| {:.2f} %\n",
                      fit.gemm_scale, fit.memory_bound_efficiency, 100 * fit.mean_abs_error_after);
  if (fit.groups.size() > 1)
    for (const auto& g : fit.groups)
      text += fmt::format(
          "        timings with {} rank(s) per node: GEMM table ×{:.4f}, memory-bound ops at efficiency {:.4f} "
          "({} traced passes)\n",
          g.ranks, g.gemm_scale, g.memory_bound_efficiency, g.passes);
  text += fmt::format("{:>30} {:>12} {:>12} {:>12}\n{:>30} {:>12} {:>12} {:>12}\n", "pass", "measured", "before",
                      "after", "", "(ms)", "(ms)", "(ms)");
  for (const auto& p : fit.rows) {
    // Several traces: name each pass by its file.
    const std::string name = runs.size() > 1 ? fmt::format("{} {}", labels[p.run], p.name) : p.name;
    text += fmt::format("{:>30} {:>12.3f} {:>12.3f} {:>12.3f}\n", name, 1e3 * p.measured_s, 1e3 * p.before_s,
                        1e3 * p.after_s);
  }
  write_output("", text);
  if (!f.out.empty()) {
    ClusterSpec calibrated = apply_correction(cluster, fit);
    calibrated.provenance["calibrated_from"] = fmt::format("{} executor trace(s): {}", runs.size(), f.traces.front());
    write_output(f.out, to_json(calibrated).dump(2) + "\n");
  }
  return kExitOk;
}

ClusterSpec with_compute_fit(ClusterSpec cluster, const ComputeFit& fit) {
  cluster.compute.gemm_max_efficiency = fit.gemm_max_efficiency;
  cluster.compute.gemm_half_saturation_flops = fit.gemm_half_saturation_flops;
  return cluster;
}

int run_calibrate(const CalibrateFlags& f) {
  if (f.fit_ceiling && (f.vtrain.empty() || f.check_only))
    throw InputError("calibrate: --fit-ceiling goes with a --vtrain fit (not --trace, not --check)");
  if (!f.traces.empty()) return run_trace_calibration(f);
  if (f.vtrain.empty()) throw InputError("calibrate: give --vtrain CSV or --trace FILE (measured runs to fit)");
  if (!f.out.empty() && f.check_only) throw InputError("calibrate: --check fits nothing, so it writes no --out file");
  const ClusterSpec cluster = value_or_exit(load_cluster(f.cluster));
  const std::vector<MeasuredRun> runs = value_or_exit(read_vtrain_csv(f.vtrain));
  const FitQuality before = evaluate_fit(runs, cluster, f.threads);
  const ComputeFit fit =
      f.check_only ? ComputeFit{cluster.compute.gemm_max_efficiency, cluster.compute.gemm_half_saturation_flops, before}
                   : value_or_exit(fit_compute_efficiency(runs, cluster, f.threads, f.fit_ceiling));
  std::string text;
  text += fmt::format("# calibrating {} against {} measured runs ({})\n", cluster.name, runs.size(), f.vtrain);
  text += fmt::format(
      "before: gemm_max_efficiency {:.4f}, half-saturation {:.4g} FLOP: mean |error| {:.2f} %, max {:.2f} %\n",
      cluster.compute.gemm_max_efficiency, cluster.compute.gemm_half_saturation_flops, 100 * before.mean_abs_error,
      100 * before.max_abs_error);
  if (!f.check_only)
    text += fmt::format(
        "after:  gemm_max_efficiency {:.4f}, half-saturation {:.4g} FLOP: mean |error| {:.2f} %, max {:.2f} %\n",
        fit.gemm_max_efficiency, fit.gemm_half_saturation_flops, 100 * fit.quality.mean_abs_error,
        100 * fit.quality.max_abs_error);
  write_output("", text);
  if (!f.residuals.empty()) {
    const ClusterSpec calibrated = with_compute_fit(cluster, fit);
    std::vector<double> predicted;
    evaluate_fit(runs, calibrated, f.threads, &predicted);
    std::string csv = "gpus,global_batch,micro_batch,hidden,heads,layers,seq,tp,dp,pp,measured_s,predicted_s,error\n";
    for (std::size_t i = 0; i < runs.size(); ++i) {
      const MeasuredRun& r = runs[i];
      csv +=
          fmt::format("{},{},{},{},{},{},{},{},{},{},{:.6f},{:.6f},{:+.4f}\n", r.training.gpus, r.training.global_batch,
                      r.config.micro_batch, r.model.hidden, r.model.heads, r.model.layers, r.model.seq_len, r.config.tp,
                      r.config.dp, r.config.pp, r.measured_s, predicted[i], predicted[i] / r.measured_s - 1.0);
    }
    write_output(f.residuals, csv);
  }
  if (!f.out.empty()) {
    ClusterSpec calibrated = with_compute_fit(cluster, fit);
    calibrated.provenance["calibrated_from"] = f.vtrain;
    calibrated.provenance["calibration_mean_abs_error"] = fmt::format("{:.4f}", fit.quality.mean_abs_error);
    write_output(f.out, to_json(calibrated).dump(2) + "\n");
  }
  return kExitOk;
}

std::function<int()> add_calibrate(CLI::App& root) {
  auto flags = std::make_shared<CalibrateFlags>();
  CLI::App* app = root.add_subcommand("calibrate", "fit the cost model's compute efficiency to measured step times");
  app->add_option("--vtrain", flags->vtrain, "vTrain-format CSV of measured Megatron iteration times");
  app->add_option("--cluster", flags->cluster, "cost file to start from")->capture_default_str();
  app->add_option("--out", flags->out, "write the calibrated cost file here");
  app->add_option("--residuals", flags->residuals, "write each run's measured and predicted time (CSV)");
  app->add_flag("--check", flags->check_only, "only report how well --cluster predicts the runs (no fit)");
  app->add_flag("--fit-ceiling", flags->fit_ceiling,
                "--vtrain: fit the GEMM efficiency ceiling too (else only the half-saturation size; small models "
                "constrain the ceiling poorly)");
  add_threads_option(*app, flags->threads, "simulation threads (default: all hardware threads)");
  app->add_option("--trace", flags->traces, "Chrome trace(s) of `loom run --trace` (one per rank) to fit --cluster to");
  app->add_option("--model", flags->model,
                  "the traced run's model (preset or JSON), for traces that do not carry their run")
      ->capture_default_str();
  app->add_option("--gpus", flags->gpus, "the traced run's ranks")->capture_default_str();
  app->add_option("--global-batch", flags->global_batch, "the traced run's global batch");
  flags->config.add_to(*app, false);
  return [flags] { return run_calibrate(*flags); };
}

}  // namespace

LOOM_REGISTER_COMMAND("calibrate", add_calibrate);

}  // namespace loom::cli
