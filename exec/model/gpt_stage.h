// The part of a GPT held by one pipeline stage and one TP rank: token + position embedding on the
// first stage, its transformer blocks, final norm, LM head and vocabulary-parallel cross-entropy on
// the last. Parameters come from a ParameterSource (which may gather ZeRO-3 shards per unit);
// activations are kept per micro-batch between the forward and the backward.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "exec/model/gpt_layout.h"
#include "exec/model/transformer_layer.h"
#include "exec/model/weight_grad_store.h"

namespace loom::exec {

class ParameterSource {
 public:
  virtual ~ParameterSource() = default;
  // Parameters of a unit in the backend's compute dtype, available until release() (ZeRO-3 gathers them).
  virtual TensorRef acquire(int unit) = 0;
  virtual void release(int unit) = 0;
  // The unit the pass will acquire next: ZeRO-3 starts gathering it while the current one
  // computes. Every prefetch is followed by an acquire of the same unit.
  virtual void prefetch(int /*unit*/) {}
  // Where the unit's backward accumulates its fp32 gradient (main grads) for the current micro-batch.
  virtual float* gradients(int unit) = 0;
  // The unit's backward for the current micro-batch is complete.
  virtual void gradients_ready(int unit) = 0;
};

// One model chunk's view of a store holding several chunks: its unit u is the store's u + offset.
class ChunkParameters final : public ParameterSource {
 public:
  ChunkParameters(ParameterSource& store, int offset) : store_(store), offset_(offset) {}
  TensorRef acquire(int unit) override { return store_.acquire(unit + offset_); }
  void release(int unit) override { store_.release(unit + offset_); }
  void prefetch(int unit) override { store_.prefetch(unit + offset_); }
  float* gradients(int unit) override { return store_.gradients(unit + offset_); }
  void gradients_ready(int unit) override { store_.gradients_ready(unit + offset_); }

 private:
  ParameterSource& store_;
  int offset_;
};

struct MicroBatch {
  const int* tokens = nullptr;      // [batch·seq] inputs (first stage)
  const int* targets = nullptr;     // [batch·seq] next tokens (last stage)
  std::int64_t first_sequence = 0;  // global index of its first sequence (keys the dropout masks)
};

class GptStage {
 public:
  // `ep`: the expert-parallel group of an MoE model (null: a group of one). `seq`: tokens of a whole
  // sequence, of which a rank of the context-parallel group `cp` (null: a group of one) holds seq/cp.
  GptStage(const ModelSpec& model, const ParallelConfig& config, const StageLayout& layout, int seq, Backend& backend,
           TensorParallel& tp, ParameterSource& params, DropoutSettings dropout = {}, Tracer* tracer = nullptr,
           Communicator* ep = nullptr, Communicator* cp = nullptr,
           AttentionKernel attention = AttentionKernel::kUnfused);

  // First stage: `input` is ignored and the embedding of mb.tokens is used. Returns the stage
  // output [local tokens, h]; on the last stage returns an empty tensor and adds the summed token
  // losses of this micro-batch to the backend's loss total (Backend::loss_add; read with loss_result).
  // loss_scale multiplies the loss gradient.
  Tensor forward(int micro_batch, const MicroBatch& mb, Tensor input, float loss_scale);
  // `dout`: gradient of this stage's output (ignored on the last stage). Returns the gradient of
  // the stage input (empty on the first stage). Under the zero-bubble schedule this is its B pass: the
  // linear layers' weight gradients, and each unit's gradients-ready hook, wait for weight_gradients.
  Tensor backward(int micro_batch, const MicroBatch& mb, Tensor dout);
  // Zero-bubble's W pass of the micro-batch (after its backward).
  void weight_gradients(int micro_batch) { wgrad_.run(micro_batch); }
  std::size_t pending_weight_gradients() const { return wgrad_.pending(); }

  std::int64_t tokens() const { return static_cast<std::int64_t>(config_.micro_batch) * seq_; }
  std::int64_t local_tokens() const { return tp_.local_tokens(tokens()); }
  int hidden() const { return model_.hidden; }
  double moe_imbalance() const { return layer_.moe_imbalance(); }
  double moe_imbalance_min() const { return layer_.moe_imbalance_min(); }
  // Tests: keep a host copy of the last micro-batch's logits (before they become gradients).
  bool keep_logits = false;
  std::vector<float> logits;

 private:
  struct Cache {
    std::vector<LayerCache> layers;
    Tensor final_in, final_norm, final_stats, dlogits;
    Tensor embed_mask;
  };
  Tensor embed(const MicroBatch& mb, Cache& cache);
  void embed_backward(const MicroBatch& mb, const Tensor& d, Cache& cache);
  // The unit's gradients (what ParameterSource gives now), registered with the weight-gradient store.
  float* unit_gradients(int unit);
  // Local rows [0, rows) of a micro-batch whose first row is local token `first`, in runs whose learned
  // positions are consecutive: f(first row, rows in the run, the run's first position). One op per run
  // instead of one per token: on a GPU each op is a launch of a few microseconds.
  template <class F>
  void for_each_position_run(std::int64_t first, std::int64_t rows, F&& f) const;
  Tensor head_forward(Tensor x, Cache& cache, const MicroBatch& mb, float loss_scale);
  Tensor head_backward(Cache& cache);
  int head_unit() const;
  std::int64_t head_weight_offset() const;
  // Acquires the pass's next unit (which must be `unit`) and prefetches the one after it.
  TensorRef acquire_next(int unit);
  // Local layer i's routed-experts unit, -1 for a dense layer.
  int expert_unit(std::size_t i) const { return i < layout_.expert_units.size() ? layout_.expert_units[i] : -1; }
  // An activation (or its gradient) in the backend's compute dtype.
  Tensor act(std::int64_t rows, std::int64_t cols, MemoryCategory category) {
    return backend_.empty(rows, cols, category, backend_.compute_dtype());
  }

  // The order in which a forward and a backward pass acquire units (prefetch order).
  std::vector<int> forward_order_, backward_order_;
  const std::vector<int>* pass_ = nullptr;
  std::size_t pass_next_ = 0;

  const ModelSpec& model_;
  ParallelConfig config_;
  const StageLayout& layout_;
  ContextParallel cp_;
  int seq_;  // local tokens per sequence
  Backend& backend_;
  TensorParallel& tp_;
  ParameterSource& params_;
  DropoutSettings dropout_;
  TransformerLayer layer_;
  Tracer* tracer_;  // the embedding's and the head's op slices; the layers trace their own
  WeightGradStore wgrad_;
  std::map<int, Cache> caches_;
};

}  // namespace loom::exec
