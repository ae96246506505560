// A mixture-of-experts MLP block (Megatron-core's MoELayer with the all-to-all token dispatcher, dropless):
// a router picks each token's top k of the routed experts (softmax over the k chosen logits, as Mixtral and
// Megatron-core's default top-k router), each chosen copy of the token is dispatched to the rank holding
// its expert (an all-to-all over the EP group), the experts run on the rows they received with the router
// probability applied to the activation, the outputs go back (a second all-to-all) and each token's k
// copies are summed; a shared expert, when the model has one, runs on every token beside them.
//
// Expert tensor parallelism is the layer's TP by default: every TP rank routes the same (full) token rows,
// holds its slice of every local expert's width, and the block's output is a partial sum over TP that the
// layer reduces as it does a dense MLP's. The probabilities' gradients, partial over TP as well, are
// summed over TP before they return to the router; the router's weight is replicated on the TP ranks.
// With expert TP 1 (LocalDims::experts_whole, under SP) each TP rank routes its own rows to whole experts
// over an EP group that may span its TP peers (Megatron-core's MoE parallel folding): the routed output
// is complete for those rows, and only a shared expert's output is a TP sum.
#pragma once

#include <cstdint>
#include <vector>

#include "core/model_spec.h"
#include "exec/backend.h"
#include "exec/communicator.h"
#include "exec/model/gpt_layout.h"
#include "exec/model/mlp.h"
#include "exec/parallel/tensor_parallel.h"
#include "exec/trace.h"

namespace loom::exec {

// One MoE layer's parameters (compute dtype) or fp32 gradients: the router and shared expert from the
// layer's unit, the routed experts from its experts unit.
template <class P>
struct MoeSlots {
  P router_w{}, shared_fc_w{}, shared_proj_w{}, shared_gate_w{};
  std::vector<P> expert_fc_w, expert_proj_w;  // per local expert
};
using MoeWeights = MoeSlots<ConstTensorRef>;
using MoeGrads = MoeSlots<float*>;
MoeWeights moe_weights(const Unit& layer, ConstTensorRef layer_base, const Unit& experts, ConstTensorRef experts_base);
MoeGrads moe_grads(const Unit& layer, float* layer_base, const Unit& experts, float* experts_base);

// What the backward needs: the routing (host), the rows this rank's experts received in expert order, and
// each expert's activations.
struct MoeCache {
  std::vector<int> expert;                         // [tokens·k] the expert of copy t·k + j (j-th choice of token t)
  std::vector<float> prob;                         // [tokens·k] its router probability
  std::vector<int> send_token;                     // [tokens·k] the token of each dispatched row (expert-major order)
  std::vector<int> position;                       // [tokens·k] the dispatched row of each copy
  std::vector<std::int64_t> send_rows, recv_rows;  // rows to / from each EP rank
  std::vector<std::int64_t> expert_offset;         // [local experts + 1] rows of each local expert
  std::vector<int> to_expert_major, to_source_major;  // received rows ↔ expert order (empty: the same)
  Tensor x;                                           // the local experts' input rows [received, h], in expert order
  Tensor probs;                                       // their router probabilities [received] (fp32)
  Tensor fc, act;                // the local experts' MLP activations, one buffer for all their rows
  Tensor shared_fc, shared_act;  // the shared expert's, all tokens
  Tensor shared_gate;            // its gate, sigmoid(x·w) per token (fp32; Qwen2-MoE)
};

// A block's output (or its input's gradient): `partial` over all tokens, a sum over TP ranks still to be
// reduced, and `local` this rank's rows, complete. Either may be empty.
struct MoeOutput {
  Tensor partial, local;
};

class MoeMlp {
 public:
  // `ep`: the expert-parallel group (null: a group of one).
  MoeMlp(const ModelSpec& model, const LocalDims& dims, Backend& backend, TensorParallel& tp, Communicator* ep,
         Tracer* tracer);

  // m_in: the block input, all token rows [tokens, h]; ln2_local: the same as this rank keeps it (its own
  // rows under sequence parallelism). Returns the output (workspace).
  MoeOutput forward(OpSlices& op, const MoeWeights& w, ConstTensorRef m_in, const Tensor& ln2_local,
                    std::int64_t tokens, MoeCache& c);
  // dy_local: the output's gradient as this rank keeps it. Returns the input's gradient; its local part
  // holds the router's share (the same on every TP rank). The weight gradients go through `wg`, which
  // keeps what they read but dy_local and ln2_local (the caller keeps those).
  MoeOutput backward(OpSlices& op, WeightGradStore& wg, const MoeWeights& w, const MoeGrads& g, const Tensor& dy_local,
                     const Tensor& ln2_local, std::int64_t tokens, MoeCache& c);
  // The most rows this rank's experts received in one dispatch over the mean, tokens·k (0: none yet).
  double max_imbalance() const { return max_imbalance_; }
  // The fewest, likewise (0: none yet).
  double min_imbalance() const { return min_imbalance_; }

 private:
  void route(const std::vector<float>& logits, std::int64_t tokens, MoeCache& c);
  void shared_gate_backward(OpSlices& op, WeightGradStore& wg, const MoeWeights& w, const MoeGrads& g,
                            Tensor& gate_grad, const Tensor& ln2_local, std::int64_t tokens, MoeCache& c,
                            Tensor& local_dx);
  // Rows of `send` to the EP ranks, `send_rows[p]` for rank p; returns what arrived (`send` itself in a
  // group of one).
  Tensor exchange(Tensor send, const std::vector<std::int64_t>& send_rows, const std::vector<std::int64_t>& recv_rows,
                  const char* what);
  // out[i] = in[index[i]] in a new tensor of `category` (`in` recharged when the index is the identity).
  Tensor reorder(Tensor in, const std::vector<int>& index, MemoryCategory category);
  Tensor act(std::int64_t rows, std::int64_t cols, MemoryCategory category) {
    return backend_.empty(rows, cols, category, backend_.compute_dtype());
  }

  LocalDims dims_;
  Backend& backend_;
  TensorParallel& tp_;
  SelfCommunicator self_{"ep"};
  Communicator& ep_;
  Tracer* tracer_;
  Mlp experts_, shared_;
  double max_imbalance_ = 0, min_imbalance_ = 0;
};

}  // namespace loom::exec
