// Layout equivalence: the same model, seed and data trained for 10 steps in fp32 under every
// parallel layout gives the single-rank loss curve within 1e-5 relative. Each layout is a real
// `mpirun --oversubscribe -np N loom run` on real files.
// The environment picks another backend for the whole suite, single-rank curve included:
// LOOM_LAYOUT_BACKEND=cuda on a GPU machine (several ranks share its GPU: their messages go through
// host memory, --comm host-staged), or cpu-bf16 to rehearse that on the CPU (LOOM_LAYOUT_COMM sets
// --comm). Those run bf16 mixed precision, held to bf16's tolerance instead. LOOM_LAYOUT_STEPS trains
// fewer steps (run_util.h, layout_steps; the sanitizer build runs 2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "exec/model/gpt_layout.h"
#include "run_util.h"

namespace loom::exec::testing {
namespace {

using Layout = RunLayout;  // its model is read by the suites that mix models

constexpr int kDefaultSteps = 10;

int steps() { return layout_steps(kDefaultSteps); }
const std::string& backend() {
  static const std::string b = from_env("LOOM_LAYOUT_BACKEND", "cpu");
  return b;
}
// fp32: the layouts sum the same values in other orders. bf16 keeps 8 significant bits; its curves stay
// within one bf16 rounding (2^-9 ≈ 2e-3 relative) of each other (bf16_run_test.cc measures the same).
double tolerance() { return backend() == "cpu" ? 1e-5 : 2e-3; }

std::string common_flags(const std::string& data, const std::string& model) {
  const std::string comm = from_env("LOOM_LAYOUT_COMM", "");
  return fmt::format(
      "--model {} --data {} --steps {} --global-batch 8 --micro-batch 1 --threads 1 --lr 3e-3 --warmup 2 --backend "
      "{}{}",
      model, data, steps(), backend(), comm.empty() ? "" : " --comm " + comm);
}

struct Curve {
  std::vector<double> loss, grad_norm;
};

Curve train(const std::string& model_name, int ranks, const std::string& flags, const std::string& tag) {
  const std::string dir = scratch_dir("layout_" + model_name);
  static std::string data = make_token_file(scratch_dir("layout_data"), 20000);
  const std::string log = fmt::format("{}/{}.jsonl", dir, tag);
  const ProcessResult r = run_shell(
      fmt::format("{} {} {} --log {}", loom_run(ranks), common_flags(data, test_model(model_name)), flags, log));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return {losses(log), step_values(log, "grad_norm")};
}

const Curve& baseline(const std::string& model_name) {
  static std::map<std::string, Curve> cache;
  auto it = cache.find(model_name);
  if (it == cache.end()) it = cache.emplace(model_name, train(model_name, 1, "", "single")).first;
  return it->second;
}

// `first_grad_norm`: the first step's gradient norm is held to the single rank's within this relative
// tolerance too (0: not checked), before any update lets the layouts' rounding grow; in fp32 only.
void expect_same_curve(const std::string& model_name, const Layout& layout, double first_grad_norm = 0) {
  if (layout.ranks > 1 && !have_mpirun()) GTEST_SKIP() << "built without MPI: multi-rank layouts not run";
  const Curve& expected_curve = baseline(model_name);
  const std::vector<double>& expected = expected_curve.loss;
  ASSERT_EQ(expected.size(), static_cast<std::size_t>(steps()));
  const Curve got_curve = train(model_name, layout.ranks, layout.flags, layout.name);
  const std::vector<double>& got = got_curve.loss;
  if (first_grad_norm > 0 && backend() == "cpu") {
    ASSERT_FALSE(got_curve.grad_norm.empty() || expected_curve.grad_norm.empty()) << layout.name;
    EXPECT_NEAR(got_curve.grad_norm[0], expected_curve.grad_norm[0], first_grad_norm * expected_curve.grad_norm[0])
        << layout.name << ": first step's gradient norm";
  }
  ASSERT_EQ(got.size(), expected.size()) << layout.name;
  double largest = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], expected[i], tolerance() * std::fabs(expected[i])) << layout.name << " step " << i + 1;
    largest = std::max(largest, std::fabs(got[i] - expected[i]) / std::fabs(expected[i]));
  }
  std::printf("%s on %s: largest relative difference from one rank %.2e\n", layout.name, backend().c_str(), largest);
  // Training did something: the curve is not flat (over the full run; two steps, both inside the
  // --warmup 2 ramp, need not move it that far).
  if (steps() >= kDefaultSteps) {
    EXPECT_LT(got.back(), got.front() - 0.05);
  }
}

class ExecGptLayouts : public ::testing::TestWithParam<Layout> {};
TEST_P(ExecGptLayouts, MatchSingleRankLoss) { expect_same_curve("micro", GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Layouts, ExecGptLayouts,
    ::testing::Values(
        Layout{"TP2", 2, "--tp 2"}, Layout{"TP2_SP", 2, "--tp 2 --sp on"},
        Layout{"PP2_GPipe", 2, "--pp 2 --schedule gpipe"}, Layout{"PP2_1F1B", 2, "--pp 2 --schedule 1f1b"},
        Layout{"DP2", 2, "--dp 2"}, Layout{"DP2_ZeRO1", 2, "--dp 2 --zero 1"},
        Layout{"DP2_ZeRO2", 2, "--dp 2 --zero 2"}, Layout{"DP2_ZeRO3", 2, "--dp 2 --zero 3"},
        Layout{"TP2xDP2", 4, "--tp 2 --dp 2"}, Layout{"TP2xPP2", 4, "--tp 2 --pp 2"},
        Layout{"PP2xDP2", 4, "--pp 2 --dp 2"}, Layout{"TP2xPP2xDP2", 8, "--tp 2 --pp 2 --dp 2"},
        Layout{"RecomputeFull", 1, "--recompute full"}, Layout{"RecomputeSelective", 1, "--recompute selective"},
        Layout{"TP2xPP2xDP2_ZeRO3_SP_Selective", 8, "--tp 2 --pp 2 --dp 2 --zero 3 --sp on --recompute selective"},
        Layout{"PP2_VPP2_Interleaved", 2, "--pp 2 --vpp 2 --schedule interleaved"},
        Layout{"PP4_Interleaved", 4, "--pp 4 --schedule interleaved"},
        Layout{"TP2xPP2xDP2_VPP2_ZeRO3", 8, "--tp 2 --pp 2 --dp 2 --vpp 2 --schedule interleaved --zero 3"},
        // HSDP: ZeRO-3 inside groups of 2 dp ranks, the shards' gradients summed across the groups.
        Layout{"DP4_HSDP2", 4, "--dp 4 --zero 3 --shard-group 2"},
        Layout{"PP2xDP4_HSDP2", 8, "--pp 2 --dp 4 --zero 3 --shard-group 2"},
        // Zero-bubble (ZB-H1): weight gradients deferred to W passes, the units' DP hooks after them.
        Layout{"PP2_ZB", 2, "--pp 2 --schedule zb"}, Layout{"PP4_ZB", 4, "--pp 4 --schedule zb"},
        Layout{"PP2xDP2_ZB_ZeRO1", 4, "--pp 2 --dp 2 --zero 1 --schedule zb"},
        Layout{"PP2xDP2_ZB_ZeRO2", 4, "--pp 2 --dp 2 --zero 2 --schedule zb"},
        Layout{"TP2xPP2xDP2_ZB_ZeRO3_SP_Full", 8,
               "--tp 2 --pp 2 --dp 2 --zero 3 --sp on --recompute full --schedule zb"},
        Layout{"PP2xDP4_HSDP2_ZB", 8, "--pp 2 --dp 4 --zero 3 --shard-group 2 --schedule zb"}),
    [](const auto& info) { return std::string(info.param.name); });

// Uneven pipeline splits (core/pipeline_split.h) of the 4-layer model: a lighter first or last stage
// (1 and 3 layers, 3 and 1), the embedding and loss counted as layers over 3 stages (1, 2, 1), the
// default split of layers that do not divide (2, 1, 1), and a listed split with the heavy stage last
// (1, 1, 2).
class ExecUnevenLayouts : public ::testing::TestWithParam<Layout> {};
TEST_P(ExecUnevenLayouts, MatchSingleRankLoss) { expect_same_curve("micro", GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Layouts, ExecUnevenLayouts,
    ::testing::Values(Layout{"PP2_FirstStage1", 2, "--pp 2 --first-stage-layers 1"},
                      Layout{"PP2_LastStage1", 2, "--pp 2 --last-stage-layers 1 --schedule gpipe"},
                      Layout{"PP3_EmbeddingLoss", 3, "--pp 3 --account-for-embedding --account-for-loss"},
                      Layout{"TP2xPP2_LastStage1_ZeRO1", 4, "--tp 2 --pp 2 --last-stage-layers 1 --zero 1"},
                      Layout{"PP3_Default", 3, "--pp 3"}, Layout{"PP3_Listed112", 3, "--stage-layers 1,1,2"},
                      Layout{"PP3_Listed112_ZB", 3, "--stage-layers 1,1,2 --schedule zb"}),
    [](const auto& info) { return std::string(info.param.name); });

// The uneven layouts above do run their split: each rank's chunks hold the split's layers.
TEST(ExecUnevenLayouts, EachRankBuildsItsSplitsLayers) {
  auto model = read_json_file(test_model("micro"));
  ASSERT_TRUE(model.ok());
  const ModelSpec m = *model_from_json(*model);
  auto layers_of = [&](ParallelConfig c, int pp_rank) {
    std::vector<int> out;
    for (const StageLayout& chunk : make_rank_layout(m, c, 0, pp_rank).chunks)
      out.push_back(chunk.end_layer - chunk.first_layer);
    return out;
  };
  EXPECT_EQ(layers_of({.pp = 2, .split = {.first_stage_layers = 1}}, 0), std::vector<int>{1});
  EXPECT_EQ(layers_of({.pp = 2, .split = {.first_stage_layers = 1}}, 1), std::vector<int>{3});
  const ParallelConfig accounted{.pp = 3, .split = {.account_for_embedding = true, .account_for_loss = true}};
  EXPECT_EQ(layers_of(accounted, 1), std::vector<int>{2});
  EXPECT_EQ(make_rank_layout(m, accounted, 0, 2).combined.first_layer, 3);
  // A pinned stage's layers spread over its chunks: 2 on rank 0 in chunks of 1, 2 on rank 1 likewise.
  const ParallelConfig interleaved{
      .pp = 2, .vpp = 2, .schedule = Schedule::kInterleaved, .split = {.first_stage_layers = 2}};
  EXPECT_EQ(layers_of(interleaved, 0), (std::vector<int>{1, 1}));
  EXPECT_EQ(make_rank_layout(m, interleaved, 0, 1).chunks[1].first_layer, 3);
  const ParallelConfig listed{.pp = 3, .split = {.stage_layers = {1, 1, 2}}};
  EXPECT_EQ(layers_of(listed, 2), std::vector<int>{2});
  EXPECT_EQ(make_rank_layout(m, listed, 0, 2).combined.first_layer, 2);
}

// LLaMA-shaped: RMSNorm, SwiGLU, grouped-query attention, rotary positions, untied head.
class ExecLlamaLayouts : public ::testing::TestWithParam<Layout> {};
TEST_P(ExecLlamaLayouts, MatchSingleRankLoss) { expect_same_curve("micro_llama", GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Layouts, ExecLlamaLayouts,
    ::testing::Values(Layout{"TP2", 2, "--tp 2"}, Layout{"PP2", 2, "--pp 2"},
                      Layout{"TP2xDP2_ZeRO2_SP", 4, "--tp 2 --dp 2 --zero 2 --sp on"},
                      Layout{"TP2xPP2xDP2_ZeRO1_Full", 8, "--tp 2 --pp 2 --dp 2 --zero 1 --recompute full"},
                      Layout{"TP2xPP2_ZB_Selective", 4, "--tp 2 --pp 2 --recompute selective --schedule zb"}),
    [](const auto& info) { return std::string(info.param.name); });

// Heads 12 wide on hidden 32 (a head_dim apart from hidden/heads, as Qwen3, Gemma 2 and Mistral-Nemo
// have): Q and the attention output are 48 wide, K and V 24.
class ExecHeadDimLayouts : public ::testing::TestWithParam<Layout> {};
TEST_P(ExecHeadDimLayouts, MatchSingleRankLoss) { expect_same_curve("micro_headdim", GetParam()); }

INSTANTIATE_TEST_SUITE_P(Layouts, ExecHeadDimLayouts,
                         ::testing::Values(Layout{"TP2_SP", 2, "--tp 2 --sp on"}, Layout{"TP2xPP2", 4, "--tp 2 --pp 2"},
                                           Layout{"DP2_ZeRO3", 2, "--dp 2 --zero 3"}),
                         [](const auto& info) { return std::string(info.param.name); });

// QK-norm. Per head (Qwen3's shape: head_dim 12 apart from hidden/heads, tied embeddings): the gains
// are replicated over TP and each rank normalises its own heads, so their gradients are summed over TP
// with or without SP; op-level SAC re-runs the norms from the kept QKV columns. Over the full width
// (OLMo 2's), at tp 1. Adam's per-value step hides a gain's gradient short by a TP rank's heads from
// the loss curve (1e-6 relative in 10 steps), so the first step's gradient norm is held to 2e-7 of the
// single rank's too: the layouts round it to within 2e-8 of it, and the unsummed gains move it 8.5e-7.
class ExecQkNormLayouts : public ::testing::TestWithParam<Layout> {};
TEST_P(ExecQkNormLayouts, MatchSingleRankLoss) { expect_same_curve(GetParam().model, GetParam(), 2e-7); }

INSTANTIATE_TEST_SUITE_P(Layouts, ExecQkNormLayouts,
                         ::testing::Values(Layout{"PerHead_TP2", 2, "--tp 2", "micro_qwen3"},
                                           Layout{"PerHead_TP2_SP", 2, "--tp 2 --sp on", "micro_qwen3"},
                                           Layout{"PerHead_TP2xPP2_ZB_Selective", 4,
                                                  "--tp 2 --pp 2 --recompute selective --schedule zb", "micro_qwen3"},
                                           Layout{"PerHead_TP2xDP2_ZeRO3_Full", 4,
                                                  "--tp 2 --dp 2 --zero 3 --recompute full", "micro_qwen3"},
                                           Layout{"PerHead_Op_TP2", 2, "--recompute op --tp 2", "micro_qwen3"},
                                           Layout{"PerHead_CP2", 2, "--cp 2", "micro_qwen3"},
                                           Layout{"FullWidth_PP2", 2, "--pp 2", "micro_olmo2"},
                                           Layout{"FullWidth_DP2_ZeRO3", 2, "--dp 2 --zero 3", "micro_olmo2"},
                                           Layout{"FullWidth_Op", 1, "--recompute op", "micro_olmo2"}),
                         [](const auto& info) { return std::string(info.param.name); });

// Mixture of experts (8 routed experts, top 2, a shared expert, a dense first layer): expert parallelism
// alone and with TP (expert TP = TP, under SP), PP, interleaving, ZeRO-1/2 over the expert-data-parallel
// group and full recomputation; ZeRO-3 with the experts unsplit. Routing is dropless, so every layout
// computes every token's experts and gives the single-rank curve.
class ExecMoeLayouts : public ::testing::TestWithParam<Layout> {};
TEST_P(ExecMoeLayouts, MatchSingleRankLoss) { expect_same_curve("micro_moe", GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Layouts, ExecMoeLayouts,
    ::testing::Values(Layout{"TP2_SP", 2, "--tp 2 --sp on"}, Layout{"DP2_ZeRO3", 2, "--dp 2 --zero 3"},
                      Layout{"EP2", 2, "--dp 2 --ep 2"}, Layout{"EP4", 4, "--dp 4 --ep 4"},
                      Layout{"EP8", 8, "--dp 8 --ep 8"}, Layout{"DP4_EP2_ZeRO1", 4, "--dp 4 --ep 2 --zero 1"},
                      Layout{"TP2xEP2_SP", 4, "--tp 2 --dp 2 --ep 2 --sp on"},
                      Layout{"PP2xEP2_ZeRO2", 4, "--pp 2 --dp 2 --ep 2 --zero 2"},
                      Layout{"PP2_VPP2xEP2", 4, "--pp 2 --vpp 2 --schedule interleaved --dp 2 --ep 2"},
                      Layout{"TP2xPP2xEP2_Full", 8, "--tp 2 --pp 2 --dp 2 --ep 2 --recompute full"},
                      // Expert TP 1: whole experts, each TP rank routing its own rows; EP folded over the TP
                      // ranks (EP 2 on TP 2 alone, EP 4 over TP 2 × DP 2) or not at all (experts replicated
                      // on the TP ranks, their gradients summed over them).
                      Layout{"TP2_ETP1_SP", 2, "--tp 2 --sp on --etp 1"},
                      Layout{"TP2_ETP1xEP2_SP", 2, "--tp 2 --sp on --etp 1 --ep 2"},
                      Layout{"TP2xDP2_ETP1xEP4_ZeRO1", 4, "--tp 2 --dp 2 --sp on --etp 1 --ep 4 --zero 1"},
                      Layout{"TP2xPP2_ETP1xEP2_Selective", 4,
                             "--tp 2 --pp 2 --sp on --etp 1 --ep 2 --recompute selective"},
                      Layout{"PP2xEP2_ZB_ZeRO2", 4, "--pp 2 --dp 2 --ep 2 --zero 2 --schedule zb"},
                      Layout{"TP2xPP2_ZB_SP", 4, "--tp 2 --pp 2 --sp on --schedule zb"}),
    [](const auto& info) { return std::string(info.param.name); });

// Qwen2-MoE's shape (a sigmoid-gated shared expert, MoE on every other layer).
class ExecGatedMoeLayouts : public ::testing::TestWithParam<Layout> {};
TEST_P(ExecGatedMoeLayouts, MatchSingleRankLoss) { expect_same_curve("micro_moe_gated", GetParam()); }

INSTANTIATE_TEST_SUITE_P(Layouts, ExecGatedMoeLayouts,
                         ::testing::Values(Layout{"TP2_SP", 2, "--tp 2 --sp on"},
                                           Layout{"EP2xPP2", 4, "--pp 2 --dp 2 --ep 2"},
                                           Layout{"EP2xPP2_ZB", 4, "--pp 2 --dp 2 --ep 2 --schedule zb"},
                                           Layout{"TP2_ETP1xEP2_SP", 2, "--tp 2 --sp on --etp 1 --ep 2"}),
                         [](const auto& info) { return std::string(info.param.name); });

// Each EP rank holds its share of the routed experts, and the ranks of a TP × EP layout hold every
// parameter of the model exactly once (replicated ones once per TP group).
TEST(ExecMoeLayouts, EpRanksHoldTheirExpertsAndTogetherTheWholeModel) {
  auto json = read_json_file(test_model("micro_moe"));
  ASSERT_TRUE(json.ok());
  const ModelSpec m = *model_from_json(*json);
  const ParallelConfig c{.tp = 2, .dp = 4, .ep = 4};
  std::int64_t held = 0;
  for (int tp = 0; tp < c.tp; ++tp)
    for (int ep = 0; ep < c.ep; ++ep) {
      const StageLayout layout = make_rank_layout(m, c, tp, 0, ep).combined;
      ASSERT_EQ(layout.expert_units.size(), 4u);
      EXPECT_EQ(layout.expert_units[0], -1);  // the dense first layer
      const Unit& experts = layout.units[layout.expert_units[1]];
      EXPECT_EQ(experts.params.size(), 4u);  // 8 experts / ep 4, fc and proj each
      EXPECT_EQ(experts.params.front().name, fmt::format("layers.1.mlp.experts.{}.fc.weight", 2 * ep));
      for (const Unit& u : layout.units)
        for (const ParamSlot& slot : u.params)
          if (!(slot.tp_replicated && tp > 0) && (u.experts() || ep == 0)) held += slot.numel();
    }
  EXPECT_EQ(held, m.total_params());
}

// With hidden and attention dropout (p = 0.1): masks are keyed on global positions, so every layout
// drops the same values.
class ExecDropoutLayouts : public ::testing::TestWithParam<Layout> {};
TEST_P(ExecDropoutLayouts, MatchSingleRankLoss) { expect_same_curve("micro_dropout", GetParam()); }

INSTANTIATE_TEST_SUITE_P(Layouts, ExecDropoutLayouts,
                         ::testing::Values(Layout{"TP2_SP", 2, "--tp 2 --sp on"}, Layout{"PP2", 2, "--pp 2"},
                                           Layout{"DP2_ZeRO3", 2, "--dp 2 --zero 3"},
                                           Layout{"TP2xPP2xDP2_Selective", 8,
                                                  "--tp 2 --pp 2 --dp 2 --recompute selective"},
                                           Layout{"RecomputeFull", 1, "--recompute full"},
                                           Layout{"PP2_VPP2_Interleaved", 2, "--pp 2 --vpp 2 --schedule interleaved"},
                                           Layout{"TP2xPP2_ZB_SP", 4, "--tp 2 --pp 2 --sp on --schedule zb"}),
                         [](const auto& info) { return std::string(info.param.name); });

// --attention flash on one rank or several (the backend's block ops with the keys and values read in
// place; the output and its log-sum-exp kept, the scores recomputed in the backward) gives the unfused
// single-rank curve: with grouped-query attention and rotary positions, with hidden and attention
// dropout (each probability's mask drawn at its (query, key) position, as the unfused path draws it),
// under TP with SP, a pipeline with selective recompute, and ZeRO-3.
class ExecFlashLayouts : public ::testing::TestWithParam<Layout> {};
TEST_P(ExecFlashLayouts, MatchSingleRankLoss) { expect_same_curve(GetParam().model, GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Layouts, ExecFlashLayouts,
    ::testing::Values(Layout{"Flash", 1, "--attention flash"},
                      Layout{"Flash_TP2_SP", 2, "--attention flash --tp 2 --sp on"},
                      Layout{"Flash_PP2_Selective", 2, "--attention flash --pp 2 --recompute selective"},
                      Layout{"Flash_PP2_ZB", 2, "--attention flash --pp 2 --schedule zb"},
                      Layout{"Llama_Flash", 1, "--attention flash", "micro_llama"},
                      Layout{"Llama_Flash_TP2xDP2_ZeRO3", 4, "--attention flash --tp 2 --dp 2 --zero 3", "micro_llama"},
                      Layout{"Dropout_Flash", 1, "--attention flash", "micro_dropout"},
                      Layout{"Dropout_Flash_TP2_SP_Full", 2, "--attention flash --tp 2 --sp on --recompute full",
                             "micro_dropout"}),
    [](const auto& info) { return std::string(info.param.name); });

// torchtitan's op-level SAC (--recompute op, which runs flash attention): the backward rebuilds each
// block from its input and the outputs the policy kept. LLaMA keeps wq, wv, w1 and w2 and re-runs wk, wo
// and w3; with a QKV bias (micro_qwen) wq, wk and wv re-run, wo and w3 are kept; GPT's biased linears
// all re-run. Under TP with SP the reduce-scatters' outputs are kept; without SP the all-reduce re-runs.
class ExecOpRecomputeLayouts : public ::testing::TestWithParam<Layout> {};
TEST_P(ExecOpRecomputeLayouts, MatchSingleRankLoss) { expect_same_curve(GetParam().model, GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Layouts, ExecOpRecomputeLayouts,
    ::testing::Values(Layout{"Llama_Op", 1, "--recompute op", "micro_llama"},
                      Layout{"Llama_Op_TP2_SP", 2, "--recompute op --tp 2 --sp on", "micro_llama"},
                      Layout{"Llama_Op_TP2", 2, "--recompute op --tp 2", "micro_llama"},
                      Layout{"Llama_Op_PP2_ZB", 2, "--recompute op --pp 2 --schedule zb", "micro_llama"},
                      Layout{"Llama_Op_CP2xDP2_ZeRO3", 4, "--recompute op --cp 2 --dp 2 --zero 3", "micro_llama"},
                      Layout{"QkvBias_Op", 1, "--recompute op", "micro_qwen"},
                      Layout{"QkvBias_Op_TP2_SP", 2, "--recompute op --tp 2 --sp on", "micro_qwen"},
                      Layout{"Op_TP2_SP", 2, "--recompute op --tp 2 --sp on"},
                      Layout{"Dropout_Op_TP2xPP2_SP", 4, "--recompute op --tp 2 --pp 2 --sp on", "micro_dropout"}),
    [](const auto& info) { return std::string(info.param.name); });

// Context parallelism (cp_comm p2p): each sequence in 2·cp chunks, rank r keeping chunks r and 2·cp−1−r,
// attention a ring of key/value blocks merged by log-sum-exp, gradients over dp·cp. The loss is the
// mean over every token, so each layout gives the single-rank curve: with grouped-query attention and
// rotary positions (each rank's chunks at their global positions), with hidden and attention dropout
// (the ring's blocks draw each probability's mask at its global (query, key) position), and with the
// experts of an MoE model split over the CP ranks (EP inside dp·cp, Megatron-core's expert grid).
class ExecContextParallelLayouts : public ::testing::TestWithParam<Layout> {};
TEST_P(ExecContextParallelLayouts, MatchSingleRankLoss) { expect_same_curve(GetParam().model, GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Layouts, ExecContextParallelLayouts,
    ::testing::Values(
        Layout{"CP2", 2, "--cp 2"}, Layout{"CP4", 4, "--cp 4"}, Layout{"CP2xTP2_SP", 4, "--cp 2 --tp 2 --sp on"},
        Layout{"CP2xPP2_1F1B", 4, "--cp 2 --pp 2 --schedule 1f1b"},
        Layout{"CP2xPP2_ZB", 4, "--cp 2 --pp 2 --schedule zb"}, Layout{"CP2xDP2_ZeRO1", 4, "--cp 2 --dp 2 --zero 1"},
        Layout{"CP2xDP2_ZeRO3", 4, "--cp 2 --dp 2 --zero 3"}, Layout{"CP2_RecomputeFull", 2, "--cp 2 --recompute full"},
        Layout{"CP2_RecomputeSelective", 2, "--cp 2 --recompute selective"},
        Layout{"Llama_CP2", 2, "--cp 2", "micro_llama"}, Layout{"Llama_CP4", 4, "--cp 4", "micro_llama"},
        Layout{"Llama_CP2xTP2_SP", 4, "--cp 2 --tp 2 --sp on", "micro_llama"},
        Layout{"Dropout_CP2", 2, "--cp 2", "micro_dropout"}, Layout{"Dropout_CP4", 4, "--cp 4", "micro_dropout"},
        Layout{"Dropout_CP2xTP2_SP", 4, "--cp 2 --tp 2 --sp on", "micro_dropout"},
        Layout{"Moe_CP2xEP2", 2, "--cp 2 --ep 2", "micro_moe"},
        Layout{"Moe_CP2xDP2_EP4_ZeRO1", 4, "--cp 2 --dp 2 --ep 4 --zero 1", "micro_moe"},
        // HSDP: ZeRO-3 inside groups of 2 dp ranks' 4 dp·cp ranks, summed across the 2 groups.
        Layout{"CP2xDP4_HSDP2", 8, "--cp 2 --dp 4 --zero 3 --shard-group 2"},
        // cp_comm all_gather: every rank's K and V at once, dK and dV reduce-scattered back.
        Layout{"AllGather_CP2", 2, "--cp 2 --cp-comm all_gather"},
        Layout{"AllGather_CP4xDP2_ZeRO2", 8, "--cp 4 --dp 2 --zero 2 --cp-comm all_gather"},
        Layout{"Llama_AllGather_CP2xTP2_SP", 4, "--cp 2 --tp 2 --sp on --cp-comm all_gather", "micro_llama"},
        Layout{"Dropout_AllGather_CP4", 4, "--cp 4 --cp-comm all_gather", "micro_dropout"},
        // cp_comm a2a (Ulysses): Q, K, V head-sharded over the CP ranks by all-to-all, the output back.
        Layout{"A2A_CP2", 2, "--cp 2 --cp-comm a2a"},
        Layout{"A2A_CP4xDP2_ZeRO1", 8, "--cp 4 --dp 2 --zero 1 --cp-comm a2a"},
        Layout{"Llama_A2A_CP2", 2, "--cp 2 --cp-comm a2a", "micro_llama"},
        Layout{"Dropout_A2A_CP2xTP2_SP", 4, "--cp 2 --tp 2 --sp on --cp-comm a2a", "micro_dropout"}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace loom::exec::testing
