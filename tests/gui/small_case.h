// The small search the GUI tests share: LLaMA-2 7B on 16 A100s, global batch 64 — every layout
// from tp1 pp1 to tp8 pp4 in well under a second.
#pragma once

#include "gui/models/plan_request.h"

namespace loom::gui::testing {

inline PlanRequest small_request(long long gpus = 16) {
  PlanRequest r;
  r.specs.model = "llama2-7b";
  r.specs.cluster = "dgx-a100-80gb";
  r.specs.gpus = gpus;
  r.specs.global_batch = 64;
  return r;
}

// Searched once per test program.
inline const PlanOutcome& small_outcome() {
  static const PlanOutcome outcome = run_plan_request(small_request());
  return outcome;
}

// The fastest plan with the given pipeline depth, or -1.
inline int first_plan_with_pp(const PlanResult& result, int pp) {
  for (std::size_t i = 0; i < result.plans.size(); ++i)
    if (result.plans[i].config.pp == pp) return static_cast<int>(i);
  return -1;
}

}  // namespace loom::gui::testing
