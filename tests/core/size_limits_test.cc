// Sizes at and beyond what 64-bit arithmetic holds (10^15 parameters, 10^7 GPUs, sequences of
// 2^40, hidden 2^31): every reader gives the right count or one clear error, never a wrap-around.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/hf_config.h"
#include "core/json_io.h"

namespace loom {
namespace {

Json dense(long long layers, long long hidden) {
  return Json{{"layers", layers}, {"hidden", hidden},  {"heads", 1024},       {"vocab", 131072},
              {"seq_len", 4096},  {"norm", "rmsnorm"}, {"activation", "gelu"}};
}

void expect_error(const Result<ModelSpec>& m, const std::string& expected) {
  ASSERT_FALSE(m.ok()) << "accepted; total_params() = " << m->total_params();
  EXPECT_NE(m.error().message.find(expected), std::string::npos) << m.error().message;
  EXPECT_EQ(m.error().message.find('\n'), std::string::npos);
}

TEST(SizeLimits, ThreeQuadrillionParametersAreCountedExactly) {
  // 4096 layers of hidden 2^18: 12·h² per layer (Q, K, V, O and a 4h GELU MLP, no biases) plus two
  // RMSNorms, the tied embedding and the final norm: 3.4·10^15 parameters, counted here by hand.
  auto m = model_from_json(dense(4096, 1 << 18));
  ASSERT_TRUE(m.ok()) << m.error().message;
  const std::int64_t h = 1 << 18;
  const std::int64_t expected = 4096 * (12 * h * h + 2 * h) + 131072 * h + h;
  EXPECT_EQ(m->total_params(), expected);
  EXPECT_GT(m->total_params(), 3'000'000'000'000'000LL);
}

TEST(SizeLimits, ParameterCountsBeyondTwoToThe53AreBadInput) {
  // Hidden 2^19: 1.35·10^16 parameters, past 2^53.
  expect_error(model_from_json(dense(4096, 1 << 19)), "more than Loom's limit");
  // Every field at its own limit: 65,536 experts of width 2^26 on hidden 2^20 overflowed int64 (about 10^22).
  Json moe = dense(4096, 1 << 20);
  moe["moe"] = {{"experts", 1 << 16}, {"experts_per_token", 2}, {"expert_ffn", 1 << 26}};
  expect_error(model_from_json(moe), "more than Loom's limit");
  // MLA at its widths' limits.
  Json mla = dense(4096, 1 << 20);
  mla["heads"] = 1 << 20;
  mla["mla"] = {{"q_lora_rank", 1 << 20},
                {"kv_lora_rank", 1 << 20},
                {"qk_nope_head_dim", 1 << 20},
                {"qk_rope_head_dim", 1 << 20},
                {"v_head_dim", 1 << 20}};
  expect_error(model_from_json(mla), "more than Loom's limit");
}

TEST(SizeLimits, HiddenTwoToThe31AndSequenceTwoToThe40AreOutOfRange) {
  Json wide = dense(2, 1LL << 31);
  expect_error(model_from_json(wide), "'hidden' = 2147483648 is out of range");
  Json long_context = dense(2, 1024);
  long_context["seq_len"] = 1LL << 40;
  expect_error(model_from_json(long_context), "'seq_len' = 1099511627776 is out of range");
}

TEST(SizeLimits, HfConfigsBeyondTheLimitAreBadInput) {
  Json huge = {{"model_type", "mixtral"},         {"hidden_size", 1 << 20},       {"intermediate_size", 1 << 26},
               {"num_attention_heads", 64},       {"num_hidden_layers", 4096},    {"vocab_size", 32000},
               {"max_position_embeddings", 4096}, {"num_local_experts", 1 << 16}, {"num_experts_per_tok", 2}};
  expect_error(model_from_hf_config(huge, "huge"), "more than Loom's limit");
  // n_shared_experts · moe_intermediate_size was multiplied in int and narrowed: 1024 · 2^26 = 2^36.
  Json shared = {{"model_type", "deepseek_v2"},      {"hidden_size", 1024},     {"intermediate_size", 4096},
                 {"num_attention_heads", 8},         {"num_hidden_layers", 2},  {"vocab_size", 1000},
                 {"max_position_embeddings", 512},   {"n_routed_experts", 8},   {"num_experts_per_tok", 2},
                 {"moe_intermediate_size", 1 << 26}, {"n_shared_experts", 1024}};
  expect_error(model_from_hf_config(shared, "shared"), "n_shared_experts · moe_intermediate_size = 68719476736");
}

TEST(SizeLimits, TenMillionGpusAreAPlanButTpTimesPpBeyondAnIntIsNot) {
  Json config = {{"tp", 8}, {"pp", 125}, {"dp", 10'000}};
  auto ten_million = config_from_json(config);
  ASSERT_TRUE(ten_million.ok()) << ten_million.error().message;
  EXPECT_EQ(ten_million->world_size(), 10'000'000);
  // Each degree within its own limit, the product 2^40: world_size() overflowed int.
  auto overflow = config_from_json(Json{{"tp", 1 << 20}, {"pp", 1 << 20}, {"dp", 1}});
  ASSERT_FALSE(overflow.ok());
  EXPECT_NE(overflow.error().message.find("tp·cp·pp·dp = 1099511627776 GPUs is more than"), std::string::npos)
      << overflow.error().message;
  auto training = training_from_json(Json{{"gpus", 10'000'000}, {"global_batch", 1LL << 40}, {"seq_len", 1 << 24}});
  ASSERT_TRUE(training.ok()) << training.error().message;
  EXPECT_EQ(training->global_batch, 1LL << 40);
}

TEST(SizeLimits, PlanClusterOfTheWrongTypeIsBadInputNotAnException) {
  Plan plan;
  plan.model = *model_from_json(dense(2, 1024));
  plan.training.gpus = 1;
  plan.training.global_batch = 1;
  Json json = to_json(plan);
  json["cluster"] = 7;
  auto back = plan_from_json(json);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.error().message.find("'cluster' must be"), std::string::npos) << back.error().message;
}

}  // namespace
}  // namespace loom
