// StepBuilder: one training step of one pipeline as a StepGraph — the compute passes of each
// stage in schedule order (with ZeRO-3's parameter gathers), the pipeline sends between stages,
// the data-parallel reductions and ZeRO gathers, and the optimizer. sim/simulator runs the result.
#pragma once

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/schedule.h"
#include "core/training_spec.h"
#include "sim/cost_model.h"
#include "sim/step_graph.h"

namespace loom::sim {

// The data-parallel reduction of one local chunk's gradients as the step issues it after the chunk's
// last gradient-producing pass: `count` buckets of `seconds` each, `bytes` per bucket.
struct GradientBuckets {
  Collective reduce = Collective::kAllReduce;  // ZeRO-0 all-reduces, ZeRO-1/2/3 reduce-scatter
  int count = 1;
  double seconds = 0;
  double bytes = 0;
};
GradientBuckets gradient_buckets(const CostModel& cost, const TrainingSpec& training, const ParallelConfig& config,
                                 int stage, int chunk);
// The optimizer op of `stage`: its shard's Adam step and, under FP8, the weights' cast.
double optimizer_op_s(const CostModel& cost, const ParallelConfig& config, int stage);
// ZeRO-1/2: the all-gather of `stage`'s updated parameter shards after its optimizer (0 without one).
double param_all_gather_s(const CostModel& cost, const TrainingSpec& training, const ParallelConfig& config, int stage);

class StepBuilder {
 public:
  // `graph` is emptied (keeping its storage) and filled by build().
  StepBuilder(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& config, const CostModel& cost,
              const std::vector<StageProgram>& programs, long long micro_batches, StepGraph& graph);

  // `chunks[stage][local chunk]`: the cost of each pass of that chunk for one micro-batch.
  void build(const std::vector<std::vector<ChunkCost>>& chunks);
  StepGraph& graph() { return graph_; }

 private:
  // What the compute loop of one stage carries from one pass to the next (ZeRO-3 gathers).
  struct ComputeCursor {
    std::int32_t previous_compute = -1, previous_gather = -1, pending_reduce = -1;
    int pending_reduce_chunk = 0;
  };

  int virtual_stages() const { return c_.pp * c_.vpp; }
  std::size_t index(int vs, long long mb) const { return static_cast<std::size_t>(vs) * m_ + mb; }
  std::size_t slot_of(int stage, const PipelineOp& p) const;
  std::int32_t add(const Op& op) { return graph_.add(op); }
  // Whether this pass leaves a micro-batch's weight gradients complete.
  bool produces_grads(const PipelineOp& p) const;
  // The graph's op for pass `p` of `stage` (added by add_compute).
  std::int32_t pass_op(int stage, const PipelineOp& p) const;

  void add_compute(const std::vector<std::vector<ChunkCost>>& chunks);
  void add_stage_compute(int stage, const std::vector<ChunkCost>& chunks);
  Op make_pass(int stage, const PipelineOp& p, const ChunkCost& cost) const;
  // ZeRO-3: the gather of the parameters `pass` needs, issued after the previous pass.
  std::int32_t add_gather(const Op& pass, int local_chunk, ComputeCursor& cursor);
  void record_pass(int stage, const PipelineOp& p, std::int32_t id);

  void add_pipeline_sends();
  void add_stage_sends(int stage, TimeNs to_next, TimeNs to_previous);
  std::int32_t add_send(int stage, const PipelineOp& p, SendDirection direction, TimeNs duration);
  // A pass waits for what its neighbour sent it; a backward for its own forward, W for its B.
  void link_passes_across_stages();

  void add_data_parallel();
  // An op on `stage`'s data-parallel channel, after `after` has progressed `fraction`.
  std::int32_t add_dp_op(int stage, double seconds, Collective kind, std::int32_t after, float fraction);
  // The gradient reduction of every chunk of `stage`: bucketed after its last gradient, and
  // (ZeRO-2) a reduce-scatter after each earlier micro-batch's.
  void add_gradient_reduction(int stage);
  void add_zero2_reduce_scatters(int stage, int chunk);
  // Tied embeddings over a pipeline: the first stage's word embedding and the last stage's copy
  // all-reduce their gradients.
  void add_tied_embedding_reduction(int stage);
  void add_optimizer(int stage);
  // ZeRO-2/3: reduce-scatter of one micro-batch's gradients of a chunk after `producer` ends.
  void add_reduce_scatter(int stage, int chunk, std::int32_t producer);
  // ZeRO-3: CostModel::zero3_collective_s for a chunk, computed once per step (every pass of a
  // chunk gathers, and every micro-batch reduce-scatters, the same units).
  double zero3_s(Collective c, int stage, int chunk);

  const ModelSpec& model_;
  const TrainingSpec& training_;
  const ParallelConfig& c_;
  const CostModel& cost_;
  const std::vector<StageProgram>& programs_;
  long long m_;
  StepGraph& graph_;
  std::vector<std::int32_t> forward_, backward_, weight_;  // [virtual stage · m + mb]
  std::vector<std::int32_t> send_forward_, send_backward_;
  std::vector<std::int32_t> last_send_;  // per stage: its last pipeline send
  // Per stage and local chunk: the op after which that chunk's gradients are final.
  std::vector<std::vector<std::int32_t>> last_grad_op_;
  std::int32_t last_dp_ = -1;  // the last op on the data-parallel channel of the stage being built
  std::map<std::tuple<Collective, int, int>, double> zero3_s_;  // (collective, stage, chunk) → seconds
};

}  // namespace loom::sim
