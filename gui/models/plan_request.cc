#include "gui/models/plan_request.h"

#include <exception>

#include "cli/command.h"
#include "core/json_io.h"

namespace loom::gui {

PlanOutcome run_plan_request(const PlanRequest& request, const ProgressFn& progress) {
  PlanOutcome out;
  try {
    out.specs = request.specs.resolve();
    const SearchSpace space = cli::to_search_space(request.config.lists());
    PlanOptions options;
    options.threads = request.threads;
    options.progress = progress;
    auto result = search_plans(out.specs.model, out.specs.training, out.specs.cluster, space, options);
    if (!result) {
      out.error = result.error().message;
      return out;
    }
    out.result = std::move(*result);
  } catch (const cli::InputError& e) {
    out.error = e.what();
  } catch (const std::exception& e) {
    out.error = std::string("unexpected error: ") + e.what();
  }
  return out;
}

Plan make_plan(const cli::Specs& specs, const PlanRow& row) {
  Plan plan;
  plan.model = specs.model;
  plan.cluster = specs.cluster_name;
  plan.training = specs.training;
  plan.config = row.config;
  plan.predicted = row.metrics;
  return plan;
}

std::string plan_file_text(const cli::Specs& specs, const PlanRow& row) {
  return to_json(make_plan(specs, row)).dump(2) + "\n";
}

}  // namespace loom::gui
