// `loom calibrate`: fit a cost file's compute-efficiency curve to measured step times and write
// the calibrated cost file. --vtrain CSV uses the published vTrain measurements (A100, Megatron).
#include <memory>

#include <fmt/format.h>

#include "cli/command.h"
#include "cli/output.h"
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
  int threads = 0;
};

int run_calibrate(const CalibrateFlags& f) {
  if (f.vtrain.empty()) throw InputError("calibrate: give --vtrain CSV (measured runs to fit)");
  auto cluster = load_cluster(f.cluster);
  if (!cluster) throw InputError(cluster.error().message);
  auto runs = read_vtrain_csv(f.vtrain);
  if (!runs) throw InputError(runs.error().message);
  const FitQuality before = evaluate_fit(*runs, *cluster, f.threads);
  auto fit = fit_compute_efficiency(*runs, *cluster, f.threads);
  if (!fit) throw InputError(fit.error().message);
  std::string text;
  text += fmt::format("# calibrating {} against {} measured runs ({})\n", cluster->name, runs->size(), f.vtrain);
  text += fmt::format("before: gemm_max_efficiency {:.4f}, half-saturation {:.4g} FLOP: mean |error| {:.2f} %, max {:.2f} %\n",
                      cluster->compute.gemm_max_efficiency, cluster->compute.gemm_half_saturation_flops,
                      100 * before.mean_abs_error, 100 * before.max_abs_error);
  text += fmt::format("after:  gemm_max_efficiency {:.4f}, half-saturation {:.4g} FLOP: mean |error| {:.2f} %, max {:.2f} %\n",
                      fit->gemm_max_efficiency, fit->gemm_half_saturation_flops, 100 * fit->quality.mean_abs_error,
                      100 * fit->quality.max_abs_error);
  write_output("", text);
  if (!f.residuals.empty()) {
    ClusterSpec calibrated = *cluster;
    calibrated.compute.gemm_max_efficiency = fit->gemm_max_efficiency;
    calibrated.compute.gemm_half_saturation_flops = fit->gemm_half_saturation_flops;
    std::vector<double> predicted;
    evaluate_fit(*runs, calibrated, f.threads, &predicted);
    std::string csv = "gpus,global_batch,micro_batch,hidden,heads,layers,seq,tp,dp,pp,measured_s,predicted_s,error\n";
    for (std::size_t i = 0; i < runs->size(); ++i) {
      const MeasuredRun& r = (*runs)[i];
      csv += fmt::format("{},{},{},{},{},{},{},{},{},{},{:.6f},{:.6f},{:+.4f}\n", r.training.gpus, r.training.global_batch,
                         r.config.micro_batch, r.model.hidden, r.model.heads, r.model.layers, r.model.seq_len,
                         r.config.tp, r.config.dp, r.config.pp, r.measured_s, predicted[i],
                         predicted[i] / r.measured_s - 1.0);
    }
    write_output(f.residuals, csv);
  }
  if (!f.out.empty()) {
    ClusterSpec calibrated = *cluster;
    calibrated.compute.gemm_max_efficiency = fit->gemm_max_efficiency;
    calibrated.compute.gemm_half_saturation_flops = fit->gemm_half_saturation_flops;
    calibrated.provenance["calibrated_from"] = f.vtrain;
    calibrated.provenance["calibration_mean_abs_error"] = fmt::format("{:.4f}", fit->quality.mean_abs_error);
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
  app->add_option("--threads", flags->threads, "simulation threads");
  return [flags] { return run_calibrate(*flags); };
}

}  // namespace

LOOM_REGISTER_COMMAND("calibrate", add_calibrate);

}  // namespace loom::cli
