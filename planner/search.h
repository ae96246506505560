// The planner's search: enumerate legal configurations, drop those that do not fit in memory
// (keeping the reason), simulate every one that fits, and rank them by simulated step time.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/plan.h"
#include "core/spec_inputs.h"
#include "planner/enumerate.h"
#include "planner/memory_model.h"
#include "sim/simulator.h"

namespace loom {

struct PlanRow {
  ParallelConfig config;
  PlanMetrics metrics;
  StageMemory memory;                      // the most loaded stage
  std::vector<int> stage_layers;           // transformer layers of each pipeline stage (all its chunks)
  Precision precision = Precision::kBf16;  // of the linear layers' GEMMs (the run's, the same on every row)
  sim::ExposedComm exposed;
  long long micro_batches = 0;
  double days_to_train = 0;  // 0 when no token budget was given
  std::string limited_by;
  std::string framework;  // the software stack the row was simulated under (TrainingSpec::framework; "" none)
};

struct PlanResult {
  std::vector<PlanRow> plans;  // fastest first
  std::vector<Rejection> rejected;
  std::size_t enumerated = 0;  // legal configurations considered
  std::size_t simulated = 0;
  // With PlanOptions::top: configurations that fit but were not simulated, their lower bound on the
  // step (sim/step_bound.h) slower than the top-th plan's simulated step.
  std::size_t skipped = 0;
};

struct PlanOptions {
  int threads = 0;  // 0: one per hardware thread
  // 0: simulate every configuration that fits, and list them all. K > 0: only the K fastest are
  // wanted: configurations are simulated in order of their lower bound on the step, and those whose
  // bound is slower than the K-th fastest simulated so far are skipped. `plans` then holds what was
  // simulated; its first K are exactly the first K of the full search (ties broken the same way).
  std::size_t top = 0;
  // Called as configurations finish: (done, total). From worker threads, serialised.
  std::function<void(std::size_t, std::size_t)> progress;
};

// A simulated configuration as a plan row: the simulator's metrics, the memory model's most loaded
// stage, and the days to train when `training` has a token budget. The one place a SimResult's
// metrics are copied into a PlanRow.
PlanRow plan_row(const sim::SimResult& sim, const MemoryReport& memory, const TrainingSpec& training);

// One configuration simulated and turned into a plan row (the planner's inner loop).
Result<PlanRow> evaluate_config(const ModelSpec& model, const TrainingSpec& training, const ClusterSpec& cluster,
                                const ParallelConfig& config, const MemoryReport& memory);
Result<PlanRow> evaluate_config(const ModelSpec& model, const TrainingSpec& training, const ClusterSpec& cluster,
                                const sim::CollectiveModel& collectives, const ParallelConfig& config,
                                const MemoryReport& memory);

Result<PlanResult> search_plans(const ModelSpec& model, const TrainingSpec& training, const ClusterSpec& cluster,
                                const SearchSpace& space, const PlanOptions& options = {});

// Searches of one model, cluster and space, each under its own software stack (`loom plan --framework
// a,b`), as one result: the plans ranked together by step time (each row names its stack), the counts
// summed, and every rejection kept, its reason naming the stack it was rejected under. With
// PlanOptions::top K in each search, the first K merged plans are those of one search over the union.
PlanResult merge_plan_results(std::vector<PlanResult> results);

// The stack of `stacks` a row was searched under (its framework's name), or the first.
const Specs& stack_of(const std::vector<Specs>& stacks, const PlanRow& row);

// search_plans under each stack of `stacks` (resolve_specs_per_framework), merged; one stack: its search
// alone. The progress runs over all of them, each stack a share of the total.
Result<PlanResult> search_stacks(const std::vector<Specs>& stacks, const SearchSpace& space,
                                 const PlanOptions& options = {});

// The planner's order: faster first, then less memory, then config_less, then the stack's name.
bool plan_less(const PlanRow& a, const PlanRow& b);

// Simulator options for one plan in detail (`loom sim --trace`, the GUI's Gantt): keep the graph
// and every kernel, and feed the trace's memory counter from the memory model — what each stage
// holds all step, and the activations one forward of one chunk adds.
sim::SimOptions detailed_sim_options(const MemoryReport& memory, const ParallelConfig& config);

// Indices (into `plans`) of the plans on the throughput/memory Pareto front among `candidates`:
// no other candidate is at least as fast with no more memory per GPU. Sorted by memory.
std::vector<int> pareto_front(const std::vector<PlanRow>& plans, const std::vector<int>& candidates);

// The plan `loom run --plan` takes for one row of a search over `specs`, and its file text
// (to_json(Plan).dump(2) plus a newline), as `loom plan --emit-plan` and the GUI write it.
Plan make_plan(const Specs& specs, const PlanRow& row);
std::string plan_file_text(const Specs& specs, const PlanRow& row);

// Config ordering used to break ties deterministically.
bool config_less(const ParallelConfig& a, const ParallelConfig& b);

}  // namespace loom
