// Test helper: the step graph of a bare pipeline (given F/B/W durations per pass, free
// communication), so schedules and the engine can be checked against closed forms.
#pragma once

#include <vector>

#include "core/schedule.h"
#include "sim/step_graph.h"

namespace loom::sim::testing {

inline StepGraph pipeline_graph(const std::vector<StageProgram>& programs, int pp, int vpp, int m, TimeNs f, TimeNs b,
                                TimeNs w = 0) {
  StepGraph g(pp);
  const int vstages = pp * vpp;
  std::vector<std::int32_t> fwd(vstages * m, -1), bwd(vstages * m, -1), wgt(vstages * m, -1);
  for (int s = 0; s < pp; ++s) {
    for (const auto& p : programs[s]) {
      Op op;
      op.stream = StepGraph::stream_of(s, StreamKind::kCompute);
      op.stage = static_cast<std::int16_t>(s);
      op.chunk = static_cast<std::int16_t>(virtual_stage(p.chunk, s, pp));
      op.micro_batch = p.micro_batch;
      op.kind = p.pass == Pass::kF ? OpKind::kForward : p.pass == Pass::kB ? OpKind::kBackward : OpKind::kWeightGrad;
      op.duration = p.pass == Pass::kF ? f : p.pass == Pass::kB ? b : w;
      const std::int32_t id = g.add(op);
      auto& table = p.pass == Pass::kF ? fwd : p.pass == Pass::kB ? bwd : wgt;
      table[op.chunk * m + p.micro_batch] = id;
    }
  }
  for (int vs = 0; vs < vstages; ++vs) {
    for (int mb = 0; mb < m; ++mb) {
      if (vs > 0) g.depend(fwd[vs * m + mb], fwd[(vs - 1) * m + mb]);
      if (vs < vstages - 1)
        g.depend(bwd[vs * m + mb], bwd[(vs + 1) * m + mb]);
      else
        g.depend(bwd[vs * m + mb], fwd[vs * m + mb]);
      if (wgt[vs * m + mb] >= 0) g.depend(wgt[vs * m + mb], bwd[vs * m + mb]);
    }
  }
  return g;
}

}  // namespace loom::sim::testing
