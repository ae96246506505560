// Chrome / Perfetto trace of a simulated step (the JSON "traceEvents" format that
// ui.perfetto.dev and chrome://tracing open): one process per pipeline stage, one thread per
// stream, X slices named like the executor's ("F3 mb7", "B3 mb7"), the kernels of each pass
// nested under it, TP collectives on their own thread, flow arrows from each send to the pass
// that receives it, and a counter track of memory in use. Byte-identical for the same input.
#pragma once

#include <string>

#include "sim/simulator.h"

namespace loom::sim {

// Needs a result simulated with SimOptions{record_segments = true, keep_graph = true}.
std::string chrome_trace_json(const SimResult& result, const std::string& title);

}  // namespace loom::sim
