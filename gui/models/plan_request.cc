#include "gui/models/plan_request.h"

#include <exception>

namespace loom::gui {

const Specs& PlanOutcome::specs_for(const PlanRow& row) const { return stacks.empty() ? specs : stack_of(stacks, row); }

Status check_request(const PlanRequest& request) {
  if (auto specs = resolve_specs_per_framework(request.specs); !specs) return specs.error();
  if (auto space = parse_search_space(request.config); !space) return space.error();
  return {};
}

PlanOutcome run_plan_request(const PlanRequest& request, const ProgressFn& progress) {
  PlanOutcome out;
  try {
    auto stacks = resolve_specs_per_framework(request.specs);
    if (!stacks) {
      out.error = stacks.error().message;
      out.bad_input = !stacks.error().internal();
      return out;
    }
    out.stacks = std::move(*stacks);
    out.specs = out.stacks.front();
    auto space = parse_search_space(request.config);
    if (!space) {
      out.error = space.error().message;
      out.bad_input = !space.error().internal();
      return out;
    }
    PlanOptions options;
    options.threads = request.threads;
    options.progress = progress;
    auto result = search_stacks(out.stacks, *space, options);
    if (!result) {
      out.error = result.error().message;
      out.bad_input = !result.error().internal();
      return out;
    }
    out.result = std::move(*result);
  } catch (const std::exception& e) {
    out.error = std::string("unexpected error: ") + e.what();
  }
  return out;
}

}  // namespace loom::gui
