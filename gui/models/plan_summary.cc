#include "gui/models/plan_summary.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/units.h"

namespace loom::gui {

std::vector<SummaryLine> plan_summary(const PlanDetail& d) {
  const sim::SimResult& r = d.sim;
  const double step = r.step_time_s > 0 ? r.step_time_s : 1;
  const auto pct = [step](double s) { return 100.0 * s / step; };
  std::vector<SummaryLine> lines;
  lines.push_back({"config", describe(d.config)});
  if (!d.framework.empty()) lines.push_back({"framework", d.framework});
  lines.push_back(
      {"step time", fmt::format("{:.3f} s  ({} micro-batches per pipeline)", r.step_time_s, r.micro_batches)});
  lines.push_back({"throughput", fmt::format("{:.0f} tokens/s", r.tokens_per_s)});
  lines.push_back(
      {"TFLOP/s per GPU", fmt::format("{:.1f} model, {:.1f} hardware", r.tflops_per_gpu, r.hw_tflops_per_gpu)});
  lines.push_back({"MFU", fmt::format("{:.1f} %", 100.0 * r.mfu)});
  lines.push_back({"bubble", fmt::format("{:.1f} % of the step", 100.0 * r.bubble_fraction)});
  lines.push_back(
      {"exposed comm", fmt::format("{:.3f} s ({:.1f} %): TP {:.3f}, PP {:.3f}, DP {:.3f} s", r.exposed.total(),
                                   pct(r.exposed.total()), r.exposed.tp_s, r.exposed.pp_s, r.exposed.dp_s)});
  const StageMemory& top = d.memory.most_loaded();
  lines.push_back({"memory", fmt::format("{:.1f} of {:.1f} GiB on stage {}{}", bytes_to_gib(top.total_bytes()),
                                         bytes_to_gib(d.memory.capacity_bytes), top.stage,
                                         d.memory.fits ? "" : " — does not fit")});
  lines.push_back({"limited by", r.limited_by});
  return lines;
}

std::vector<std::string> critical_path_runs(const sim::SimResult& r, std::size_t max_runs) {
  struct Run {
    std::size_t first, last;
    double seconds;
  };
  std::vector<Run> runs;
  for (std::size_t i = 0; i < r.critical_path.size();) {
    std::size_t j = i;
    double seconds = 0;
    while (j < r.critical_path.size() && r.critical_path[j].stage == r.critical_path[i].stage)
      seconds += r.critical_path[j++].contribution_s;
    runs.push_back({i, j - 1, seconds});
    i = j;
  }
  // Keep the longest runs, shown in path order.
  std::vector<std::size_t> order(runs.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return runs[a].seconds > runs[b].seconds; });
  if (order.size() > max_runs) order.resize(max_runs);
  std::sort(order.begin(), order.end());
  std::vector<std::string> out;
  for (std::size_t k : order) {
    const Run& run = runs[k];
    const auto& first = r.critical_path[run.first];
    const auto& last = r.critical_path[run.last];
    out.push_back(fmt::format("stage {:>2}  {:>8.3f} s  {}{}  ({} ops)", first.stage, run.seconds, first.name,
                              run.last > run.first ? " .. " + last.name : "", run.last - run.first + 1));
  }
  return out;
}

namespace {

// `higher_is_better`: +1 when more is better (tokens/s), -1 when less is (step time), 0 neither.
CompareLine numeric(const std::string& label, double a, double b, int decimals, const std::string& unit,
                    int higher_is_better) {
  CompareLine l{label, fmt::format("{:.{}f}{}", a, decimals, unit), fmt::format("{:.{}f}{}", b, decimals, unit), "", 0};
  if (a != 0) l.delta = fmt::format("{:+.1f} %", 100.0 * (b - a) / std::fabs(a));
  const double scale = std::max(std::fabs(a), std::fabs(b));
  if (higher_is_better != 0 && scale > 0 && std::fabs(b - a) > 1e-9 * scale)
    l.better = (b > a) == (higher_is_better > 0) ? 1 : -1;
  return l;
}

CompareLine text(const std::string& label, const std::string& a, const std::string& b) {
  return {label, a, b, a == b ? "" : "differs", 0};
}

}  // namespace

std::vector<CompareLine> compare_plans(const PlanRow& a, const PlanRow& b) {
  const ParallelConfig& x = a.config;
  const ParallelConfig& y = b.config;
  const PlanMetrics& m = a.metrics;
  const PlanMetrics& n = b.metrics;
  std::vector<CompareLine> lines = {
      text("layout", fmt::format("tp{} cp{} pp{} dp{}", x.tp, x.cp, x.pp, x.dp),
           fmt::format("tp{} cp{} pp{} dp{}", y.tp, y.cp, y.pp, y.dp)),
      text("ZeRO / micro-batch / vpp", fmt::format("{} / {} / {}", x.zero, x.micro_batch, x.vpp),
           fmt::format("{} / {} / {}", y.zero, y.micro_batch, y.vpp)),
      text("recompute / SP", fmt::format("{} / {}", to_string(x.recompute), x.sequence_parallel ? "on" : "off"),
           fmt::format("{} / {}", to_string(y.recompute), y.sequence_parallel ? "on" : "off")),
      text("schedule", to_string(x.schedule), to_string(y.schedule)),
      text("framework", a.framework.empty() ? "none" : a.framework, b.framework.empty() ? "none" : b.framework),
      numeric("step time", m.step_time_s, n.step_time_s, 3, " s", -1),
      numeric("tokens/s", m.tokens_per_s, n.tokens_per_s, 0, "", +1),
      numeric("TFLOP/s per GPU", m.tflops_per_gpu, n.tflops_per_gpu, 1, "", +1),
      numeric("MFU", 100.0 * m.mfu, 100.0 * n.mfu, 1, " %", +1),
      numeric("bubble", 100.0 * m.bubble_fraction, 100.0 * n.bubble_fraction, 1, " %", -1),
      numeric("exposed TP comm", a.exposed.tp_s, b.exposed.tp_s, 3, " s", -1),
      numeric("exposed PP comm", a.exposed.pp_s, b.exposed.pp_s, 3, " s", -1),
      numeric("exposed DP comm", a.exposed.dp_s, b.exposed.dp_s, 3, " s", -1),
      numeric("memory (GiB)", m.memory_gib.total, n.memory_gib.total, 1, "", -1),
      numeric("  params", m.memory_gib.params, n.memory_gib.params, 1, "", -1),
      numeric("  grads", m.memory_gib.grads, n.memory_gib.grads, 1, "", -1),
      numeric("  optimizer", m.memory_gib.optimizer, n.memory_gib.optimizer, 1, "", -1),
      numeric("  activations", m.memory_gib.activations, n.memory_gib.activations, 1, "", -1),
      numeric("  buffers", m.memory_gib.buffers, n.memory_gib.buffers, 1, "", -1),
      numeric("micro-batches", static_cast<double>(a.micro_batches), static_cast<double>(b.micro_batches), 0, "", 0),
      text("limited by", a.limited_by, b.limited_by),
  };
  if (a.days_to_train > 0 || b.days_to_train > 0)
    lines.push_back(numeric("days to train", a.days_to_train, b.days_to_train, 1, "", -1));
  return lines;
}

}  // namespace loom::gui
