// Memory under context parallelism: each rank keeps the activations of its s/cp tokens, holds the
// ring's KV buffers (or the all-to-all's / all-gather's), and shards ZeRO states over dp·cp ranks.
#include <gtest/gtest.h>

#include "core/presets.h"
#include "planner/memory_model.h"

namespace loom {
namespace {

struct CpMemory {
  ModelSpec model = *model_preset("llama3-8b");  // 32 heads over 8 key/value heads
  ClusterSpec cluster = *cluster_preset("dgx-h100");
  TrainingSpec training{.gpus = 16, .global_batch = 16, .seq_len = 32768};
};

TEST(ContextParallelMemory, ActivationsPerLayerAtCp2AreHalfOfCp1s) {
  const CpMemory c;
  for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull})
    for (bool sp : {false, true}) {
      ParallelConfig one{.tp = 2, .dp = 8, .recompute = rc, .sequence_parallel = sp};
      ParallelConfig two = one;
      two.cp = 2;
      two.dp = 4;
      const double a1 = activation_bytes_per_layer(c.model, c.training, one);
      const double a2 = activation_bytes_per_layer(c.model, c.training, two);
      EXPECT_GT(a1, 0);
      EXPECT_DOUBLE_EQ(a2, 0.5 * a1) << to_string(rc) << (sp ? " sp" : "");
    }
}

TEST(ContextParallelMemory, TheRingHoldsTwoBuffersOfKvAndDkv) {
  const CpMemory c;
  // pp 1 (no pipeline buffers), ZeRO-1 (no gradient staging), no SP: the buffers are CP's alone.
  const ParallelConfig cp{.tp = 2, .dp = 2, .zero = 1, .cp = 4};
  const MemoryReport r = estimate_memory(c.model, c.training, cp, c.cluster);
  // One step's message: K and V of the rank's s/cp tokens for its kv_heads/tp heads, bf16.
  const double kv_message = 2.0 * (32768.0 / 4) * (8.0 * 128 / 2) * 2;
  // Two in flight (this step's and the next), each KV + dKV in the backward.
  EXPECT_DOUBLE_EQ(r.most_loaded().buffers_bytes, 2.0 * 2.0 * kv_message);
  ParallelConfig no_cp = cp;
  no_cp.cp = 1;
  no_cp.dp = 8;
  EXPECT_DOUBLE_EQ(estimate_memory(c.model, c.training, no_cp, c.cluster).most_loaded().buffers_bytes, 0.0);
}

TEST(ContextParallelMemory, AllToAllAndAllGatherBuffers) {
  const CpMemory c;
  ParallelConfig cp{.tp = 2, .dp = 2, .zero = 1, .cp = 4, .cp_comm = CpComm::kA2A};
  const double tokens = 32768.0 / 4;
  // The head-sharded copies of Q (32·128/2 wide) and K, V (8·128/2 each).
  EXPECT_DOUBLE_EQ(estimate_memory(c.model, c.training, cp, c.cluster).most_loaded().buffers_bytes,
                   2.0 * tokens * (32 * 128 / 2 + 2 * 8 * 128 / 2));
  cp.cp_comm = CpComm::kAllGather;
  // K and V of all s tokens, and their gradients.
  EXPECT_DOUBLE_EQ(estimate_memory(c.model, c.training, cp, c.cluster).most_loaded().buffers_bytes,
                   2.0 * 2.0 * 32768 * (8 * 128 / 2) * 2);
}

// PyTorch's ring attention: the gathered (or current and next) K and V in bf16, and in fp32 the rank's
// query gradient, its key/value gradients and the two key/value gradients in flight.
TEST(ContextParallelMemory, PyTorchRingAttentionHoldsFp32Gradients) {
  CpMemory c;
  c.training.cp_attention = CpAttention::kPyTorch;
  const double tokens = 32768.0 / 4, q = 32 * 128 / 2, kv = 8 * 128 / 2;
  const double fp32_grads = 4.0 * tokens * q + 3.0 * 4.0 * 2.0 * tokens * kv;
  ParallelConfig cp{.tp = 2, .dp = 2, .zero = 1, .cp = 4, .cp_comm = CpComm::kAllGather};
  EXPECT_DOUBLE_EQ(estimate_memory(c.model, c.training, cp, c.cluster).most_loaded().buffers_bytes,
                   2.0 * 32768 * kv * 2 + fp32_grads);
  cp.cp_comm = CpComm::kP2P;
  EXPECT_DOUBLE_EQ(estimate_memory(c.model, c.training, cp, c.cluster).most_loaded().buffers_bytes,
                   2.0 * (2.0 * tokens * kv * 2) + fp32_grads);
}

TEST(ContextParallelMemory, ZeroShardsOverDpTimesCpRanks) {
  const CpMemory c;
  for (int zero : {1, 2, 3}) {
    const ParallelConfig cp{.tp = 2, .dp = 2, .zero = zero, .cp = 4};
    const ParallelConfig dp{.tp = 2, .dp = 8, .zero = zero};
    const StageMemory a = estimate_memory(c.model, c.training, cp, c.cluster).most_loaded();
    const StageMemory b = estimate_memory(c.model, c.training, dp, c.cluster).most_loaded();
    EXPECT_DOUBLE_EQ(a.params_bytes, b.params_bytes) << zero;
    EXPECT_DOUBLE_EQ(a.grads_bytes, b.grads_bytes) << zero;
    EXPECT_DOUBLE_EQ(a.optimizer_bytes, b.optimizer_bytes) << zero;
  }
}

// The logits the last stage keeps (b·s·V/t fp32) and the workspace also shrink with s/cp.
TEST(ContextParallelMemory, LogitsAndWorkspaceFollowTheRanksTokens) {
  const CpMemory c;
  const ParallelConfig one{.tp = 2, .dp = 8, .recompute = Recompute::kFull};
  ParallelConfig two = one;
  two.cp = 2;
  two.dp = 4;
  const StageMemory a = estimate_memory(c.model, c.training, one, c.cluster).most_loaded();
  const StageMemory b = estimate_memory(c.model, c.training, two, c.cluster).most_loaded();
  EXPECT_DOUBLE_EQ(b.activations_bytes, 0.5 * a.activations_bytes);
  EXPECT_DOUBLE_EQ(b.workspace_bytes, 0.5 * a.workspace_bytes);
}

}  // namespace
}  // namespace loom
