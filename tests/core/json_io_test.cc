// JSON read/write: round trips, and one clear line for every kind of bad input.
#include <gtest/gtest.h>

#include "core/json_io.h"
#include "core/presets.h"

namespace loom {
namespace {

TEST(JsonIo, ModelRoundTrip) {
  for (const auto& name : model_preset_names()) {
    const ModelSpec m = *model_preset(name);
    auto back = model_from_json(to_json(m));
    ASSERT_TRUE(back.ok()) << name << ": " << back.error().message;
    EXPECT_EQ(to_json(*back), to_json(m)) << name;
    EXPECT_EQ(back->total_params(), m.total_params());
  }
}

// Sliding-window attention: written only when some layer has a window; a window alone is on every
// layer; a layer count without a window, or above the layers, is one line.
TEST(JsonIo, ModelSlidingWindowRoundTripAndBadInput) {
  ModelSpec m = *model_preset("llama3-8b");
  EXPECT_FALSE(to_json(m).contains("sliding_window"));
  m.sliding_window = 4096;
  m.sliding_layers = 16;
  auto back = model_from_json(to_json(m));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->sliding_window, 4096);
  EXPECT_EQ(back->sliding_layers, 16);
  const std::string base = R"({"layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 32)";
  auto all = model_from_json(Json::parse(base + R"(, "sliding_window": 8})"));
  ASSERT_TRUE(all.ok()) << all.error().message;
  EXPECT_EQ(all->sliding_layers, 2);
  auto orphan = model_from_json(Json::parse(base + R"(, "sliding_window_layers": 1})"));
  ASSERT_FALSE(orphan.ok());
  EXPECT_NE(orphan.error().message.find("'sliding_window_layers' needs 'sliding_window'"), std::string::npos);
  auto too_many = model_from_json(Json::parse(base + R"(, "sliding_window": 8, "sliding_window_layers": 3})"));
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.error().message.find("'sliding_window_layers' = 3 is out of range [0, 2]"), std::string::npos)
      << too_many.error().message;
}

// Chunked attention likewise: written only when some layer is chunked, on every layer not sliding unless
// attention_chunk_layers says how many; more sliding and chunked layers than layers is one line.
TEST(JsonIo, ModelAttentionChunksRoundTripAndBadInput) {
  ModelSpec m = *model_preset("llama3-8b");
  EXPECT_FALSE(to_json(m).contains("attention_chunk"));
  m.attention_chunk = 8192;
  m.chunked_layers = 24;
  auto back = model_from_json(to_json(m));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->attention_chunk, 8192);
  EXPECT_EQ(back->chunked_layers, 24);
  const std::string base = R"({"layers": 4, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 32)";
  auto rest = model_from_json(Json::parse(base + R"(, "sliding_window": 8, "sliding_window_layers": 1,
                                                     "attention_chunk": 16})"));
  ASSERT_TRUE(rest.ok()) << rest.error().message;
  EXPECT_EQ(rest->chunked_layers, 3);
  auto orphan = model_from_json(Json::parse(base + R"(, "attention_chunk_layers": 1})"));
  ASSERT_FALSE(orphan.ok());
  EXPECT_NE(orphan.error().message.find("'attention_chunk_layers' needs 'attention_chunk'"), std::string::npos);
  auto both = model_from_json(Json::parse(base + R"(, "sliding_window": 8, "sliding_window_layers": 2,
                                                     "attention_chunk": 16, "attention_chunk_layers": 3})"));
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.error().message.find("2 sliding-window and 3 chunked layers are more than the 4 layers"),
            std::string::npos)
      << both.error().message;
}

TEST(JsonIo, ModelDefaultsFollowDesign) {
  auto m = model_from_json(Json::parse(R"({"layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 32})"));
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->kv_heads, 4);
  EXPECT_EQ(m->ffn_hidden, 256);
  EXPECT_EQ(m->activation, Activation::kGelu);
}

TEST(JsonIo, PlanRoundTripAndWorldSizeCheck) {
  Plan plan;
  plan.model = *model_preset("gpt-tiny");
  plan.cluster = "local-cpu";
  plan.training.gpus = 8;
  plan.training.global_batch = 16;
  plan.training.pipeline_sends_block = true;
  plan.training.overlap_grad_reduce = false;
  plan.config.tp = 2;
  plan.config.pp = 2;
  plan.config.dp = 2;
  plan.config.schedule = Schedule::kGPipe;
  PlanMetrics metrics;
  // A shard group survives the round trip (the config key `shard_group`; 0 when absent).
  {
    Plan hsdp = plan;
    hsdp.config = {.dp = 8, .zero = 3, .shard_group = 4};
    EXPECT_EQ(to_json(hsdp)["config"]["shard_group"], 4);
    auto again = plan_from_json(to_json(hsdp));
    ASSERT_TRUE(again.ok()) << again.error().message;
    EXPECT_EQ(again->config.shard_group, 4);
  }
  // FP8 with its recipe survives it too; a plan without the keys reads as bf16.
  {
    Plan fp8 = plan;
    fp8.training.precision = Precision::kFp8;
    fp8.training.fp8_recipe = Fp8Recipe::kTensorwise;
    EXPECT_EQ(to_json(fp8)["training"]["precision"], "fp8");
    auto again = plan_from_json(to_json(fp8));
    ASSERT_TRUE(again.ok()) << again.error().message;
    EXPECT_EQ(again->training.precision, Precision::kFp8);
    EXPECT_EQ(again->training.fp8_recipe, Fp8Recipe::kTensorwise);
    Json old = to_json(plan);
    old["training"].erase("precision");
    EXPECT_EQ(plan_from_json(old)->training.precision, Precision::kBf16);
    old["training"]["precision"] = "fp16";
    auto bad = plan_from_json(old);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.error().message, "training: 'precision' must be bf16 or fp8, not 'fp16'");
  }
  metrics.step_time_s = 1.5;
  metrics.memory_gib.total = 3.0;
  plan.predicted = metrics;
  auto back = plan_from_json(to_json(plan));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->config, plan.config);
  EXPECT_TRUE(back->training.pipeline_sends_block);
  EXPECT_FALSE(back->training.overlap_grad_reduce);
  EXPECT_DOUBLE_EQ(back->predicted->step_time_s, 1.5);

  Json wrong = to_json(plan);
  wrong["training"]["gpus"] = 4;
  auto bad = plan_from_json(wrong);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("tp·cp·pp·dp = 8"), std::string::npos) << bad.error().message;
}

// A plan writes every stage's layers. A listed split is read back as the list; an even or pinned split
// stays itself where the list agrees with it, and a list that disagrees with the settings is one line.
TEST(JsonIo, StageLayersRoundTripAndAgreeWithTheSplitSettings) {
  Plan plan;
  plan.model = *model_preset("gpt-tiny");  // 4 layers
  plan.cluster = "local-cpu";
  plan.training.gpus = 2;
  plan.training.global_batch = 8;
  plan.config = {.pp = 2, .split = {.stage_layers = {1, 3}}};
  EXPECT_EQ(to_json(plan)["config"]["stage_layers"], Json::parse("[1, 3]"));
  auto back = plan_from_json(to_json(plan));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->config.split.stage_layers, (std::vector<int>{1, 3}));

  for (const PipelineSplit& split : {PipelineSplit{}, PipelineSplit{.first_stage_layers = 1}}) {
    Plan other = plan;
    other.config.split = split;
    EXPECT_EQ(to_json(other)["config"]["stage_layers"],
              Json(split.even() ? std::vector<int>{2, 2} : std::vector<int>{1, 3}));
    auto again = plan_from_json(to_json(other));
    ASSERT_TRUE(again.ok()) << again.error().message;
    EXPECT_EQ(again->config.split, split);
  }
  Json edited = to_json(Plan{plan.model, plan.cluster, plan.training, {.pp = 2}, {}});
  edited["config"]["stage_layers"] = Json::parse("[3, 1]");  // an even plan edited by hand: the list is the split
  auto listed = plan_from_json(edited);
  ASSERT_TRUE(listed.ok()) << listed.error().message;
  EXPECT_EQ(listed->config.split.stage_layers, (std::vector<int>{3, 1}));
  Json pinned =
      to_json(Plan{plan.model, plan.cluster, plan.training, {.pp = 2, .split = {.first_stage_layers = 1}}, {}});
  pinned["config"]["stage_layers"] = Json::parse("[2, 2]");
  auto disagree = plan_from_json(pinned);
  ASSERT_FALSE(disagree.ok());
  EXPECT_EQ(disagree.error().message, "config: 'stage_layers' 2x2 disagree with the split's settings (first1)");
  Json chunks = to_json(plan);
  chunks["config"]["vpp"] = 4096;  // 8192 chunks for 4 layers: refused before any count is made
  chunks["config"]["schedule"] = "interleaved";
  auto too_many = plan_from_json(chunks);
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.error().message,
            "config: 'stage_layers' add up to 4 layers, fewer than the pp × vpp = 8192 model chunks");
  for (const char* bad : {"[1]", "[0, 4]", "\"1,3\"", "[1.5, 2.5]", "[]"}) {
    Json j = to_json(plan);
    j["config"]["stage_layers"] = Json::parse(bad);
    auto r = plan_from_json(j);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().message.find('\n'), std::string::npos);
    EXPECT_EQ(r.error().message.rfind("config: 'stage_layers' ", 0), 0u) << r.error().message;
  }
}

TEST(JsonIo, BadInputGivesOneClearLine) {
  auto malformed = parse_json("{\"layers\": 2,", "model.json");
  ASSERT_FALSE(malformed.ok());
  EXPECT_NE(malformed.error().message.find("model.json: malformed JSON"), std::string::npos);
  // A number past double's range makes the parser throw even without exceptions (found by the
  // fuzzers in a cost file, an executor trace and a config.json): one line, not a terminate.
  for (const char* text : {"{\"layers\": 1e505}", "[885555555e55555555555555]", "{\"a\": -3E50000000000}"}) {
    auto overflow = parse_json(text, "x.json");
    ASSERT_FALSE(overflow.ok()) << text;
    EXPECT_NE(overflow.error().message.find("x.json: a number is out of range"), std::string::npos)
        << overflow.error().message;
    EXPECT_EQ(overflow.error().message.find('\n'), std::string::npos);
  }

  struct Case {
    const char* json;
    const char* expected;
  } cases[] = {
      {R"({"hidden": 64, "heads": 4, "vocab": 100, "seq_len": 32})", "missing field 'layers'"},
      {R"({"layers": 0, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 32})", "'layers' = 0 is out of range"},
      {R"({"layers": -3, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 32})", "'layers' = -3 is out of range"},
      {R"({"layers": 1e12, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 32})", "out of range"},
      {R"({"layers": "two", "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 32})", "'layers' must be an integer"},
      {R"({"layers": 2, "hidden": 65, "heads": 4, "vocab": 100, "seq_len": 32})", "not divisible by heads"},
      {R"({"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 3, "vocab": 100, "seq_len": 32})",
       "not divisible by kv_heads"},
      {R"({"layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 32, "activation": "relu"})", "'activation'"},
      {R"([1, 2])", "expected a JSON object"},
  };
  for (const auto& c : cases) {
    auto m = model_from_json(Json::parse(c.json));
    ASSERT_FALSE(m.ok()) << c.json;
    EXPECT_NE(m.error().message.find(c.expected), std::string::npos) << c.json << " -> " << m.error().message;
    EXPECT_EQ(m.error().message.find('\n'), std::string::npos);
  }
}

TEST(JsonIo, ClusterRoundTrip) {
  const ClusterSpec c = *cluster_preset("dgx-a100-80gb");
  auto back = cluster_from_json(to_json(c));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->collective_points.size(), c.collective_points.size());
  EXPECT_DOUBLE_EQ(back->device.peak_flops, c.device.peak_flops);
  EXPECT_DOUBLE_EQ(back->compute.gemm_half_saturation_flops, c.compute.gemm_half_saturation_flops);
  // The FP8 fields of a Hopper file are written back.
  const ClusterSpec h100 = *cluster_preset("dgx-h100");
  auto h = cluster_from_json(to_json(h100));
  ASSERT_TRUE(h.ok()) << h.error().message;
  EXPECT_TRUE(h->device.fp8_gemm_tn_only);
  EXPECT_DOUBLE_EQ(h->compute.gemm_fp8_max_efficiency, h100.compute.gemm_fp8_max_efficiency);
  EXPECT_GT(h100.compute.gemm_fp8_max_efficiency, 0.0);
}

}  // namespace
}  // namespace loom
