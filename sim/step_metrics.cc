#include "sim/step_metrics.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/trace_names.h"
#include "sim/collectives.h"

namespace loom::sim {

namespace {

bool is_pipeline_compute(OpKind kind) {
  return kind == OpKind::kForward || kind == OpKind::kBackward || kind == OpKind::kWeightGrad;
}

std::vector<StageTiming> stage_timings(const StepGraph& g, const Timeline& t) {
  // Summed in integer nanoseconds: a stage busy all along then shows exactly no bubble.
  std::vector<TimeNs> busy(g.stages(), 0), end(g.stages(), 0), optimizer(g.stages(), 0);
  for (std::int32_t i = 0; i < static_cast<std::int32_t>(g.size()); ++i) {
    const Op& op = g.op(i);
    if (is_pipeline_compute(op.kind)) {
      busy[op.stage] += op.duration;
      end[op.stage] = std::max(end[op.stage], t.end(g, i));
    } else if (op.kind == OpKind::kOptimizer) {
      optimizer[op.stage] += op.duration;
    }
  }
  std::vector<StageTiming> stages(g.stages());
  for (int s = 0; s < g.stages(); ++s) {
    stages[s].busy_s = ns_to_s(busy[s]);
    stages[s].pipeline_end_s = ns_to_s(end[s]);
    stages[s].optimizer_s = ns_to_s(optimizer[s]);
  }
  return stages;
}

}  // namespace

std::string op_label(const Op& op) {
  switch (op.kind) {
    case OpKind::kForward: return trace_names::forward(op.chunk, op.micro_batch);
    case OpKind::kBackward: return trace_names::backward(op.chunk, op.micro_batch);
    case OpKind::kWeightGrad: return trace_names::weight_grad(op.chunk, op.micro_batch);
    case OpKind::kPipeSend:
      return "send " + (op.direction == SendDirection::kForward ? trace_names::forward(op.chunk, op.micro_batch)
                                                                : trace_names::backward(op.chunk, op.micro_batch));
    case OpKind::kDataParallel: return trace_names::collective(to_string(op.collective), "dp");
    case OpKind::kOptimizer: return trace_names::kOptimizer;
  }
  return "?";
}

namespace {

double bubble_fraction_of(const std::vector<StageTiming>& stages, TimeNs makespan) {
  if (makespan <= 0 || stages.empty()) return 0.0;
  double pipeline_end = 0;
  for (const auto& s : stages) pipeline_end = std::max(pipeline_end, s.pipeline_end_s);
  double idle = 0;
  for (const auto& s : stages) idle += pipeline_end - s.busy_s;
  return idle / static_cast<double>(stages.size()) / ns_to_s(makespan);
}

}  // namespace

double bubble_fraction(const StepGraph& g, const Timeline& t) {
  return bubble_fraction_of(stage_timings(g, t), t.makespan);
}

StepStats step_stats(const StepGraph& g, const Timeline& t, const std::vector<std::vector<ChunkCost>>& chunks,
                     bool name_path) {
  StepStats st;
  st.stages = stage_timings(g, t);
  st.bubble_fraction = bubble_fraction_of(st.stages, t.makespan);

  const std::vector<std::int32_t> path = critical_path(g, t);
  double compute_s = 0, optimizer_s = 0, sm_shared_s = 0;
  std::vector<bool> stages_on_path(g.stages(), false);
  for (std::size_t i = 0; i < path.size(); ++i) {
    const Op& op = g.op(path[i]);
    // An op contributes the time until the next op on the path starts (all of it if last).
    const TimeNs until = i + 1 < path.size() ? t.start[path[i + 1]] : t.end(g, path[i]);
    const double contribution = ns_to_s(std::max<TimeNs>(0, until - t.start[path[i]]));
    if (name_path) st.critical_path.push_back({op_label(op), op.stage, ns_to_s(t.start[path[i]]), contribution});
    stages_on_path[op.stage] = true;
    switch (op.kind) {
      case OpKind::kForward:
      case OpKind::kBackward:
      case OpKind::kWeightGrad: {
        const ChunkCost& cc = chunks[op.stage][op.local_chunk];
        const PassCost& pass = op.kind == OpKind::kForward    ? cc.forward
                               : op.kind == OpKind::kBackward ? cc.backward
                                                              : cc.weight;
        // The op may be longer than its pass cost: DP collectives beside it held SMs too.
        const double op_s = ns_to_s(op.duration);
        const double share = op_s > 0 ? contribution / op_s : 0.0;
        st.exposed.tp_s += pass.tp_comm_exposed_s * share;
        st.exposed.cp_s += pass.cp_comm_exposed_s * share;
        st.exposed.ep_s += pass.ep_comm_exposed_s * share;
        st.exposed.dp_s += pass.dp_comm_exposed_s * share;
        compute_s +=
            contribution -
            (pass.tp_comm_exposed_s + pass.cp_comm_exposed_s + pass.ep_comm_exposed_s + pass.dp_comm_exposed_s) * share;
        // (The op's duration is the pass's seconds rounded to the nanosecond: only a longer one counts.)
        const TimeNs longer = op.duration - s_to_ns(pass.seconds);
        sm_shared_s += (pass.sm_shared_s + (longer > 0 ? ns_to_s(longer) : 0.0)) * share;
        break;
      }
      case OpKind::kPipeSend: st.exposed.pp_s += contribution; break;
      case OpKind::kDataParallel: st.exposed.dp_s += contribution; break;
      case OpKind::kOptimizer: optimizer_s += contribution; break;
    }
  }
  const double step = ns_to_s(t.makespan);
  const auto pct = [&](double x) { return step > 0 ? 100.0 * x / step : 0.0; };
  const long crossed = std::count(stages_on_path.begin(), stages_on_path.end(), true);
  const std::string shared = sm_shared_s > 0
                                 ? fmt::format(" (incl. {:.0f}% lost to SMs held by collectives)", pct(sm_shared_s))
                                 : std::string();
  st.limited_by = fmt::format(
      "compute {:.0f}%{}, TP comm {:.0f}%,{}{} PP sends {:.0f}%, DP comm {:.0f}%, optimizer {:.0f}% of the step; "
      "the path crosses {} of {} stages{}",
      pct(compute_s), shared, pct(st.exposed.tp_s),
      st.exposed.cp_s > 0 ? fmt::format(" CP comm {:.0f}%,", pct(st.exposed.cp_s)) : std::string(),
      st.exposed.ep_s > 0 ? fmt::format(" EP all-to-all {:.0f}%,", pct(st.exposed.ep_s)) : std::string(),
      pct(st.exposed.pp_s), pct(st.exposed.dp_s), pct(optimizer_s), crossed, g.stages(),
      crossed > 1 ? " (pipeline fill and drain)" : "");
  return st;
}

}  // namespace loom::sim
