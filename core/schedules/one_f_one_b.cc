// 1F1B (PipeDream-Flush, Narayanan et al. 2021; Megatron-LM's default): stage s runs
// p − s − 1 warm-up forwards, then alternates one forward and one backward, then drains the
// remaining backwards. Same bubble as GPipe, but at most p − s micro-batches in flight.
#include <algorithm>

#include "core/schedule.h"

namespace loom {

std::vector<StageProgram> one_f_one_b_schedule(int pp, int micro_batches) {
  std::vector<StageProgram> programs(pp);
  for (int s = 0; s < pp; ++s) {
    auto& program = programs[s];
    program.reserve(2 * micro_batches);
    const int warmup = std::min(pp - s - 1, micro_batches);
    for (int i = 0; i < warmup; ++i) program.push_back({Pass::kF, 0, i});
    for (int i = 0; i < micro_batches - warmup; ++i) {
      program.push_back({Pass::kF, 0, warmup + i});
      program.push_back({Pass::kB, 0, i});
    }
    for (int i = micro_batches - warmup; i < micro_batches; ++i) program.push_back({Pass::kB, 0, i});
  }
  return programs;
}

}  // namespace loom
