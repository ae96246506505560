#include "sim/step_bound.h"

#include <algorithm>
#include <vector>

#include "core/pipeline_split.h"
#include "core/units.h"
#include "sim/jitter.h"
#include "sim/step_builder.h"

namespace loom::sim {

StepBound::StepBound(const ModelSpec& model, const TrainingSpec& training, const ClusterSpec& cluster,
                     const CollectiveModel& collectives)
    : model_(model), training_(training), cluster_(cluster), collectives_(collectives) {}

ChunkCost StepBound::chunk(const CostModel& cost, const ParallelConfig& c, int stage, int chunk) const {
  const bool split = c.schedule == Schedule::kZeroBubble;
  const Key key{c.tp,
                c.cp,
                static_cast<int>(c.cp_comm),
                c.micro_batch,
                c.sequence_parallel,
                static_cast<int>(c.recompute),
                c.ep,
                c.etp,
                chunk_layers(model_.layers, c, stage, chunk),
                stage == 0 && chunk == 0,
                stage == c.pp - 1 && chunk == c.vpp - 1,
                split,
                zero3_gathers_every_pass(c, training_) ? c.zero_shards() : 0};
  if (auto it = chunks_.find(key); it != chunks_.end()) return it->second;
  return chunks_.emplace(key, cost.chunk(stage, chunk, split)).first->second;
}

double StepBound::lower_bound_s(const ParallelConfig& c) const {
  const long long m = c.micro_batches(training_.global_batch);
  if (m <= 0 || c.pp <= 0 || c.vpp <= 0) return 0.0;
  CostModel cost(model_, training_, c, cluster_, collectives_);
  cost.set_record_segments(false);
  std::vector<std::vector<ChunkCost>> chunks(c.pp);
  for (int s = 0; s < c.pp; ++s) {
    chunks[s].reserve(c.vpp);
    for (int k = 0; k < c.vpp; ++k) {
      // Middle chunks of equal layers are the same chunk: look up once.
      const bool edge = (s == 0 && k == 0) || (s == c.pp - 1 && k == c.vpp - 1);
      const bool same = !edge && !chunks[s].empty() && !(s == 0 && k == 1) &&
                        chunk_layers(model_.layers, c, s, k) == chunk_layers(model_.layers, c, s, k - 1);
      chunks[s].push_back(same ? chunks[s].back() : chunk(cost, c, s, k));
    }
  }
  // Durations in the engine's integer nanoseconds, each op rounded as StepBuilder rounds it.
  auto ns = [](double seconds) { return s_to_ns(seconds); };
  const bool zero_bubble = c.schedule == Schedule::kZeroBubble;
  // Stage 0 after the backward of the last micro-batch through its first chunk: that chunk's weight
  // gradients (zero-bubble), their last bucket's reduction, the optimizer, ZeRO-1/2's gather.
  TimeNs tail0 =
      ns(chunks[0][0].weight.seconds) + ns(optimizer_op_s(cost, c, 0)) + ns(param_all_gather_s(cost, training_, c, 0));
  if (c.grad_ranks() > 1) tail0 += ns(gradient_buckets(cost, training_, c, 0, 0).seconds);

  TimeNs bound = 0;
  TimeNs head = 0;  // stage s's first pass starts no earlier: micro-batch 0's forward through stages < s
  TimeNs back = 0;  // from the end of stage s's last backward of chunk 0 to the end of stage 0's
  for (int s = 0; s < c.pp; ++s) {
    TimeNs passes = 0, forward_backward = 0;
    for (const ChunkCost& k : chunks[s]) {
      const TimeNs f = ns(k.forward.seconds), b = ns(k.backward.seconds), w = ns(k.weight.seconds);
      passes += m * (f + b + w);
      forward_backward += m * (f + b);
    }
    // Every pass in stream order, then the optimizer and ZeRO-1/2's gather.
    const TimeNs own = head + passes + ns(optimizer_op_s(cost, c, s)) + ns(param_all_gather_s(cost, training_, c, s));
    // The backward of the last micro-batch through chunk 0 ends the stage's passes, but for zero-bubble's
    // weight-gradient passes after it (every schedule: tests/core/schedule_test.cc); then it runs back to
    // stage 0.
    const TimeNs chain = head + (zero_bubble ? forward_backward : passes) + back + tail0;
    bound = std::max({bound, own, chain});
    if (s + 1 < c.pp) {
      head += ns(chunks[s][0].forward.seconds) + ns(cost.pipe_send_s(s, s + 1));
      back += ns(cost.pipe_send_s(s + 1, s)) + ns(chunks[s][0].backward.seconds);
    }
  }
  return ns_to_s(bound) + straggler_s(chunks, c, m, training_);
}

}  // namespace loom::sim
