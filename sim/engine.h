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
  std::vector<std::int32_t> order;    // ops in the order the engine started them (topological)
  TimeNs makespan = 0;
  TimeNs end(const StepGraph& g, std::int32_t op) const { return start[op] + g.op(op).duration; }
};

// Fails (with the first op that could never start) if the graph deadlocks.
Result<Timeline> run_engine(const StepGraph& graph);

// `timeline` was run on this graph before the ops in `lengthened` got longer: updates it in place
// to what run_engine would now give, touching only the ops started after the first of them.
// Every stream keeps its order, and start times only grow: an op starts at the later of its old
// start and the new progress of whatever moved among what it waits for.
void run_engine_again(const StepGraph& graph, Timeline& timeline, const std::vector<std::int32_t>& lengthened);

// Ops on the critical path, first to last: the chain of dependencies and stream waits that sets
// the makespan, followed back from the op that ends last.
std::vector<std::int32_t> critical_path(const StepGraph& graph, const Timeline& timeline);

}  // namespace loom::sim
