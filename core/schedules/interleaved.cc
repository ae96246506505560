// Interleaved 1F1B (Narayanan et al. 2021, §2.2.2; Megatron-LM's forward_backward_pipelining_
// with_interleaving): each stage holds v model chunks; micro-batches advance in groups of p
// through the chunks, shrinking the bubble v times at the cost of v times the p2p traffic.
#include <algorithm>

#include "core/schedule.h"

namespace loom {

namespace {

// Megatron's get_model_chunk_id: the k-th forward (or backward) of a stage touches this chunk.
int chunk_of(int k, int pp, int vpp, bool forward) {
  const int in_group = (k % (pp * vpp)) / pp;
  return forward ? in_group : vpp - 1 - in_group;
}

// ...and this micro-batch: groups of p micro-batches per chunk.
int micro_batch_of(int k, int pp, int vpp) { return (k / (pp * vpp)) * pp + k % pp; }

}  // namespace

std::vector<StageProgram> interleaved_schedule(int pp, int micro_batches, int vpp) {
  std::vector<StageProgram> programs(pp);
  const int total = micro_batches * vpp;
  for (int s = 0; s < pp; ++s) {
    auto& program = programs[s];
    program.reserve(2 * total);
    const int warmup = std::min((pp - s - 1) * 2 + (vpp - 1) * pp, total);
    auto forward = [&](int k) {
      program.push_back({Pass::kF, chunk_of(k, pp, vpp, true), micro_batch_of(k, pp, vpp)});
    };
    auto backward = [&](int k) {
      program.push_back({Pass::kB, chunk_of(k, pp, vpp, false), micro_batch_of(k, pp, vpp)});
    };
    for (int k = 0; k < warmup; ++k) forward(k);
    for (int k = 0; k < total - warmup; ++k) {
      forward(warmup + k);
      backward(k);
    }
    for (int k = total - warmup; k < total; ++k) backward(k);
  }
  return programs;
}

}  // namespace loom
