// Pipeline schedules: for each stage, the order in which it runs the forward (F), backward (B)
// and, for zero-bubble, weight-gradient (W) passes of every micro-batch and model chunk. The simulator
// and the executor both run these programs. One file per schedule under core/schedules/; adding a
// schedule is adding a file and a case here.
#pragma once

#include <string>
#include <vector>

#include "core/parallel_config.h"
#include "core/result.h"

namespace loom {

enum class Pass : unsigned char { kF, kB, kW };

struct PipelineOp {
  Pass pass = Pass::kF;
  int chunk = 0;  // local model chunk on this stage, 0..vpp-1
  int micro_batch = 0;
  bool operator==(const PipelineOp&) const = default;
};

using StageProgram = std::vector<PipelineOp>;

// Megatron's model-chunk placement: chunk c of stage s is virtual stage c·pp + s.
inline int virtual_stage(int chunk, int stage, int pp) { return chunk * pp + stage; }

std::vector<StageProgram> gpipe_schedule(int pp, int micro_batches);
std::vector<StageProgram> one_f_one_b_schedule(int pp, int micro_batches);
std::vector<StageProgram> interleaved_schedule(int pp, int micro_batches, int vpp);
std::vector<StageProgram> zero_bubble_h1_schedule(int pp, int micro_batches);

// Dispatch on the config's schedule; fails on combinations a schedule cannot run.
Result<std::vector<StageProgram>> make_schedule(Schedule schedule, int pp, int micro_batches, int vpp);

// "F0.0 F0.1 B0.0 ..." (pass, chunk, micro-batch), for tests and debugging.
std::string format_program(const StageProgram& program);

}  // namespace loom
