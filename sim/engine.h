// The discrete-event engine: runs a StepGraph on its streams in integer nanoseconds. Each stream
// serves its ops in the order they were added (as a CUDA stream does); an op starts when its
// stream is free and every dependency has progressed far enough. Same graph, same timeline.
#pragma once

#include <vector>

#include "core/result.h"
#include "sim/step_graph.h"

namespace loom::sim {

struct Timeline {
  std::vector<TimeNs> start;          // per op
  std::vector<std::int32_t> binding;  // per op: the op whose progress set its start (-1: none)
  TimeNs makespan = 0;
  TimeNs end(const StepGraph& g, std::int32_t op) const { return start[op] + g.op(op).duration; }
};

// Fails (with the first op that could never start) if the graph deadlocks. With `previous`, a
// timeline of this graph before durations changed, ops that started before `unchanged_before`
// (the earliest start of a changed op) keep their start and only the rest are run again.
Result<Timeline> run_engine(const StepGraph& graph, const Timeline* previous = nullptr, TimeNs unchanged_before = 0);

// Ops on the critical path, first to last: the chain of dependencies and stream waits that sets
// the makespan, followed back from the op that ends last.
std::vector<std::int32_t> critical_path(const StepGraph& graph, const Timeline& timeline);

}  // namespace loom::sim
