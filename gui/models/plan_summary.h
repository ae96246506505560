// The summary of the selected plan (step time, tokens/s, MFU, bubble, exposed communication by
// kind, what limits it, the critical path folded per stage) and the side-by-side comparison of
// two plans, as label/value lines the views lay out.
#pragma once

#include <string>
#include <vector>

#include "gui/models/plan_detail.h"
#include "planner/search.h"

namespace loom::gui {

struct SummaryLine {
  std::string label;
  std::string value;
};

std::vector<SummaryLine> plan_summary(const PlanDetail& detail);

// The critical path folded into runs of consecutive ops on one stage, longest `max_runs` first
// in path order: "stage 15  15.224 s  F31 mb0 .. send B31 mb191 (737 ops)".
std::vector<std::string> critical_path_runs(const sim::SimResult& result, std::size_t max_runs);

struct CompareLine {
  std::string label;
  std::string a, b;
  std::string delta;  // b relative to a ("+4.2 %"), empty where it means nothing
  int better = 0;     // -1: a is better, +1: b is better, 0: equal or not comparable
};

std::vector<CompareLine> compare_plans(const PlanRow& a, const PlanRow& b);

}  // namespace loom::gui
