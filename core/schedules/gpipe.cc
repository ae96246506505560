// GPipe (Huang et al. 2019): every stage runs all forwards, then all backwards. Simple and
// deadlock-free; keeps all m micro-batches' activations alive.
#include "core/schedule.h"

namespace loom {

std::vector<StageProgram> gpipe_schedule(int pp, int micro_batches) {
  std::vector<StageProgram> programs(pp);
  for (auto& program : programs) {
    program.reserve(2 * micro_batches);
    for (int i = 0; i < micro_batches; ++i) program.push_back({Pass::kF, 0, i});
    for (int i = 0; i < micro_batches; ++i) program.push_back({Pass::kB, 0, i});
  }
  return programs;
}

}  // namespace loom
