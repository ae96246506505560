// Context parallelism as Megatron-core runs it: every sequence is cut into 2·cp chunks and CP rank r
// keeps chunks r and 2·cp−1−r (causal load balance: each rank gets as many visible query-key pairs).
// With cp_comm_type p2p attention is a ring (TransformerEngine's AttnFuncWithCPAndKVP2P): the local
// keys and values travel around the CP group, each rank merging one block per step into its queries'
// output by the log-sum-exp rule; in the backward the keys' and values' gradients travel with them and
// arrive back at their owner after cp steps. all_gather and a2a (Ulysses) run the same block ops on
// gathered or head-sharded tensors. Everything outside attention is token-local.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/parallel_config.h"
#include "exec/backend.h"
#include "exec/communicator.h"
#include "exec/trace.h"

namespace loom::exec {

// Columns of a sequence-sharded tensor that go to CP rank p under a2a: [first + p·width, first + (p+1)·width).
struct ColumnSlice {
  std::int64_t first, width;
};

class ContextParallel {
 public:
  // `comm`: the CP group (null: one rank); `seq`: tokens of a whole sequence (divisible by 2·cp);
  // `kind`: how keys and values reach the other ranks (p2p: the ring; all_gather: all at once; a2a:
  // Ulysses' head sharding);
  // `tracer` (optional): the attention's steps and transfers as slices named like the simulator's.
  ContextParallel(Communicator* comm, Backend& backend, int seq, CpComm kind = CpComm::kP2P, Tracer* tracer = nullptr);

  int size() const { return comm_ != nullptr ? comm_->size() : 1; }
  int rank() const { return comm_ != nullptr ? comm_->rank() : 0; }
  int seq() const { return seq_; }
  int local_seq() const { return seq_ / size(); }
  // An attention shape's sequence fields for this rank (seq = local tokens per sequence, cp, cp_rank).
  AttentionShape shape(int batch, int heads, int kv_heads, int head_dim) const {
    return {batch, local_seq(), heads, kv_heads, head_dim, size(), rank()};
  }
  // Position in its sequence of local token t of a sequence.
  int position(int t) const { return shape(0, 0, 0, 0).position(t); }
  // Local rows [row0, row0 + rows) of a micro-batch whose first sequence is `first_sequence`, in runs
  // whose global tokens (sequence · seq + position) are consecutive: f(offset from row0, rows in the
  // run, the run's first global token). Dropout masks are keyed on global tokens.
  template <class F>
  void for_each_run(std::int64_t first_sequence, std::int64_t row0, std::int64_t rows, F&& f) const {
    const std::int64_t ls = local_seq(), run = size() == 1 ? rows : ls / 2;
    for (std::int64_t r = row0; r < row0 + rows;) {
      const std::int64_t t = r % ls, n = std::min(row0 + rows, r - t % run + run) - r;
      f(r - row0, n, (first_sequence + r / ls) * seq_ + position(static_cast<int>(t)));
      r += n;
    }
  }

  // Attention of this rank's queries over every rank's keys: ctx and lse [batch·heads·seq] fp32 out.
  void attention_forward(TensorRef ctx, float* lse, ConstTensorRef qkv, const AttentionShape& s,
                         const AttentionDropout& drop);
  // dqkv (written whole) from the output's gradient, the output and lse.
  void attention_backward(TensorRef dqkv, ConstTensorRef dctx, ConstTensorRef ctx, const float* lse, ConstTensorRef qkv,
                          const AttentionShape& s, const AttentionDropout& drop);

 private:
  // One rank (no context parallelism): the flash-style attention as one block.
  void local_forward(TensorRef ctx, float* lse, ConstTensorRef qkv, const AttentionShape& s,
                     const AttentionDropout& drop);
  void local_backward(TensorRef dqkv, ConstTensorRef dctx, ConstTensorRef ctx, const float* lse, ConstTensorRef qkv,
                      const AttentionShape& s, const AttentionDropout& drop);
  // all_gather (Megatron-core's cp_comm_type all_gather): every rank's K and V gathered at once, the
  // blocks then met in the ring's order; in the backward dK, dV of every block reduce-scattered to
  // their owners.
  Tensor gather_kv(ConstTensorRef qkv, const AttentionShape& s);
  void gathered_forward(TensorRef ctx, float* lse, ConstTensorRef qkv, const AttentionShape& s,
                        const AttentionDropout& drop);
  void gathered_backward(TensorRef dqkv, ConstTensorRef dctx, ConstTensorRef ctx, const float* lse, ConstTensorRef qkv,
                         const AttentionShape& s, const AttentionDropout& drop);

  // A slice (core/trace_names.h) from begin_us to now, its name built only when tracing.
  // a2a (DeepSpeed-Ulysses, TransformerEngine's AttnFuncWithCPAndQKVOA2A): all-to-alls turn the
  // sequence-sharded Q, K and V into head-sharded ones (every rank's chunks of heads/cp of the heads),
  // the same block ops run each rank's chunks against every rank's, and the output (in the backward:
  // dQ, dK, dV) returns by the reverse all-to-all.
  void ulysses_forward(TensorRef ctx, float* lse, ConstTensorRef qkv, const AttentionShape& s,
                       const AttentionDropout& drop);
  void ulysses_backward(TensorRef dqkv, ConstTensorRef dctx, ConstTensorRef ctx, const float* lse, ConstTensorRef qkv,
                        const AttentionShape& s, const AttentionDropout& drop);
  // [T, ld] rows of this rank → [cp·T, Σ width]: block q holds rank q's rows of this rank's slices.
  Tensor to_heads(ConstTensorRef x, std::int64_t ld, const std::vector<ColumnSlice>& slices, std::int64_t T);
  // The reverse: block q of `h` (rank q's rows of this rank's slices) back to rank q, into its slices of y.
  void from_heads(TensorRef y, std::int64_t ld, ConstTensorRef h, const std::vector<ColumnSlice>& slices,
                  std::int64_t T);
  void trace(const std::function<std::string()>& name, const char* category, double begin_us, int lane) const;
  // A compute-lane op slice from `begin` to now at the backend's clock (an empty mark when not tracing).
  Tracer::Mark mark() const;
  void trace_op(const std::function<std::string()>& name, Tracer::Mark begin) const;
  // Waits for the next block's K, V (posted at posted_us in ring step `step`), tracing the transfer
  // and the wait.
  void await_kv(Request& request, int step, double posted_us) const;
  bool tracing() const;
  double now_us() const;

  Communicator* comm_;
  Backend& backend_;
  int seq_;
  CpComm kind_;
  Tracer* tracer_;  // may be null
};

}  // namespace loom::exec
