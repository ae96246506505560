// What the GUI asks the planner for: the same spec and config flags as `loom plan` (so both
// programs read input identically), resolved and searched off the UI thread, and the plan file
// of one chosen row in the form `loom run --plan` takes.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "cli/spec_flags.h"
#include "planner/search.h"

namespace loom::gui {

struct PlanRequest {
  cli::SpecFlags specs;
  cli::ConfigFlags config;
  int threads = 0;  // search threads; 0: one per hardware thread
};

// One finished search. `error` is set (one line) when the input was bad or nothing could be laid out.
struct PlanOutcome {
  cli::Specs specs;
  PlanResult result;
  std::string error;
  bool ok() const { return error.empty(); }
};

using ProgressFn = std::function<void(std::size_t done, std::size_t total)>;


// Resolves the flags and runs search_plans. Never throws; safe to call from any thread.
PlanOutcome run_plan_request(const PlanRequest& request, const ProgressFn& progress = {});

// The plan file `loom plan --emit-plan` writes for `row`: to_json(Plan).dump(2) plus a newline.
Plan make_plan(const cli::Specs& specs, const PlanRow& row);
std::string plan_file_text(const cli::Specs& specs, const PlanRow& row);

}  // namespace loom::gui
