// `loom validate`: the simulator against measurements. --published reproduces Korthikanti et al.
// 2022 Table 5 (predicted, published, error); --profile FILE runs the on-machine matrix.
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "cli/command.h"
#include "cli/output.h"
#include "core/json_io.h"
#include "core/presets.h"
#include "planner/published.h"

namespace loom::cli {
namespace {

struct ValidateFlags {
  bool published = false;
  std::string validation_dir = "../shared/validation";
  std::string cluster = "dgx-a100-80gb";
  std::string profile;
  std::string format = "table";
};

int run_published(const ValidateFlags& f) {
  auto cluster = load_cluster(f.cluster);
  if (!cluster) throw InputError(cluster.error().message);
  auto rows = reproduce_korthikanti_table5(f.validation_dir + "/korthikanti2022.json", *cluster);
  if (!rows) throw InputError(rows.error().message);
  double sum = 0, worst = 0;
  for (const auto& r : *rows) {
    sum += std::abs(r.error());
    worst = std::max(worst, std::abs(r.error()));
  }
  const double mean = rows->empty() ? 0.0 : sum / rows->size();
  if (f.format == "json") {
    Json out;
    out["source"] = "Korthikanti et al. 2022, Table 5";
    out["cluster"] = cluster->name;
    Json list = Json::array();
    for (const auto& r : *rows)
      list.push_back({{"model", r.model}, {"setting", r.setting}, {"config", to_json(r.config)},
                      {"published_s", r.published_s}, {"predicted_s", r.predicted_s}, {"error", r.error()}});
    out["rows"] = list;
    out["mean_abs_error"] = mean;
    out["max_abs_error"] = worst;
    write_output("", out.dump(2) + "\n");
    return kExitOk;
  }
  std::string text = fmt::format("# Korthikanti et al. 2022, Table 5: iteration time on DGX A100 ({})\n", cluster->name);
  text += fmt::format("{:<6} {:<34} {:>4} {:>4} {:>5} {:>4} {:>12} {:>12} {:>8}\n", "model", "setting", "GPUs", "TP",
                      "PP", "VPP", "published_s", "predicted_s", "error%");
  for (const auto& r : *rows)
    text += fmt::format("{:<6} {:<34} {:>4} {:>4} {:>5} {:>4} {:>12.2f} {:>12.2f} {:>+8.2f}\n", r.model, r.setting,
                        r.gpus, r.config.tp, r.config.pp, r.config.vpp, r.published_s, r.predicted_s, 100.0 * r.error());
  text += fmt::format("# mean |error| {:.2f} %, max |error| {:.2f} %\n", 100.0 * mean, 100.0 * worst);
  write_output("", text);
  return kExitOk;
}

std::function<int()> add_validate(CLI::App& root) {
  auto flags = std::make_shared<ValidateFlags>();
  CLI::App* app = root.add_subcommand("validate", "compare the simulator with measured step times");
  app->add_flag("--published", flags->published, "reproduce published measurements (Korthikanti et al. 2022, Table 5)");
  app->add_option("--validation-dir", flags->validation_dir, "folder with the published numbers")->capture_default_str();
  app->add_option("--cluster", flags->cluster, "cluster preset or cost file for --published")->capture_default_str();
  app->add_option("--profile", flags->profile, "cost file measured on this machine (runs the on-machine matrix)");
  app->add_option("--format", flags->format, "table or json")->capture_default_str();
  return [flags]() -> int {
    if (flags->format != "table" && flags->format != "json")
      throw InputError(fmt::format("--format: unknown format '{}' (table, json)", flags->format));
    if (flags->published) return run_published(*flags);
    throw InputError("validate: give --published (the on-machine --profile matrix needs `loom run`)");
  };
}

}  // namespace

LOOM_REGISTER_COMMAND("validate", add_validate);

}  // namespace loom::cli
