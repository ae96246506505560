#include "gui/models/plan_request.h"

#include <exception>

namespace loom::gui {

Status check_request(const PlanRequest& request) {
  if (auto specs = resolve_specs(request.specs); !specs) return specs.error();
  if (auto space = parse_search_space(request.config); !space) return space.error();
  return {};
}

PlanOutcome run_plan_request(const PlanRequest& request, const ProgressFn& progress) {
  PlanOutcome out;
  try {
    auto specs = resolve_specs(request.specs);
    if (!specs) {
      out.error = specs.error().message;
      return out;
    }
    out.specs = std::move(*specs);
    auto space = parse_search_space(request.config);
    if (!space) {
      out.error = space.error().message;
      return out;
    }
    PlanOptions options;
    options.threads = request.threads;
    options.progress = progress;
    auto result = search_plans(out.specs.model, out.specs.training, out.specs.cluster, *space, options);
    if (!result) {
      out.error = result.error().message;
      return out;
    }
    out.result = std::move(*result);
  } catch (const std::exception& e) {
    out.error = std::string("unexpected error: ") + e.what();
  }
  return out;
}

}  // namespace loom::gui
