// Tensor parallelism (Megatron-LM, Shoeybi et al. 2019; sequence parallelism, Korthikanti et al.
// 2022): the two collectives around column- and row-parallel linear layers. Without sequence
// parallelism the input of a column-parallel layer is replicated and the output of a row-parallel
// layer is all-reduced; with it, token rows are split across TP ranks, all-gathered before a
// column-parallel layer and reduce-scattered after a row-parallel one.
#pragma once

#include "exec/backend.h"
#include "exec/communicator.h"
#include "exec/trace.h"

namespace loom::exec {

class TensorParallel {
 public:
  TensorParallel(Communicator& tp, Backend& backend, bool sequence_parallel, Tracer* tracer)
      : tp_(tp), backend_(backend), sequence_parallel_(sequence_parallel), tracer_(tracer) {}
  int size() const { return tp_.size(); }
  int rank() const { return tp_.rank(); }
  bool sequence_parallel() const { return sequence_parallel_; }
  Communicator& comm() { return tp_; }
  // Token rows this rank holds between the parallel regions, of `tokens` in the micro-batch.
  std::int64_t local_tokens(std::int64_t tokens) const { return sequence_parallel_ ? tokens / size() : tokens; }
  std::int64_t first_local_token(std::int64_t tokens) const {
    return sequence_parallel_ ? rank() * (tokens / size()) : 0;
  }

  // Input of a column-parallel layer, all rows: `local` itself, or the all-gather of every rank's
  // rows into `scratch` (a buffer of the same dtype) under sequence parallelism.
  ConstTensorRef gather_rows(const Tensor& local, Tensor& scratch);
  // Output of a row-parallel layer (partial sums over the full rows) → the summed local rows,
  // returned in a tensor of `category` (of the partial sums' dtype). Also the backward of a column-parallel layer's
  // input.
  Tensor reduce_rows(Tensor partial, MemoryCategory category);
  // Sum of a [rows] vector over TP ranks (vocabulary-parallel cross-entropy statistics).
  void all_reduce(float* data, std::int64_t n, ReduceOp op);

 private:
  Communicator& tp_;
  Backend& backend_;
  bool sequence_parallel_;
  Tracer* tracer_;
};

}  // namespace loom::exec
