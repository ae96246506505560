#include "planner/search.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <tuple>

#include <fmt/format.h>

#include "core/json_io.h"
#include "core/parallel_for.h"
#include "core/units.h"
#include "sim/step_bound.h"

namespace loom {

bool config_less(const ParallelConfig& a, const ParallelConfig& b) {
  auto key = [](const ParallelConfig& c) {
    return std::make_tuple(c.tp, c.pp, c.dp, c.zero, c.shard_group, c.micro_batch, c.vpp, static_cast<int>(c.recompute),
                           c.sequence_parallel, static_cast<int>(c.schedule), c.split.first_stage_layers,
                           c.split.last_stage_layers, c.split.account_for_embedding, c.split.account_for_loss,
                           std::cref(c.split.stage_layers), c.cp, static_cast<int>(c.cp_comm), c.ep, c.etp);
  };
  return key(a) < key(b);
}

Result<PlanRow> evaluate_config(const ModelSpec& model, const TrainingSpec& training, const ClusterSpec& cluster,
                                const ParallelConfig& config, const MemoryReport& memory) {
  const sim::CollectiveModel collectives(cluster);
  return evaluate_config(model, training, cluster, collectives, config, memory);
}

Result<PlanRow> evaluate_config(const ModelSpec& model, const TrainingSpec& training, const ClusterSpec& cluster,
                                const sim::CollectiveModel& collectives, const ParallelConfig& config,
                                const MemoryReport& memory) {
  auto sim = sim::simulate(model, training, config, cluster, collectives);
  if (!sim) return sim.error();
  return plan_row(*sim, memory, training);
}

PlanRow plan_row(const sim::SimResult& sim, const MemoryReport& memory, const TrainingSpec& training) {
  PlanRow row;
  row.config = sim.config;
  row.precision = training.precision;
  row.micro_batches = sim.micro_batches;
  row.metrics.step_time_s = sim.step_time_s;
  row.metrics.tokens_per_s = sim.tokens_per_s;
  row.metrics.tflops_per_gpu = sim.tflops_per_gpu;
  row.metrics.hw_tflops_per_gpu = sim.hw_tflops_per_gpu;
  row.metrics.mfu = sim.mfu;
  row.metrics.bubble_fraction = sim.bubble_fraction;
  row.metrics.exposed_comm_s = sim.exposed.total();
  row.metrics.fits = memory.fits;
  row.metrics.memory_gib = memory.most_loaded_gib();
  row.memory = memory.most_loaded();
  for (const StageMemory& s : memory.stages) row.stage_layers.push_back(s.layers);
  row.exposed = sim.exposed;
  row.limited_by = sim.limited_by;
  row.framework = training.framework;
  if (training.tokens > 0) row.days_to_train = training.tokens / sim.tokens_per_s / 86400.0;
  return row;
}

Plan make_plan(const Specs& specs, const PlanRow& row) {
  Plan plan;
  plan.model = specs.model;
  plan.cluster = specs.cluster_name;
  plan.training = specs.training;
  plan.config = row.config;
  plan.predicted = row.metrics;
  return plan;
}

std::string plan_file_text(const Specs& specs, const PlanRow& row) {
  return to_json(make_plan(specs, row)).dump(2) + "\n";
}

sim::SimOptions detailed_sim_options(const MemoryReport& memory, const ParallelConfig& config) {
  sim::SimOptions options;
  options.keep_graph = true;
  options.record_segments = true;
  for (const auto& s : memory.stages) {
    options.static_bytes_per_stage.push_back(s.total_bytes() - s.activations_bytes);
    options.activation_bytes_per_forward.push_back(s.activation_bytes_per_layer * s.layers / config.vpp);
    options.weight_pass_bytes.push_back(s.weight_pass_kept_bytes);
  }
  return options;
}

std::vector<int> pareto_front(const std::vector<PlanRow>& plans, const std::vector<int>& candidates) {
  // Sweep by memory ascending (faster first on ties, then rank): a plan is on the front when it
  // is strictly faster than every plan using no more memory.
  std::vector<int> order = candidates;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const auto& p = plans[a].metrics;
    const auto& q = plans[b].metrics;
    if (p.memory_gib.total != q.memory_gib.total) return p.memory_gib.total < q.memory_gib.total;
    if (p.tokens_per_s != q.tokens_per_s) return p.tokens_per_s > q.tokens_per_s;
    return a < b;
  });
  std::vector<int> front;
  double best = -1;
  for (int i : order) {
    if (plans[i].metrics.tokens_per_s > best) {
      front.push_back(i);
      best = plans[i].metrics.tokens_per_s;
    }
  }
  return front;
}

namespace {

// Branch and bound over the fitting configurations: bound each (cheap), then simulate in order of
// bound, a batch at a time, until the next bound is slower than the top-th fastest step simulated.
// Every skipped configuration's step is at least its bound, so strictly slower than `top` simulated
// ones: the first `top` rows are those of the full search. Returns how many were skipped.
template <typename SimulateOne>
std::size_t simulate_bounded(const ModelSpec& model, const TrainingSpec& training, const ClusterSpec& cluster,
                             const sim::CollectiveModel& collectives,
                             const std::vector<std::pair<ParallelConfig, MemoryReport>>& fitting,
                             const PlanOptions& options, const std::vector<std::optional<PlanRow>>& rows,
                             SimulateOne&& simulate_one) {
  // Each thread bounds a contiguous share with its own StepBound. With one memo shared by the threads,
  // the bounds took longer on 2 cores than on one (about 450 against 320 ms for bench_planner's
  // EveryDimension search); with one each they take about 180 ms, and 8 or 32 memos repeat only 3 or 17 %
  // of the chunks one memo computes (56,557 for that search).
  std::vector<double> bound(fitting.size());
  const std::size_t parts = thread_count(options.threads);
  parallel_for(parts, options.threads, [&](std::size_t p) {
    const sim::StepBound bounds(model, training, cluster, collectives);
    const std::size_t begin = fitting.size() * p / parts, end = fitting.size() * (p + 1) / parts;
    for (std::size_t i = begin; i < end; ++i) bound[i] = bounds.lower_bound_s(fitting[i].first);
  });
  std::vector<std::size_t> order(fitting.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return bound[a] < bound[b]; });

  // A batch gives every thread a few configurations; the first is at least `top` long.
  const std::size_t batch = std::max<std::size_t>(4 * thread_count(options.threads), 8);
  std::vector<double> fastest;  // the `top` fastest simulated steps, ascending
  std::size_t next = 0;
  while (next < order.size()) {
    if (fastest.size() == options.top && bound[order[next]] > fastest.back()) break;
    const std::size_t end = std::min(order.size(), next + std::max(batch, options.top - fastest.size()));
    parallel_for(end - next, options.threads, [&](std::size_t j) { simulate_one(order[next + j], order.size()); });
    for (std::size_t j = next; j < end; ++j) {
      if (!rows[order[j]]) continue;
      fastest.push_back(rows[order[j]]->metrics.step_time_s);
      std::sort(fastest.begin(), fastest.end());
      if (fastest.size() > options.top) fastest.pop_back();
    }
    next = end;
  }
  return order.size() - next;
}

}  // namespace

Result<PlanResult> search_plans(const ModelSpec& model, const TrainingSpec& training, const ClusterSpec& cluster,
                                const SearchSpace& space, const PlanOptions& options) {
  auto enumeration = enumerate_configs(model, training, cluster, space);
  if (!enumeration) return enumeration.error();
  PlanResult result;
  result.rejected = std::move(enumeration->rejected);
  result.enumerated = enumeration->legal.size();

  // Memory first (cheap): only what fits is simulated.
  std::vector<MemoryReport> memories(enumeration->legal.size());
  parallel_for(memories.size(), options.threads,
               [&](std::size_t i) { memories[i] = estimate_memory(model, training, enumeration->legal[i], cluster); });
  std::vector<std::pair<ParallelConfig, MemoryReport>> fitting;
  for (std::size_t i = 0; i < memories.size(); ++i) {
    const ParallelConfig& c = enumeration->legal[i];
    MemoryReport& memory = memories[i];
    if (memory.fits) {
      fitting.emplace_back(c, std::move(memory));
    } else {
      const double over = bytes_to_gib(memory.most_loaded_total_bytes() - memory.capacity_bytes);
      result.rejected.push_back({c, fmt::format("OOM by {:.1f} GiB on stage {}", over, memory.most_loaded_stage),
                                 "out of memory", training.framework});
    }
  }

  std::vector<std::optional<PlanRow>> rows(fitting.size());
  std::vector<std::string> errors(fitting.size());
  std::atomic<std::size_t> done{0};
  std::mutex progress_mutex;
  const sim::CollectiveModel collectives(cluster);
  auto simulate_one = [&](std::size_t i, std::size_t total) {
    auto row = evaluate_config(model, training, cluster, collectives, fitting[i].first, fitting[i].second);
    if (row)
      rows[i] = std::move(*row);
    else
      errors[i] = row.error().message;
    const std::size_t finished = ++done;
    if (options.progress && (finished % 64 == 0 || finished == total)) {
      std::lock_guard<std::mutex> lock(progress_mutex);
      options.progress(finished, total);
    }
  };
  if (options.top == 0 || options.top >= fitting.size()) {
    parallel_for(fitting.size(), options.threads, [&](std::size_t i) { simulate_one(i, fitting.size()); });
  } else {
    result.skipped = simulate_bounded(model, training, cluster, collectives, fitting, options, rows, simulate_one);
  }

  for (std::size_t i = 0; i < fitting.size(); ++i) {
    if (rows[i])
      result.plans.push_back(std::move(*rows[i]));
    else if (!errors[i].empty())
      result.rejected.push_back({fitting[i].first, errors[i], "cannot be scheduled", training.framework});
  }
  result.simulated = result.plans.size();
  std::stable_sort(result.plans.begin(), result.plans.end(), plan_less);
  return result;
}

bool plan_less(const PlanRow& a, const PlanRow& b) {
  if (a.metrics.step_time_s != b.metrics.step_time_s) return a.metrics.step_time_s < b.metrics.step_time_s;
  if (a.metrics.memory_gib.total != b.metrics.memory_gib.total)
    return a.metrics.memory_gib.total < b.metrics.memory_gib.total;
  if (config_less(a.config, b.config)) return true;
  if (config_less(b.config, a.config)) return false;
  return a.framework < b.framework;
}

const Specs& stack_of(const std::vector<Specs>& stacks, const PlanRow& row) {
  for (const Specs& s : stacks)
    if (s.training.framework == row.framework) return s;
  return stacks.front();
}

Result<PlanResult> search_stacks(const std::vector<Specs>& stacks, const SearchSpace& space,
                                 const PlanOptions& options) {
  std::vector<PlanResult> results;
  for (std::size_t i = 0; i < stacks.size(); ++i) {
    PlanOptions one = options;
    // Each stack's progress as its share of a per-mille scale: the stacks' totals are known only as
    // each search enumerates.
    constexpr std::size_t kShare = 1000;
    if (options.progress && stacks.size() > 1)
      one.progress = [&options, i, n = stacks.size()](std::size_t done, std::size_t total) {
        options.progress(i * kShare + (total > 0 ? done * kShare / total : kShare), n * kShare);
      };
    auto result = search_plans(stacks[i].model, stacks[i].training, stacks[i].cluster, space, one);
    if (!result) return result.error();
    results.push_back(std::move(*result));
  }
  if (results.size() == 1) return std::move(results.front());
  return merge_plan_results(std::move(results));
}

PlanResult merge_plan_results(std::vector<PlanResult> results) {
  PlanResult merged;
  for (PlanResult& r : results) {
    for (Rejection& rejection : r.rejected) {
      // The legality rule of core/framework.h names its stack already; the others do not.
      const std::string stack = rejection.framework + ": ";
      if (!rejection.framework.empty() && rejection.reason.rfind(stack, 0) != 0)
        rejection.reason = stack + rejection.reason;
      merged.rejected.push_back(std::move(rejection));
    }
    for (PlanRow& row : r.plans) merged.plans.push_back(std::move(row));
    merged.enumerated += r.enumerated;
    merged.simulated += r.simulated;
    merged.skipped += r.skipped;
  }
  std::stable_sort(merged.plans.begin(), merged.plans.end(), plan_less);
  return merged;
}

}  // namespace loom
