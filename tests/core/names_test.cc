// Names of enums: every value round-trips through its one table, unknown names are refused, and the
// files that carry these names (cost files, plans, model JSON) reject what Loom cannot read.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>

#include "core/json_io.h"
#include "core/names.h"
#include "core/parallel_config.h"
#include "core/presets.h"

namespace loom {
namespace {

// Each value's canonical name parses back to it, every name in the table parses to its entry's
// value, canonical names are distinct, and the table covers `values` enumerators.
template <typename E>
void expect_round_trip(int values, const char* what) {
  std::set<std::string> canonical;
  std::set<E> covered;
  for (const auto& [value, name] : name_table<E>()) {
    EXPECT_EQ(parse_in(name_table<E>(), name), value) << what << " " << name;
    const char* printed = to_string(value);
    EXPECT_EQ(parse_in(name_table<E>(), printed), value) << what << " " << printed;
    canonical.insert(printed);
    covered.insert(value);
  }
  EXPECT_EQ(static_cast<int>(covered.size()), values) << what;
  EXPECT_EQ(static_cast<int>(canonical.size()), values) << what;
}

TEST(Names, EveryEnumRoundTripsThroughItsTable) {
  expect_round_trip<Collective>(4, "collective");
  expect_round_trip<LinkLevel>(2, "link level");
  expect_round_trip<Activation>(2, "activation");
  expect_round_trip<Norm>(2, "norm");
  expect_round_trip<PositionEmbedding>(2, "position embedding");
  expect_round_trip<AttentionKernel>(2, "attention kernel");
  expect_round_trip<Precision>(2, "precision");
  expect_round_trip<Fp8Recipe>(3, "fp8 recipe");
  expect_round_trip<Zero3Unit>(2, "zero3 unit");
  expect_round_trip<Elementwise>(2, "elementwise");
  expect_round_trip<FlashKernel>(2, "flash kernel");
  expect_round_trip<CpAttention>(2, "cp attention");
}

TEST(Names, NamesAreTheOnesFilesAndTracesHaveAlwaysUsed) {
  EXPECT_STREQ(to_string(Collective::kAllReduce), "all_reduce");
  EXPECT_STREQ(to_string(Collective::kReduceScatter), "reduce_scatter");
  EXPECT_STREQ(to_string(Collective::kAllGather), "all_gather");
  EXPECT_STREQ(to_string(Collective::kSendRecv), "send_recv");
  EXPECT_STREQ(to_string(LinkLevel::kIntraNode), "intra_node");
  EXPECT_STREQ(to_string(LinkLevel::kInterNode), "inter_node");
  EXPECT_STREQ(to_string(Activation::kSwiGLU), "swiglu");
  EXPECT_STREQ(to_string(Norm::kRMSNorm), "rmsnorm");
  EXPECT_STREQ(to_string(PositionEmbedding::kRotary), "rope");
  EXPECT_STREQ(to_string(AttentionKernel::kUnfused), "unfused");
  EXPECT_STREQ(to_string(Precision::kFp8), "fp8");
  EXPECT_STREQ(to_string(Fp8Recipe::kTensorwise), "tensorwise");   // Megatron-LM's --fp8-recipe name
  EXPECT_EQ(parse_fp8_recipe("current"), Fp8Recipe::kTensorwise);  // TransformerEngine's name for it
  EXPECT_STREQ(to_string(Zero3Unit::kModule), "module");           // plan files' training.zero3_unit
  EXPECT_STREQ(to_string(Elementwise::kEager), "eager");           // plan files' training.elementwise
  EXPECT_STREQ(to_string(FlashKernel::kFa2), "fa2");               // plan files' training.flash_kernel
  EXPECT_STREQ(to_string(CpAttention::kPyTorch), "pytorch");       // plan files' training.cp_attention
}

TEST(Names, RecomputeAndScheduleAliasesParseButPrintCanonically) {
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull})
    EXPECT_EQ(parse_recompute(to_string(r)), r);
  for (Schedule s : {Schedule::kGPipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZeroBubble})
    EXPECT_EQ(parse_schedule(to_string(s)), s);
  EXPECT_EQ(parse_recompute("sel"), Recompute::kSelective);
  EXPECT_EQ(parse_recompute("off"), Recompute::kNone);
  EXPECT_EQ(parse_schedule("zero-bubble"), Schedule::kZeroBubble);
  EXPECT_STREQ(to_string(Schedule::kZeroBubble), "zb");
  EXPECT_STREQ(to_string(Recompute::kSelective), "selective");
}

TEST(Names, UnknownNamesAreRefused) {
  EXPECT_EQ(parse_collective("allreduce"), std::nullopt);
  EXPECT_EQ(parse_collective("All_Reduce"), std::nullopt);
  EXPECT_EQ(parse_collective(""), std::nullopt);
  EXPECT_EQ(parse_link_level("intra"), std::nullopt);
  EXPECT_EQ(parse_activation("relu"), std::nullopt);
  EXPECT_EQ(parse_norm("batchnorm"), std::nullopt);
  EXPECT_EQ(parse_position_embedding("alibi"), std::nullopt);
  EXPECT_EQ(parse_attention_kernel("paged"), std::nullopt);
  EXPECT_EQ(parse_schedule("1f1b-interleaved"), std::nullopt);
}

TEST(Names, OneOfListsCanonicalNamesForMessages) {
  EXPECT_EQ(one_of<Collective>(), "all_reduce, reduce_scatter, all_gather or send_recv");
  EXPECT_EQ(one_of<LinkLevel>(), "intra_node or inter_node");
}

TEST(Names, ModelJsonNamesAnUnknownValueAndTheKnownOnes) {
  Json m = to_json(*model_preset("gpt-tiny"));
  m["norm"] = "batchnorm";
  auto bad = model_from_json(m);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "model JSON: 'norm' must be layernorm or rmsnorm, not 'batchnorm'");
  m["norm"] = "rmsnorm";
  m["position_embedding"] = "alibi";
  bad = model_from_json(m);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "model JSON: 'position_embedding' must be learned or rope, not 'alibi'");
}

// A cost file whose collectives section names a collective or a link Loom does not know.
TEST(CostFile, UnknownCollectiveOrLinkNameIsBadInputNamingTheFieldAndTheKnownNames) {
  Json j = to_json(*cluster_preset("dgx-a100-80gb"));
  ASSERT_FALSE(j["collectives"]["points"].empty());
  Json bad = j;
  bad["collectives"]["points"][1]["collective"] = "allreduce";
  auto c = cluster_from_json(bad);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().message,
            "cost file: collectives.points[1].collective 'allreduce' is not a collective Loom knows "
            "(all_reduce, reduce_scatter, all_gather or send_recv)");

  bad = j;
  bad["collectives"]["points"][0]["level"] = "nvlink";
  c = cluster_from_json(bad);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(
      c.error().message,
      "cost file: collectives.points[0].level 'nvlink' is not a link level Loom knows (intra_node or inter_node)");

  bad = j;
  bad["collectives"]["fits"] = Json::array({{{"collective", "broadcast"},
                                             {"level", "intra_node"},
                                             {"group_size", 2},
                                             {"alpha_s", 1e-6},
                                             {"bus_bandwidth_bytes_per_s", 1e9}}});
  c = cluster_from_json(bad);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("collectives.fits[0].collective 'broadcast'"), std::string::npos)
      << c.error().message;
}

TEST(CostFile, AFormatTagOtherThanLoomCost1IsBadInputAndAMissingOneIsAccepted) {
  Json j = to_json(*cluster_preset("local-cpu"));
  EXPECT_EQ(j["schema"], "loom-cost/1");
  j["schema"] = "loom-cost/2";
  auto c = cluster_from_json(j);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().message, "cost file: format 'loom-cost/2' is not one this Loom reads (loom-cost/1)");
  j["schema"] = 1;
  EXPECT_FALSE(cluster_from_json(j).ok());
  j.erase("schema");  // hand-written cluster JSON
  EXPECT_TRUE(cluster_from_json(j).ok());
}

TEST(PlanFile, AFormatTagOtherThanLoomPlan1IsBadInputAndAMissingOneIsAccepted) {
  Plan plan;
  plan.model = *model_preset("gpt-tiny");
  plan.training.gpus = 1;
  plan.training.global_batch = 4;
  Json j = to_json(plan);
  EXPECT_EQ(j["format"], "loom-plan/1");
  j["format"] = "loom-plan/2";
  auto p = plan_from_json(j);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().message, "plan: format 'loom-plan/2' is not one this Loom reads (loom-plan/1)");
  j.erase("format");
  EXPECT_TRUE(plan_from_json(j).ok());
}

TEST(CostFile, EveryShippedProfileLoads) {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(LOOM_SOURCE_DIR) + "/profiles")) {
    if (entry.path().extension() != ".json") continue;
    auto json = read_json_file(entry.path().string());
    ASSERT_TRUE(json.ok()) << json.error().message;
    EXPECT_EQ((*json)["schema"], kCostFormat) << entry.path();
    auto cluster = cluster_from_json(*json);
    EXPECT_TRUE(cluster.ok()) << entry.path() << ": " << cluster.error().message;
    ++files;
  }
  EXPECT_GE(files, 4);
  for (const auto& name : cluster_preset_names()) EXPECT_TRUE(cluster_preset(name).ok()) << name;
}

}  // namespace
}  // namespace loom
