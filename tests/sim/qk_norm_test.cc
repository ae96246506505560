// QK-norm (ModelSpec::qk_norm): Q and K normalised after their projection, per head (Qwen3, Gemma 3) or over
// their full width (OLMo 2): the weights it adds, the norm passes and TP statistics the simulator charges, and
// what the memory model keeps for its backward.
#include <gtest/gtest.h>

#include "core/json_io.h"
#include "core/presets.h"
#include "planner/memory_model.h"
#include "sim/collectives.h"
#include "sim/cost_model.h"

namespace loom {
namespace {

ModelSpec llama_with(QkNorm norm) {
  ModelSpec m = *model_preset("llama3-8b");
  m.qk_norm = norm;
  return m;
}

TEST(QkNorm, WeightsArePerHeadOrFullWidthAndAreNoMatmul) {
  const ModelSpec none = llama_with(QkNorm::kNone), per_head = llama_with(QkNorm::kPerHead),
                  full = llama_with(QkNorm::kFullWidth);
  EXPECT_EQ(per_head.attention_params() - none.attention_params(), 2 * 128);
  EXPECT_EQ(full.attention_params() - none.attention_params(), 4096 + 1024);  // Q's 32 heads and K's 8, of 128
  EXPECT_EQ(per_head.total_params() - none.total_params(), 32 * 2 * 128);
  EXPECT_DOUBLE_EQ(per_head.layer_linear_flops_fwd(1.0), none.layer_linear_flops_fwd(1.0));
  EXPECT_DOUBLE_EQ(full.layer_linear_flops_fwd(1.0), none.layer_linear_flops_fwd(1.0));
  for (const ModelSpec& m : {per_head, full}) {
    auto back = model_from_json(to_json(m));
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->qk_norm, m.qk_norm);
  }
  Json bad = to_json(per_head);
  bad["qk_norm"] = "l2";
  auto refused = model_from_json(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("'qk_norm' must be none, per_head or full_width, not 'l2'"), std::string::npos)
      << refused.error().message;
}

// Each layer's forward and backward run one norm over the rank's Q and K values; a full-width norm under TP also
// all-reduces its per-token statistics, in each pass.
TEST(QkNorm, TheLayerRunsTheNormOverTheRanksHeads) {
  const ClusterSpec h100 = *cluster_preset("dgx-h100");
  const sim::CollectiveModel collectives(h100);
  TrainingSpec t{.gpus = 4, .global_batch = 4, .seq_len = 4096};
  ParallelConfig c{.tp = 4, .micro_batch = 1};
  c.sequence_parallel = true;
  const ModelSpec none = llama_with(QkNorm::kNone);
  const sim::CostModel base(none, t, c, h100, collectives);
  const sim::ChunkCost plain = base.chunk(0, 0, false);
  const double tokens = 4096, elements = tokens * (4096 + 1024) / 4, ab = 2;
  const double forward = base.memory_s("norm", 2 * ab * elements),
               backward = base.memory_s("norm_bwd", 3 * ab * elements);
  const sim::CostModel per_head_model(llama_with(QkNorm::kPerHead), t, c, h100, collectives);
  const sim::ChunkCost per_head = per_head_model.chunk(0, 0, false);
  EXPECT_NEAR(per_head.forward.seconds - plain.forward.seconds, 32 * forward, 1e-12);
  EXPECT_NEAR(per_head.backward.seconds - plain.backward.seconds, 32 * backward, 1e-12);
  const sim::CostModel full_model(llama_with(QkNorm::kFullWidth), t, c, h100, collectives);
  const sim::ChunkCost full = full_model.chunk(0, 0, false);
  EXPECT_GT(full.forward.seconds - per_head.forward.seconds, 0.0);  // the statistics' all-reduces
  EXPECT_GT(full.forward.tp_comm_exposed_s, per_head.forward.tp_comm_exposed_s);
  EXPECT_DOUBLE_EQ(per_head.forward.tp_comm_exposed_s, plain.forward.tp_comm_exposed_s);
}

// Without recomputation each layer keeps Q and K as projected beside the normalised ones the attention kernel
// reads, and per head the fp32 1/rms of each row; full recomputation keeps the layer input only.
TEST(QkNorm, EachLayerKeepsTheNormsInputs) {
  const ClusterSpec h100 = *cluster_preset("dgx-h100");
  TrainingSpec t{.gpus = 2, .global_batch = 2, .seq_len = 4096};
  ParallelConfig c{.tp = 2, .micro_batch = 1};
  const double sb = 4096, tp = 2;
  const double per_layer_none =
      estimate_memory(llama_with(QkNorm::kNone), t, c, h100).stages[0].activation_bytes_per_layer;
  const double per_layer_head =
      estimate_memory(llama_with(QkNorm::kPerHead), t, c, h100).stages[0].activation_bytes_per_layer;
  const double per_layer_full =
      estimate_memory(llama_with(QkNorm::kFullWidth), t, c, h100).stages[0].activation_bytes_per_layer;
  EXPECT_DOUBLE_EQ(per_layer_head - per_layer_none, (2 * sb * (4096 + 1024) + 4 * sb * (32 + 8)) / tp);
  EXPECT_DOUBLE_EQ(per_layer_full - per_layer_none, 2 * sb * (4096 + 1024) / tp + 2 * 4 * sb);
  c.recompute = Recompute::kFull;
  EXPECT_DOUBLE_EQ(estimate_memory(llama_with(QkNorm::kPerHead), t, c, h100).stages[0].activation_bytes_per_layer,
                   estimate_memory(llama_with(QkNorm::kNone), t, c, h100).stages[0].activation_bytes_per_layer);
}

}  // namespace
}  // namespace loom
