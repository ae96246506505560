// What the GUI asks the planner for: the same spec inputs and config restrictions as `loom plan`
// (so both programs read input identically), resolved and searched off the UI thread. The plan
// file of a chosen row is planner/search.h's plan_file_text.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "core/spec_inputs.h"
#include "planner/search.h"
#include "planner/search_space.h"

namespace loom::gui {

struct PlanRequest {
  SpecInputs specs;
  ConfigText config;  // the restriction lists, as typed
  int threads = 0;    // search threads; 0: one per hardware thread
};

// One finished search. `error` is set (one line) when the input was bad or nothing could be laid out.
// With several software stacks named (`--framework a,b`, as `loom plan` takes it) each was searched
// alone and `result` ranks their rows together; `specs` is the first stack's, `stacks` all of them.
struct PlanOutcome {
  Specs specs;
  std::vector<Specs> stacks;
  PlanResult result;
  std::string error;
  bool bad_input = false;  // `error` is the input's fault (`loom plan` exits 2 for it), not Loom's
  bool ok() const { return error.empty(); }
  // The specs a row was searched under: its stack's (the first when it names none).
  const Specs& specs_for(const PlanRow& row) const;
};

using ProgressFn = std::function<void(std::size_t done, std::size_t total)>;

// The request's inputs resolved and its restrictions parsed, or the first error: what bad input
// the GUI reports (and `loom-gui` rejects at start-up) before any search.
Status check_request(const PlanRequest& request);

// Resolves the inputs and runs search_plans. Never throws; safe to call from any thread.
PlanOutcome run_plan_request(const PlanRequest& request, const ProgressFn& progress = {});

}  // namespace loom::gui
