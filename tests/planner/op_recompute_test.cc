// torchtitan's op-level selective activation checkpointing (`--recompute op`, core/op_recompute.h):
// which GEMMs re-run, their FLOPs, the simulated step between no recompute and full recompute, the
// activations it keeps, and the rules (dense models; torchtitan's, not Megatron's or DeepSpeed's).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/config_rules.h"
#include "core/flops.h"
#include "core/framework.h"
#include "core/op_recompute.h"
#include "core/presets.h"
#include "planner/enumerate.h"
#include "planner/memory_model.h"
#include "sim/simulator.h"

namespace loom {
namespace {

ModelSpec hf_model(const std::string& name) {
  auto m = load_model(std::string(LOOM_VALIDATION_DIR) + "/hf_configs/" + name + "/config.json");
  EXPECT_TRUE(m.ok()) << m.error().message;
  return *m;
}

TEST(OpRecompute, EverySecondMatmulOfTheBlockReRunsAndBiasedLinearsAlways) {
  // Llama: wq wk wv wo w1 w3 w2, all aten.mm: the 2nd, 4th and 6th (wk, wo, w3) re-run.
  const ModelSpec llama = *model_preset("llama3-8b");
  const OpRecompute l = op_recompute(llama);
  const double q = static_cast<double>(llama.q_dim()), kv = static_cast<double>(llama.kv_dim());
  EXPECT_DOUBLE_EQ(l.qkv, kv / (q + 2 * kv));
  EXPECT_EQ(l.attn_out, 1.0);
  EXPECT_EQ(l.mlp_up, 0.5);  // w3, not w1
  EXPECT_EQ(l.mlp_down, 0.0);
  // The executor reads the same decisions per linear layer.
  const OpRerun lr = op_rerun(llama);
  EXPECT_FALSE(lr.q);
  EXPECT_TRUE(lr.k);
  EXPECT_FALSE(lr.v);
  EXPECT_TRUE(lr.attn_out);
  EXPECT_FALSE(lr.gate);
  EXPECT_TRUE(lr.up);
  EXPECT_FALSE(lr.down);
  // GPT-2: every linear has a bias (aten.addmm, not on the save list): all re-run.
  const OpRecompute g = op_recompute(*model_preset("gpt2-small"));
  EXPECT_EQ(g.qkv, 1.0);
  EXPECT_EQ(g.attn_out, 1.0);
  EXPECT_EQ(g.mlp_up, 1.0);
  EXPECT_EQ(g.mlp_down, 1.0);
  // Biases on Q, K and V only: those three re-run uncounted, then wo (1st mm) is kept, w1 (2nd) re-runs,
  // w3 (3rd) is kept, w2 (4th) re-runs.
  ModelSpec qwen = llama;
  qwen.qkv_bias = true;
  const OpRecompute b = op_recompute(qwen);
  EXPECT_EQ(b.qkv, 1.0);
  EXPECT_EQ(b.attn_out, 0.0);
  EXPECT_EQ(b.mlp_up, 0.5);
  EXPECT_EQ(b.mlp_down, 1.0);
  // Without a gate (wq wk wv wo w1 w2): wk, wo, w2.
  ModelSpec plain = llama;
  plain.activation = Activation::kGelu;
  const OpRecompute p = op_recompute(plain);
  EXPECT_DOUBLE_EQ(p.qkv, kv / (q + 2 * kv));
  EXPECT_EQ(p.attn_out, 1.0);
  EXPECT_EQ(p.mlp_up, 0.0);
  EXPECT_EQ(p.mlp_down, 1.0);
}

TEST(OpRecompute, FlopsAreTheReRunGemms) {
  const ModelSpec m = *model_preset("llama3-8b");
  const double tokens = 16.0 * 8192, h = m.hidden, kv = static_cast<double>(m.kv_dim());
  // wk (h × kv), wo (h × h) and w3 (h × ffn): one multiply-add per weight per token.
  const double expected = m.layers * 2.0 * tokens * (h * kv + h * h + h * m.ffn_hidden);
  EXPECT_NEAR(recompute_flops_per_step(m, 16, 8192, Recompute::kOp), expected, 1e-9 * expected);
  EXPECT_LT(recompute_flops_per_step(m, 16, 8192, Recompute::kOp),
            recompute_flops_per_step(m, 16, 8192, Recompute::kFull));
}

struct TitanSetup {
  ModelSpec model = *model_preset("llama3-8b");
  ClusterSpec cluster = *cluster_preset("dgx-h100");
  TrainingSpec training{.gpus = 8, .global_batch = 16, .seq_len = 8192};
  ParallelConfig config{.tp = 1, .pp = 1, .dp = 8, .zero = 3, .micro_batch = 2};
  TitanSetup() { apply_framework(*find_framework("torchtitan").value(), training); }
  ParallelConfig with(Recompute r) const {
    ParallelConfig c = config;
    c.recompute = r;
    return c;
  }
};

TEST(OpRecompute, TheStepLiesBetweenNoneAndFullAndReRunsNoAttention) {
  const TitanSetup s;
  double step[3];
  const Recompute modes[3] = {Recompute::kNone, Recompute::kOp, Recompute::kFull};
  for (int i = 0; i < 3; ++i) {
    auto r = sim::simulate(s.model, s.training, s.with(modes[i]), s.cluster);
    ASSERT_TRUE(r.ok()) << r.error().message;
    step[i] = r->step_time_s;
  }
  EXPECT_LT(step[0], step[1]);
  EXPECT_LT(step[1], step[2]);
  // The backward re-runs wk, wo and w3 and the element-wise ops, never the attention core.
  sim::SimOptions detailed;
  detailed.record_segments = detailed.keep_graph = true;
  auto r = sim::simulate(s.model, s.training, s.with(Recompute::kOp), s.cluster, detailed);
  ASSERT_TRUE(r.ok());
  std::vector<std::string> names;
  for (const auto& seg : r->chunk_costs[0][0].backward.segments) names.push_back(seg.name);
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  EXPECT_TRUE(has("recompute qkv"));
  EXPECT_TRUE(has("recompute attn_out"));
  EXPECT_TRUE(has("recompute mlp_up"));
  EXPECT_TRUE(has("recompute norm.pow"));  // torchtitan's eager RMSNorm (--elementwise eager)
  EXPECT_TRUE(has("recompute rope.mul_freqs"));
  EXPECT_FALSE(has("recompute mlp_down"));
  EXPECT_FALSE(has("recompute flash_attention"));
}

TEST(OpRecompute, KeepsTheInputTheKeptGemmOutputsAndAttentionsOutput) {
  const TitanSetup s;
  const double sb = 2.0 * 8192, h = s.model.hidden, q = static_cast<double>(s.model.q_dim());
  const double kv = static_cast<double>(s.model.kv_dim()), f = s.model.ffn_hidden;
  // tp 1: the block input, wq and wv (of QKV), w1, w2's output; SDPA's output and fp32 log-sum-exp.
  const double expected = 2.0 * sb * (h + q + kv + f + h + q) + 4.0 * sb * s.model.heads;
  const double op = activation_bytes_per_layer(s.model, s.training, s.with(Recompute::kOp));
  EXPECT_NEAR(op, expected, 1e-9 * expected);
  EXPECT_LT(op, activation_bytes_per_layer(s.model, s.training, s.with(Recompute::kNone)));
  EXPECT_GT(op, activation_bytes_per_layer(s.model, s.training, s.with(Recompute::kFull)));
  // TP 2 with SP: the input and the two reduce-scatters' outputs are sequence shards; the column-parallel
  // outputs are column shards; w2's partial sums are whole before their reduce-scatter.
  ParallelConfig tp2 = s.with(Recompute::kOp);
  tp2.tp = 2, tp2.dp = 4, tp2.sequence_parallel = true;
  const double sharded =
      2.0 * sb * (h / 2 + (q + kv) / 2 + f / 2 + h + q / 2 + 2 * h / 2) + 4.0 * sb * s.model.heads / 2;
  EXPECT_NEAR(activation_bytes_per_layer(s.model, s.training, tp2), sharded, 1e-9 * sharded);
}

TEST(OpRecompute, IsTorchtitansAndForDenseModels) {
  const TitanSetup s;
  // Megatron-core and DeepSpeed recompute by layer or module, not by op.
  TrainingSpec megatron = s.training;
  apply_framework(*find_framework("megatron-core").value(), megatron);
  const RuleStatus no = check_framework(megatron, s.with(Recompute::kOp));
  ASSERT_FALSE(no.ok());
  EXPECT_NE(no.violation().message.find("op-level activation checkpointing"), std::string::npos);
  EXPECT_TRUE(check_framework(s.training, s.with(Recompute::kOp)).ok());
  // An MoE model's grouped expert GEMMs are outside the mm count: refused, named.
  ParallelConfig moe = s.with(Recompute::kOp);
  const RuleStatus dense = check_recompute(hf_model("mixtral-8x7b"), s.training, moe);
  ASSERT_FALSE(dense.ok());
  EXPECT_EQ(dense.violation().rule, rule::kOpRecomputeDense);
  // It keeps scaled-dot-product attention's output and log-sum-exp, not unfused attention's probabilities.
  TrainingSpec unfused = s.training;
  unfused.attention = AttentionKernel::kUnfused;
  const RuleStatus flash = check_recompute(s.model, unfused, s.with(Recompute::kOp));
  ASSERT_FALSE(flash.ok());
  EXPECT_EQ(flash.violation().rule, rule::kOpRecomputeFlash);
  EXPECT_TRUE(check_recompute(s.model, s.training, s.with(Recompute::kOp)).ok());
  // torchtitan's searches try it; a search without a framework does not.
  auto count_op = [&](const TrainingSpec& t) {
    auto e = enumerate_configs(s.model, t, s.cluster, {});
    EXPECT_TRUE(e.ok());
    return std::count_if(e->legal.begin(), e->legal.end(),
                         [](const ParallelConfig& c) { return c.recompute == Recompute::kOp; });
  };
  EXPECT_GT(count_op(s.training), 0);
  TrainingSpec plain{.gpus = 8, .global_batch = 16, .seq_len = 8192};
  EXPECT_EQ(count_op(plain), 0);
}

}  // namespace
}  // namespace loom
