#include "gui/models/plan_request.h"

#include <exception>

namespace loom::gui {

const Specs& PlanOutcome::specs_for(const PlanRow& row) const {
  for (const Specs& s : stacks)
    if (s.training.framework == row.framework) return s;
  return specs;
}

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
      return out;
    }
    out.stacks = std::move(*stacks);
    out.specs = out.stacks.front();
    auto space = parse_search_space(request.config);
    if (!space) {
      out.error = space.error().message;
      return out;
    }
    PlanOptions options;
    options.threads = request.threads;
    std::vector<PlanResult> results;
    for (std::size_t i = 0; i < out.stacks.size(); ++i) {
      const Specs& s = out.stacks[i];
      // Progress over all the searches: each stack's share of the whole.
      if (progress)
        options.progress = [&progress, i, n = out.stacks.size()](std::size_t done, std::size_t total) {
          progress(i * total + done, n * total);
        };
      auto result = search_plans(s.model, s.training, s.cluster, *space, options);
      if (!result) {
        out.error = result.error().message;
        return out;
      }
      results.push_back(std::move(*result));
    }
    out.result = results.size() == 1 ? std::move(results.front()) : merge_plan_results(std::move(results));
  } catch (const std::exception& e) {
    out.error = std::string("unexpected error: ") + e.what();
  }
  return out;
}

}  // namespace loom::gui
