#include "core/schedule.h"

#include <fmt/format.h>

namespace loom {

Result<std::vector<StageProgram>> make_schedule(Schedule schedule, int pp, int micro_batches, int vpp) {
  if (pp < 1 || micro_batches < 1 || vpp < 1)
    return make_error(
        fmt::format("schedule needs pp, micro-batches and vpp >= 1 (got {}, {}, {})", pp, micro_batches, vpp));
  if (schedule != Schedule::kInterleaved && vpp != 1)
    return make_error(fmt::format("vpp {} needs the interleaved schedule", vpp));
  switch (schedule) {
    case Schedule::kGPipe: return gpipe_schedule(pp, micro_batches);
    case Schedule::k1F1B: return one_f_one_b_schedule(pp, micro_batches);
    case Schedule::kZeroBubble: return zero_bubble_h1_schedule(pp, micro_batches);
    case Schedule::kInterleaved:
      if (micro_batches % pp != 0)
        return make_error(
            fmt::format("interleaved schedule needs micro-batches ({}) divisible by pp ({})", micro_batches, pp));
      return interleaved_schedule(pp, micro_batches, vpp);
  }
  return make_internal_error("make_schedule: a Schedule value with no generator");
}

std::string format_program(const StageProgram& program) {
  std::string out;
  for (const auto& op : program) {
    if (!out.empty()) out += ' ';
    const char pass = op.pass == Pass::kF ? 'F' : op.pass == Pass::kB ? 'B' : 'W';
    out += fmt::format("{}{}.{}", pass, op.chunk, op.micro_batch);
  }
  return out;
}

}  // namespace loom
