#include "exec/parallel/tensor_parallel.h"

#include "core/trace_names.h"

namespace loom::exec {

const float* TensorParallel::gather_rows(const Tensor& local, Tensor& scratch) {
  if (!sequence_parallel_ || size() == 1) return local.data();
  TraceScope scope(tracer_, trace_names::collective(Collective::kAllGather, "tp"), "comm", kCommLane);
  // A communication buffer, as Megatron-LM gathers into its persistent global memory buffer.
  scratch = backend_.empty(local.rows() * size(), local.cols(), MemoryCategory::kBuffers);
  tp_.all_gather(local.data(), scratch.data(), local.numel());
  return scratch.data();
}

Tensor TensorParallel::reduce_rows(Tensor partial, MemoryCategory category) {
  if (size() > 1 && sequence_parallel_) {
    TraceScope scope(tracer_, trace_names::collective(Collective::kReduceScatter, "tp"), "comm", kCommLane);
    Tensor out = backend_.empty(partial.rows() / size(), partial.cols(), category);
    tp_.reduce_scatter(partial.data(), out.data(), out.numel());
    return out;
  }
  if (size() > 1) {
    TraceScope scope(tracer_, trace_names::collective(Collective::kAllReduce, "tp"), "comm", kCommLane);
    tp_.all_reduce(partial.data(), partial.numel(), ReduceOp::kSum);
  }
  if (partial.category() == category) return partial;
  Tensor out = backend_.empty(partial.rows(), partial.cols(), category);
  backend_.copy(out.data(), partial.data(), partial.numel());
  return out;
}

void TensorParallel::all_reduce(float* data, std::int64_t n, ReduceOp op) {
  if (size() == 1) return;
  TraceScope scope(tracer_, trace_names::collective(Collective::kAllReduce, "tp"), "comm", kCommLane);
  tp_.all_reduce(data, n, op);
}

}  // namespace loom::exec
