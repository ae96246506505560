#include "exec/parallel/tensor_parallel.h"

#include "core/trace_names.h"

namespace loom::exec {

ConstTensorRef TensorParallel::gather_rows(const Tensor& local, Tensor& scratch) {
  if (!sequence_parallel_ || size() == 1) return local.ref();
  TraceScope scope(tracer_, trace_names::collective(Collective::kAllGather, "tp"), "comm", kCommLane);
  // A communication buffer, as Megatron-LM gathers into its persistent global memory buffer.
  scratch = backend_.empty(local.rows() * size(), local.cols(), MemoryCategory::kBuffers, local.dtype());
  tp_.all_gather(local.ref(), scratch.ref(), local.numel());
  return scratch.ref();
}

Tensor TensorParallel::reduce_rows(Tensor partial, MemoryCategory category) {
  if (size() > 1 && sequence_parallel_) {
    TraceScope scope(tracer_, trace_names::collective(Collective::kReduceScatter, "tp"), "comm", kCommLane);
    Tensor out = backend_.empty(partial.rows() / size(), partial.cols(), category, partial.dtype());
    tp_.reduce_scatter(partial.ref(), out.ref(), out.numel());
    return out;
  }
  if (size() > 1) {
    TraceScope scope(tracer_, trace_names::collective(Collective::kAllReduce, "tp"), "comm", kCommLane);
    tp_.all_reduce(partial.ref(), partial.numel(), ReduceOp::kSum);
  }
  if (partial.category() == category) return partial;
  Tensor out = backend_.empty(partial.rows(), partial.cols(), category, partial.dtype());
  backend_.copy(out.ref(), partial.ref(), partial.numel());
  return out;
}

void TensorParallel::all_reduce(float* data, std::int64_t n, ReduceOp op) {
  if (size() == 1) return;
  TraceScope scope(tracer_, trace_names::collective(Collective::kAllReduce, "tp"), "comm", kCommLane);
  tp_.all_reduce(data, n, op);
}

}  // namespace loom::exec
