#include "gui/models/gantt_data.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/units.h"
#include "sim/step_metrics.h"

namespace loom::gui {

namespace {

bool is_pass(sim::OpKind k) {
  return k == sim::OpKind::kForward || k == sim::OpKind::kBackward || k == sim::OpKind::kWeightGrad;
}

std::string duration_text(double s) {
  if (s >= 1) return fmt::format("{:.3f} s", s);
  if (s >= 1e-3) return fmt::format("{:.3f} ms", s * 1e3);
  return fmt::format("{:.1f} µs", s * 1e6);
}

}  // namespace

GanttData build_gantt(const PlanDetail& detail) {
  const sim::StepGraph& g = detail.sim.graph;
  const sim::Timeline& t = detail.sim.timeline;
  GanttData out;
  out.makespan_s = ns_to_s(t.makespan);
  std::vector<GanttRow> lanes(static_cast<std::size_t>(g.streams()));
  for (int s = 0; s < g.stages(); ++s) {
    for (int k = 0; k < sim::kStreamsPerStage; ++k) {
      GanttRow& row = lanes[sim::StepGraph::stream_of(s, static_cast<sim::StreamKind>(k))];
      row.stage = s;
      row.stream = static_cast<sim::StreamKind>(k);
      row.label = row.is_compute() ? fmt::format("stage {}", s) : std::string(sim::to_string(row.stream));
    }
  }
  for (std::int32_t i = 0; i < static_cast<std::int32_t>(g.size()); ++i) {
    const sim::Op& op = g.op(i);
    const double start = ns_to_s(t.start[i]);
    const double end = ns_to_s(t.end(g, i));
    lanes[op.stream].slices.push_back({start, end, i, op.kind});
    if (is_pass(op.kind)) out.pipeline_end_s = std::max(out.pipeline_end_s, end);
  }
  for (GanttRow& row : lanes) {
    std::stable_sort(row.slices.begin(), row.slices.end(),
                     [](const GanttSlice& a, const GanttSlice& b) { return a.start_s < b.start_s; });
    if (row.is_compute()) {
      // Idle time of the compute stream before the pipeline's last pass ends, as the simulator
      // counts the bubble (the optimizer is not pipeline work).
      double cursor = 0;
      for (const GanttSlice& s : row.slices) {
        if (!is_pass(s.kind)) continue;
        if (s.start_s > cursor) row.bubbles.push_back({cursor, std::min(s.start_s, out.pipeline_end_s)});
        cursor = std::max(cursor, s.end_s);
      }
      if (cursor < out.pipeline_end_s) row.bubbles.push_back({cursor, out.pipeline_end_s});
      for (const auto& b : row.bubbles) out.bubble_s += b.end_s - b.start_s;
    }
    if (row.is_compute() || !row.slices.empty()) out.rows.push_back(std::move(row));
  }
  return out;
}

std::int32_t slice_at(const GanttRow& row, double t_s, double tolerance_s) {
  const auto& v = row.slices;
  auto it = std::upper_bound(v.begin(), v.end(), t_s, [](double t, const GanttSlice& s) { return t < s.start_s; });
  std::int32_t best = -1;
  double best_distance = tolerance_s;
  // The slice starting at or before t, and the one after it, are the only candidates.
  for (auto c : {it == v.begin() ? v.end() : std::prev(it), it}) {
    if (c == v.end()) continue;
    const double distance = t_s < c->start_s ? c->start_s - t_s : t_s > c->end_s ? t_s - c->end_s : 0.0;
    if (distance <= best_distance) {
      best_distance = distance;
      best = c->op;
      if (distance == 0) break;
    }
  }
  return best;
}

const sim::PassCost* pass_of(const PlanDetail& detail, std::int32_t index) {
  const sim::Op& op = detail.sim.graph.op(index);
  if (!is_pass(op.kind) || op.local_chunk < 0 || op.stage >= static_cast<int>(detail.sim.chunk_costs.size()) ||
      op.local_chunk >= static_cast<int>(detail.sim.chunk_costs[op.stage].size()))
    return nullptr;
  const sim::ChunkCost& cc = detail.sim.chunk_costs[op.stage][op.local_chunk];
  return op.kind == sim::OpKind::kForward ? &cc.forward : op.kind == sim::OpKind::kBackward ? &cc.backward : &cc.weight;
}

std::string slice_tooltip(const PlanDetail& detail, std::int32_t index) {
  const sim::StepGraph& g = detail.sim.graph;
  const sim::Op& op = g.op(index);
  const double start = ns_to_s(detail.sim.timeline.start[index]);
  const double duration = ns_to_s(op.duration);
  std::string text = fmt::format("{}  (stage {}, {})\nstart {}, duration {}", sim::op_label(op), op.stage,
                                 sim::to_string(op.kind), duration_text(start), duration_text(duration));
  if (op.micro_batch >= 0) text += fmt::format("\nmicro-batch {}, model chunk {}", op.micro_batch, op.chunk);
  if (const sim::PassCost* found = pass_of(detail, index)) {
    const sim::PassCost& pass = *found;
    if (pass.tp_comm_exposed_s > 0)
      text += fmt::format("\nexposed TP communication {}", duration_text(pass.tp_comm_exposed_s));
    if (pass.cp_comm_exposed_s > 0)
      text += fmt::format("\nexposed CP communication {}", duration_text(pass.cp_comm_exposed_s));
    if (pass.dp_comm_exposed_s > 0)
      text += fmt::format("\nwaiting for ZeRO-3 gathers {}", duration_text(pass.dp_comm_exposed_s));
    // The largest kernels, merged by name (a chunk repeats each layer's kernels).
    std::vector<std::pair<std::string, double>> by_name;
    for (const auto& seg : pass.segments) {
      if (seg.beside) continue;  // hidden under the next kernel: not a share of the pass
      auto it = std::find_if(by_name.begin(), by_name.end(), [&](const auto& p) { return p.first == seg.name; });
      if (it == by_name.end())
        by_name.push_back({seg.name, seg.seconds});
      else
        it->second += seg.seconds;
    }
    std::stable_sort(by_name.begin(), by_name.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    for (std::size_t i = 0; i < by_name.size() && i < 5; ++i)
      text += fmt::format("\n  {:<18} {:>5.1f} %", by_name[i].first,
                          pass.seconds > 0 ? 100.0 * by_name[i].second / pass.seconds : 0.0);
  }
  if (index < static_cast<std::int32_t>(detail.on_critical_path.size()) && detail.on_critical_path[index])
    text += "\non the critical path";
  return text;
}

}  // namespace loom::gui
