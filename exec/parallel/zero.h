// Parameters, gradients and AdamW states of one stage under ZeRO (Rajbhandari et al. 2020):
// stage 0 replicates everything over DP; 1 shards the optimizer states; 2 also shards gradients
// (each unit's gradient is reduce-scattered per micro-batch from a transient bucket); 3 also shards
// parameters, all-gathering one unit for its forward or backward and freeing it afterwards, while
// the next unit's gather is already in flight (DeepSpeed's prefetch): two gathered units at a time.
// Every unit is sharded separately (padded to a multiple of the DP size), so shards line up. Routed
// experts under expert parallelism shard, and reduce, over the expert-data-parallel group instead.
// Under mixed precision (backend compute dtype not fp32) parameters are held in the compute dtype,
// gradients stay fp32 (main grads), and the optimizer holds fp32 master weights sharded exactly as
// the moments: Megatron's 2 + 4 + 12 bytes per parameter. AdamW updates the master and writes the
// compute-dtype copy into the parameters in the same op.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/parallel_config.h"
#include "exec/backend.h"
#include "exec/model/gpt_layout.h"
#include "exec/model/gpt_stage.h"
#include "exec/optimizer.h"
#include "exec/parallel/data_parallel.h"
#include "exec/process_groups.h"

namespace loom::exec {

class ParameterStore final : public ParameterSource {
 public:
  ParameterStore(const StageLayout& layout, ProcessGroups& groups, Backend& backend, Tracer* tracer);

  void initialize(std::uint64_t seed);
  // Zeroes the gradients; `micro_batches` tells which micro-batch is the last of the step.
  void begin_step(int micro_batches);
  void begin_micro_batch(int index) { last_micro_batch_ = index == micro_batches_ - 1; }

  TensorRef acquire(int unit) override;
  void release(int unit) override;
  void prefetch(int unit) override;
  float* gradients(int unit) override;
  void gradients_ready(int unit) override;

  // Completes the DP reduction and sums the tied embedding over the first and last stage.
  void finish_gradients();
  // Sum of squared gradients this rank owns (each value counted once over the world).
  double owned_grad_squares();
  void optimizer_step(const OptimizerSettings& s, float lr, float grad_scale, int step);
  // This rank's owned gradient values of each parameter (what optimizer_step updates), in layout
  // order (unit, then slot), as backend pointers: where a non-finite gradient is looked for.
  struct GradientSpan {
    int unit = 0, slot = 0;
    float* values = nullptr;
    std::int64_t count = 0;
  };
  std::vector<GradientSpan> owned_gradients();

  // Flat state for checkpoints: parameters (or this rank's shard), then the two Adam moments (the
  // parameters are read and written through checkpoint_parameters / load_parameters).
  std::vector<Tensor*> state() { return {&params_, &adam_m_, &adam_v_}; }
  // Parameters and Adam moments as full (unsharded) tensors by parameter name, flattened row-major
  // with each parameter's full column count: what a checkpoint of any layout can be turned into.
  using FullTensors = std::map<std::string, std::vector<float>>;
  // Takes this rank's share of every parameter and moment from full tensors (a checkpoint saved
  // under another layout). Values a full tensor lacks (vocabulary padding) stay zero.
  void import_full(const FullTensors& params, const FullTensors& m, const FullTensors& v);

  // The parameters as a checkpoint holds them: fp32, in the parameters' layout (full, or the ZeRO-3
  // shard), taken from the fp32 master under mixed precision (all-gathered over DP under ZeRO 1/2, a
  // collective: every rank calls it). load_parameters sets the parameters (rounded to the compute dtype)
  // and the master (its owned values, exact) from such an array.
  std::vector<float> checkpoint_parameters();
  void load_parameters(const std::vector<float>& host);

  // Full local parameters of a unit copied to the host (gathered under ZeRO-3), for tests.
  std::vector<float> unit_values(int unit);
  // The unit's accumulated gradient (ZeRO 0-1, where every rank holds all of it), for tests.
  std::vector<float> unit_gradients(int unit);

 private:
  struct Range {
    std::int64_t begin = 0, end = 0;
  };
  // Routed experts under expert parallelism are held by the expert-data-parallel group only: their
  // shards, this rank's among them and the group that reduces and gathers them are that group's.
  bool expert_sharded(const Unit& u) const;
  int shards_of(const Unit& u) const;
  int rank_in(const Unit& u) const;
  Communicator& comm_of(const Unit& u);
  std::int64_t shard(const Unit& u) const { return u.padded / shards_of(u); }
  Range owned(int unit) const;  // the unit's values this rank updates (ZeRO ≥ 1: its shard)
  float* grad_at(int unit, std::int64_t index);
  TensorRef param_at(int unit, std::int64_t index);
  float* moment_at(Tensor& moment, int unit, std::int64_t index);
  void reduce_tp_partial(int unit, float* grads);
  // ZeRO 2/3: the unit's bucket reduce-scattered into this rank's gradient shard, then freed.
  void reduce_scatter_bucket(int unit);

  const StageLayout& layout_;
  ProcessGroups& groups_;
  Backend& backend_;
  Tracer* tracer_;
  int zero_, dp_;
  std::vector<std::int64_t> offset_, shard_offset_;
  DType compute_;                            // the parameters' dtype (the backend's compute dtype)
  Tensor params_, grads_, adam_m_, adam_v_;  // params_/grads_ are full (ZeRO 0-2) or shards
  Tensor master_;                            // fp32 master weights, only when compute_ is not fp32
  std::vector<Tensor> gathered_, grad_bucket_;
  std::vector<int> gather_count_;
  std::vector<std::unique_ptr<Request>> prefetching_;  // ZeRO-3 gathers in flight, per unit
  std::vector<double> prefetch_start_us_;
  GradientBuckets buckets_;
  std::unique_ptr<GradientBuckets> expert_buckets_;  // ep > 1: the routed experts' (expert_dp group)
  int micro_batches_ = 1;
  bool last_micro_batch_ = true;
};

}  // namespace loom::exec
