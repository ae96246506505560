// Renders planner results: the aligned table with '#' lines stating every assumption, CSV,
// markdown, and the JSON of DESIGN.md ({"model": {...}, "plans": [...], "rejected": [...]}). Shared by
// `loom plan` and the GUI's CSV export.
#pragma once

#include <string>
#include <vector>

#include "core/cluster_spec.h"
#include "core/json_io.h"
#include "planner/search.h"

namespace loom {

struct ReportContext {
  const ModelSpec* model = nullptr;
  const ClusterSpec* cluster = nullptr;
  const TrainingSpec* training = nullptr;
  std::string cluster_source;  // as given: preset name or path
  // The other software stacks whose plans are ranked with `training`'s (`loom plan --framework a,b`;
  // merge_plan_results): each differs from `training` only in what its framework sets.
  std::vector<const TrainingSpec*> other_stacks;
};

// The context of a search over `stacks` (search_stacks): the first stack's, the others beside it.
ReportContext stacks_report_context(const std::vector<Specs>& stacks);

// The `#` lines: model, cluster, precision, optimizer bytes, reserve, profile, search counts.
std::vector<std::string> assumption_lines(const ReportContext& ctx, const PlanResult& result);

std::string format_table(const ReportContext& ctx, const PlanResult& result, std::size_t top);
std::string format_csv(const ReportContext& ctx, const PlanResult& result, std::size_t top);
std::string format_markdown(const ReportContext& ctx, const PlanResult& result, std::size_t top);
Json plan_row_json(const PlanRow& row, std::size_t rank);
// DESIGN.md's top-level `model` of plan and sim JSON: the model JSON's fields with `parameters` (total,
// as papers report sizes) and `active_parameters` (what one token uses; the total for a dense model).
Json model_summary_json(const ModelSpec& model);
Json format_json(const ModelSpec& model, const PlanResult& result, std::size_t top);

// `--explain`: rejected configurations grouped by rule, with counts and examples.
std::string format_rejections(const PlanResult& result, std::size_t examples_per_rule);

}  // namespace loom
