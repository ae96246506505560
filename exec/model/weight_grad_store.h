// Zero-bubble's split backward (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", and the
// WeightGradStore of that paper's Megatron-LM code): the B pass computes every input gradient and puts
// each linear layer's weight-gradient GEMM, with the tensors it reads, in the store; the micro-batch's
// W pass runs them later, in the order they were put. A unit's gradients-ready hook (the DP bucket's
// launch, ZeRO's reduce-scatter) moves with them: it runs after the last weight gradient of its unit.
// What stays in B, as the simulator charges it: bias, norm and embedding gradients.
//
// Not deferring (every schedule but zero-bubble), a piece of work runs where it is put and a hook where
// it is announced, so the layers have one backward for every schedule.
//
// Memory: what a W pass reads is charged to activations (saved tensors, as autograd's are) once the
// layer that kept it has finished its backward (settle); until then it keeps the category it was made
// in (workspace, buffers), as every schedule's backward charges it. planner/memory_model.cc counts the
// same bytes (zero_bubble_kept_bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "exec/tensor.h"
#include "exec/trace.h"

namespace loom::exec {

class Backend;
class ParameterSource;

class WeightGradStore {
 public:
  // Accumulates a weight gradient into `grads` (fp32 main grads, inside its unit's gradients).
  using Work = std::function<void(float* grads)>;

  WeightGradStore(ParameterSource& params, Backend& backend, bool deferred, Tracer* tracer)
      : params_(params), backend_(backend), deferred_(deferred), tracer_(tracer) {}

  // A unit whose `elements` gradients start at `grads` now: a put() into them belongs to it. Under ZeRO 2
  // and 3 a unit's gradients are a bucket that its hook frees, so a deferred put keeps its offset inside
  // the unit and asks for the unit's gradients again when it runs.
  void set_unit(int unit, float* grads, std::int64_t elements);
  // `name`: the op slice the work runs in when deferred (the simulator's name for it). Not deferring,
  // it runs at once, in the caller's slice.
  void put(const char* name, float* grads, Work work);
  // The unit's gradients of this micro-batch are complete once what was put for it so far has run.
  void ready(int unit);
  // Deferring: holds what the deferred work reads until the micro-batch's W pass. Otherwise frees it.
  void keep(Tensor&& tensor);
  // A layer's backward is complete: what it kept is charged to activations from now on.
  void settle();
  // Ends the B pass of `micro_batch`: what was put and kept since is its W pass.
  void close(int micro_batch);
  // The W pass of `micro_batch`: runs its work and hooks in order, then frees what they read.
  void run(int micro_batch);
  // Micro-batches whose W pass has not run (0 at the end of every step: the pipeline runner checks).
  std::size_t pending() const { return pending_.size(); }

 private:
  struct Item {
    const char* name = nullptr;  // null: unit's gradients-ready hook
    int unit = 0;
    std::ptrdiff_t offset = 0;
    Work work;
  };
  struct Pass {
    std::vector<Item> items;
    std::vector<Tensor> kept;
  };

  ParameterSource& params_;
  Backend& backend_;
  bool deferred_;
  Tracer* tracer_;
  struct UnitGrads {
    int unit = 0;
    float* grads = nullptr;
    std::int64_t elements = 0;
  };
  std::vector<UnitGrads> units_;  // of the B pass running
  std::vector<Item> items_;
  std::vector<Tensor> unsettled_, kept_;
  std::map<int, Pass> pending_;
};

}  // namespace loom::exec
