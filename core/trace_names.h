// Names of trace slices shared by the simulator's and the executor's Chrome/Perfetto traces, so a
// simulated and a measured step can be laid side by side.
//   F<chunk> mb<i>  forward of model chunk <chunk> (= pipeline stage, or vpp·stage index) on micro-batch i
//   B<chunk> mb<i>  backward (input and weight gradients together)
//   W<chunk> mb<i>  weight-gradient half of the backward (zero-bubble schedules only)
//   <collective> <group>  e.g. "all_reduce dp", "reduce_scatter tp", "all_gather dp", "send F3 mb7", "recv B2 mb1"
//   optimizer       the optimizer step
#pragma once

#include <string>

#include <fmt/format.h>

#include "core/names.h"

namespace loom::trace_names {

inline std::string forward(int chunk, long long micro_batch) { return fmt::format("F{} mb{}", chunk, micro_batch); }
inline std::string backward(int chunk, long long micro_batch) { return fmt::format("B{} mb{}", chunk, micro_batch); }
inline std::string weight_grad(int chunk, long long micro_batch) { return fmt::format("W{} mb{}", chunk, micro_batch); }
inline std::string collective(const char* kind, const char* group) { return fmt::format("{} {}", kind, group); }
inline std::string collective(Collective kind, const char* group) { return collective(to_string(kind), group); }
inline constexpr const char* kOptimizer = "optimizer";

}  // namespace loom::trace_names
