// ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism"): the backward is split into B
// (gradient w.r.t. the input, on the critical path) and W (gradient w.r.t. the weights, free to
// move). Stage s follows 1F1B with B in place of the full backward and keeps up to s W passes
// pending, running the oldest after each B: later stages send their input gradients upstream
// sooner and fill the cool-down with weight gradients. Every stage then holds at most p
// micro-batches in flight — the first stage's 1F1B peak, so the peak memory stays 1F1B's — and
// with F = B = W the bubble is (p − 1)·F instead of 1F1B's (p − 1)(F + B + W).
#include <algorithm>
#include <deque>

#include "core/schedule.h"

namespace loom {

std::vector<StageProgram> zero_bubble_h1_schedule(int pp, int micro_batches) {
  std::vector<StageProgram> programs(pp);
  for (int s = 0; s < pp; ++s) {
    auto& program = programs[s];
    program.reserve(3 * micro_batches);
    const int warmup = std::min(pp - s - 1, micro_batches);
    std::deque<int> pending_w;
    auto backward = [&](int i, std::size_t keep) {
      program.push_back({Pass::kB, 0, i});
      pending_w.push_back(i);
      if (pending_w.size() > keep) {
        program.push_back({Pass::kW, 0, pending_w.front()});
        pending_w.pop_front();
      }
    };
    for (int i = 0; i < warmup; ++i) program.push_back({Pass::kF, 0, i});
    for (int i = 0; i < micro_batches - warmup; ++i) {
      program.push_back({Pass::kF, 0, warmup + i});
      backward(i, static_cast<std::size_t>(s));
    }
    for (int i = micro_batches - warmup; i < micro_batches; ++i) backward(i, 0);
    for (int i : pending_w) program.push_back({Pass::kW, 0, i});
  }
  return programs;
}

}  // namespace loom
