// Memory accounting: the peak bytes `loom run` measures per category on every rank (each tensor is
// charged to params, grads, optimizer, activations, buffers or workspace when allocated) against
// the planner's memory model for the same config, fp32 everywhere (4/4/8/4 bytes), unfused attention.
// Every category must agree on every stage within the tolerances below, except the pipeline's send
// buffers: a send completes when the peer receives it, so how many are alive at once depends on
// timing, and the model states the most there can be (see p2p_buffer_bytes in
// planner/memory_model.cc); and under expert parallelism the routed rows, which depend on the routing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "core/json_io.h"
#include "core/presets.h"
#include "exec/memory.h"
#include "planner/memory_model.h"
#include "run_util.h"

namespace loom::exec::testing {
namespace {

struct Case {
  const char* name;
  int ranks;
  const char* flags;
  ParallelConfig config;
  const char* model = "micro";
};

// The model counts the executor's tensors: on every rank of every case the activations come out exact
// to the byte (expert parallelism's aside, held between bounds above) and params, grads and optimizer
// states within 0.1 %; the workspace and the buffers (the pipeline's aside) within 0.6 % (a gated
// shared expert's per-token gate and its ZeRO-3 unit: a few hundred bytes).
constexpr double kCategoryTolerance = 0.005;
constexpr double kWorkspaceAndBufferTolerance = 0.01;

constexpr int kGlobalBatch = 8;

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

void check_against_memory_model(const Case& c) {
  if (c.ranks > 1 && !have_mpirun()) GTEST_SKIP() << "built without MPI";
  const std::string dir = scratch_dir(std::string("memory_") + c.name);
  const std::string data = make_token_file(dir, 20000);
  const std::string log = dir + "/log.jsonl";
  const ProcessResult r =
      run_shell(fmt::format("{} --model {} --data {} --steps 2 --global-batch {} --threads 1 {} --log {}",
                            loom_run(c.ranks), test_model(c.model), data, kGlobalBatch, c.flags, log));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<Json> records = read_jsonl(log);
  ASSERT_FALSE(records.empty());
  const Json& peaks = records.back();
  ASSERT_EQ(peaks["event"], "memory_peaks");

  auto model = read_json_file(test_model(c.model));
  ASSERT_TRUE(model.ok());
  const ModelSpec spec = *model_from_json(*model);
  TrainingSpec training{
      .gpus = c.ranks,
      .global_batch = kGlobalBatch,
      .seq_len = spec.seq_len,
      .param_bytes = 4,
      .grad_bytes = 4,
      .optimizer_bytes = 8,
      .activation_bytes = 4,
      // Context parallelism runs flash style (the output and its log-sum-exp kept, the
      // scores recomputed), which is also what the planner requires of it; so does
      // --attention flash on one rank.
      .attention = c.config.cp > 1 || std::string(c.flags).find("--attention flash") != std::string::npos
                       ? AttentionKernel::kFlash
                       : AttentionKernel::kUnfused};
  const MemoryReport estimate = estimate_memory(spec, training, c.config, *cluster_preset("local-cpu"));

  for (const Json& rank : peaks["ranks"]) {
    const int stage = rank_coords(c.config, rank["rank"].get<int>()).pp_rank;
    const StageMemory& expected = estimate.stages[stage];
    const Json& measured = rank["memory_peak_gib"];
    const std::pair<const char*, double> categories[] = {{"params", expected.params_bytes},
                                                         {"grads", expected.grads_bytes},
                                                         {"optimizer", expected.optimizer_bytes},
                                                         {"activations", expected.activations_bytes}};
    const std::string where = fmt::format("{} rank {} stage {} ", c.name, rank["rank"].get<int>(), stage);
    // Expert parallelism: the rows this rank's experts receive depend on the routing. One MoE layer's
    // transients scale with one dispatch's rows, so the workspace is checked against the model fed the
    // rank's measured imbalance (the most rows of any dispatch over the mean). The activations hold a
    // micro-batch's rows of every MoE layer: between the model fed the fewest and the most.
    double workspace_model = expected.workspace_bytes;
    std::optional<std::pair<StageMemory, StageMemory>> routed_bounds;
    if (c.config.ep > 1) {
      ASSERT_TRUE(rank.contains("moe_imbalance")) << where;
      TrainingSpec most = training, least = training;
      most.moe_imbalance = rank["moe_imbalance"].get<double>();
      least.moe_imbalance = rank["moe_imbalance_min"].get<double>();
      EXPECT_GT(most.moe_imbalance, 1.0) << where;  // a few dozen tokens never split evenly
      EXPECT_LE(least.moe_imbalance, most.moe_imbalance) << where;
      routed_bounds = {estimate_memory(spec, least, c.config, *cluster_preset("local-cpu")).stages[stage],
                       estimate_memory(spec, most, c.config, *cluster_preset("local-cpu")).stages[stage]};
      workspace_model = routed_bounds->second.workspace_bytes;
    }
    for (const auto& [name, bytes] : categories) {
      const double got = measured[name].get<double>() * (1 << 30);
      if (routed_bounds && std::string(name) == "activations") {
        EXPECT_GE(got, 0.95 * routed_bounds->first.activations_bytes) << where << name;
        EXPECT_LE(got, 1.05 * routed_bounds->second.activations_bytes) << where << name;
      } else {
        EXPECT_NEAR(got, bytes, kCategoryTolerance * bytes) << where << name;
      }
    }
    const double workspace = measured["workspace"].get<double>() * (1 << 30);
    EXPECT_NEAR(workspace, workspace_model, kWorkspaceAndBufferTolerance * workspace_model) << where << "workspace";

    // Buffers: ZeRO's unsharded gradients and gathered units and the SP all-gather exactly; of the
    // pipeline's messages at least one (the gradient received, or on the last stage the one sent)
    // and at most the model's bound.
    const double buffers = measured["buffers"].get<double>() * (1 << 30);
    if (expected.p2p_bytes == 0) {
      EXPECT_NEAR(buffers, expected.buffers_bytes, kWorkspaceAndBufferTolerance * expected.buffers_bytes)
          << where << "buffers";
    } else {
      const double message = training.activation_bytes * spec.seq_len / c.config.cp * c.config.micro_batch *
                             spec.hidden / (c.config.sequence_parallel ? c.config.tp : 1);
      // The CP ring's two key/value blocks (with their gradients) live only inside a layer's attention,
      // the last stage's message (the gradient it sends back) only after its backward: the two need
      // not meet, so at least the larger of them.
      double ring = c.config.cp > 1 ? 2.0 * 2.0 * 2.0 * training.activation_bytes * spec.seq_len / c.config.cp *
                                          c.config.micro_batch * spec.kv_dim() / c.config.tp
                                    : 0.0;
      // Zero-bubble keeps three more all-gathered copies under SP, inside a layer's B pass only: the same.
      if (c.config.schedule == Schedule::kZeroBubble && c.config.sequence_parallel)
        ring += 3.0 * training.activation_bytes * spec.seq_len / c.config.cp * c.config.micro_batch * spec.hidden;
      EXPECT_LE(buffers, 1.05 * expected.buffers_bytes) << where << "buffers";
      EXPECT_GE(buffers, 0.95 * (expected.buffers_bytes - expected.p2p_bytes - ring + std::max(ring, message)))
          << where << "buffers";
    }
    std::printf(
        "%-22s rank %d: activations %7.0f (model %7.0f)  buffers %7.0f (model %7.0f, p2p %5.0f)  workspace %6.0f "
        "(model %6.0f) = %4.1f %% of activations\n",
        c.name, rank["rank"].get<int>(), measured["activations"].get<double>() * (1 << 30), expected.activations_bytes,
        buffers, expected.buffers_bytes, expected.p2p_bytes, workspace, workspace_model,
        100.0 * workspace / expected.activations_bytes);
  }
}

class ExecMemoryModel : public ::testing::TestWithParam<Case> {};
TEST_P(ExecMemoryModel, MeasuredPeaksMatchEstimate) { check_against_memory_model(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Configs, ExecMemoryModel,
    ::testing::Values(
        Case{"SingleRank", 1, "", ParallelConfig{}},
        Case{"DP2_ZeRO1", 2, "--dp 2 --zero 1", ParallelConfig{.dp = 2, .zero = 1}},
        Case{"DP2_ZeRO2", 2, "--dp 2 --zero 2", ParallelConfig{.dp = 2, .zero = 2}},
        Case{"DP2_ZeRO3", 2, "--dp 2 --zero 3", ParallelConfig{.dp = 2, .zero = 3}},
        Case{"TP2", 2, "--tp 2", ParallelConfig{.tp = 2}},
        Case{"TP2_SP", 2, "--tp 2 --sp on", ParallelConfig{.tp = 2, .sequence_parallel = true}},
        Case{"PP2_1F1B", 2, "--pp 2", ParallelConfig{.pp = 2}},
        Case{"PP2_GPipe", 2, "--pp 2 --schedule gpipe", ParallelConfig{.pp = 2, .schedule = Schedule::kGPipe}},
        Case{"PP2_VPP2_Interleaved", 2, "--pp 2 --vpp 2 --schedule interleaved",
             ParallelConfig{.pp = 2, .vpp = 2, .schedule = Schedule::kInterleaved}},
        Case{"PP2_ZB", 2, "--pp 2 --schedule zb", ParallelConfig{.pp = 2, .schedule = Schedule::kZeroBubble}},
        Case{"PP4_ZB", 4, "--pp 4 --schedule zb", ParallelConfig{.pp = 4, .schedule = Schedule::kZeroBubble}},
        Case{"TP2xPP2_ZB_SP", 4, "--tp 2 --pp 2 --sp on --schedule zb",
             ParallelConfig{.tp = 2, .pp = 2, .sequence_parallel = true, .schedule = Schedule::kZeroBubble}},
        Case{"TP2xPP2_ZB", 4, "--tp 2 --pp 2 --schedule zb",
             ParallelConfig{.tp = 2, .pp = 2, .schedule = Schedule::kZeroBubble}},
        Case{"PP2_ZB_Selective_Dropout", 2, "--pp 2 --schedule zb --recompute selective",
             ParallelConfig{.pp = 2, .recompute = Recompute::kSelective, .schedule = Schedule::kZeroBubble},
             "micro_dropout"},
        Case{"PP2_ZB_Llama", 2, "--pp 2 --schedule zb", ParallelConfig{.pp = 2, .schedule = Schedule::kZeroBubble},
             "micro_llama"},
        // A dense first layer among MoE ones: each stage's own mix of layers.
        Case{"Moe_PP2", 2, "--pp 2", ParallelConfig{.pp = 2}, "micro_moe"},
        Case{"Moe_PP2_ZB", 2, "--pp 2 --schedule zb", ParallelConfig{.pp = 2, .schedule = Schedule::kZeroBubble},
             "micro_moe"},
        Case{"CP2xPP2_ZB", 4, "--cp 2 --pp 2 --schedule zb",
             ParallelConfig{.pp = 2, .schedule = Schedule::kZeroBubble, .cp = 2}},
        Case{"Selective", 1, "--recompute selective", ParallelConfig{.recompute = Recompute::kSelective}},
        Case{"TP2xPP2xDP2_ZeRO1", 8, "--tp 2 --pp 2 --dp 2 --zero 1",
             ParallelConfig{.tp = 2, .pp = 2, .dp = 2, .zero = 1}},
        // Dropout masks (1 byte per value) and the dropped softmax output.
        Case{"Dropout", 1, "", ParallelConfig{}, "micro_dropout"},
        Case{"Dropout_TP2_SP_PP2", 4, "--tp 2 --sp on --pp 2",
             ParallelConfig{.tp = 2, .pp = 2, .sequence_parallel = true}, "micro_dropout"},
        // The softmax output rebuilt in the backward, with its dropout mask and output.
        Case{"Dropout_Selective", 1, "--recompute selective", ParallelConfig{.recompute = Recompute::kSelective},
             "micro_dropout"},
        // Middle stages: activations sent on, gradients received and sent back.
        Case{"PP4", 4, "--pp 4", ParallelConfig{.pp = 4}},
        // SwiGLU, GQA, untied head: the layer's backward holds the most.
        Case{"Llama_DP2_ZeRO3", 2, "--dp 2 --zero 3", ParallelConfig{.dp = 2, .zero = 3}, "micro_llama"},
        // Heads wider in all than hidden (head_dim 12 × 4 heads on hidden 32).
        Case{"HeadDim_TP2_SP", 2, "--tp 2 --sp on", ParallelConfig{.tp = 2, .sequence_parallel = true},
             "micro_headdim"},
        // A vocabulary larger than a layer: the embedding's forward (stage 0) and the
        // untied head's backward (stage 1) gather and reduce the most.
        Case{"WideVocab_PP2xDP2_ZeRO3", 4, "--pp 2 --dp 2 --zero 3", ParallelConfig{.pp = 2, .dp = 2, .zero = 3},
             "micro_wide_vocab"},
        // Mixture of experts on one rank and under TP with SP: each token's k dispatched
        // copies and the experts' activations, whatever the routing.
        Case{"Moe", 1, "", ParallelConfig{}, "micro_moe"},
        Case{"Moe_TP2_SP", 2, "--tp 2 --sp on", ParallelConfig{.tp = 2, .sequence_parallel = true}, "micro_moe"},
        Case{"Moe_DP2_ZeRO3", 2, "--dp 2 --zero 3", ParallelConfig{.dp = 2, .zero = 3}, "micro_moe"},
        Case{"Moe_DP4_EP2_ZeRO1", 4, "--dp 4 --ep 2 --zero 1", ParallelConfig{.dp = 4, .zero = 1, .ep = 2},
             "micro_moe"},
        // Expert TP 1: each TP rank routes its own rows to whole experts, EP folded over the TP ranks.
        Case{"Moe_TP2_ETP1_SP", 2, "--tp 2 --sp on --etp 1",
             ParallelConfig{.tp = 2, .sequence_parallel = true, .etp = 1}, "micro_moe"},
        Case{"Moe_TP2xDP2_ETP1_EP4_ZeRO2", 4, "--tp 2 --dp 2 --sp on --etp 1 --ep 4 --zero 2",
             ParallelConfig{.tp = 2, .dp = 2, .zero = 2, .sequence_parallel = true, .ep = 4, .etp = 1}, "micro_moe"},
        // Qwen2-MoE's shape: a sigmoid-gated shared expert, MoE on every other layer.
        Case{"GatedMoe", 1, "", ParallelConfig{}, "micro_moe_gated"},
        Case{"GatedMoe_TP2_SP_ZeRO3", 4, "--tp 2 --dp 2 --sp on --zero 3",
             ParallelConfig{.tp = 2, .dp = 2, .zero = 3, .sequence_parallel = true}, "micro_moe_gated"},
        // --attention flash without context parallelism: the output and its log-sum-exp, no probabilities
        // (with dropout: no masks either, they are redrawn), also under TP with SP and selective recompute.
        Case{"Flash", 1, "--attention flash", ParallelConfig{}},
        Case{"Flash_Dropout_TP2_SP_Selective", 2, "--attention flash --tp 2 --sp on --recompute selective",
             ParallelConfig{.tp = 2, .recompute = Recompute::kSelective, .sequence_parallel = true}, "micro_dropout"},
        Case{"Flash_PP2_Llama", 2, "--attention flash --pp 2", ParallelConfig{.pp = 2}, "micro_llama"},
        // Context parallelism (ring): s/cp tokens' activations, the log-sum-exp of s/cp query rows, two
        // key/value blocks in flight (with their gradients in the backward), ZeRO over dp·cp.
        Case{"CP2", 2, "--cp 2", ParallelConfig{.cp = 2}},
        Case{"CP2_Dropout", 2, "--cp 2", ParallelConfig{.cp = 2}, "micro_dropout"},
        Case{"CP2xDP2_ZeRO3", 4, "--cp 2 --dp 2 --zero 3", ParallelConfig{.dp = 2, .zero = 3, .cp = 2}},
        Case{"CP2xPP2_Llama", 4, "--cp 2 --pp 2", ParallelConfig{.pp = 2, .cp = 2}, "micro_llama"},
        // HSDP over dp·cp: ZeRO-3 shards over groups of 2 dp ranks' 4 dp·cp ranks.
        Case{"CP2xDP4_HSDP2", 8, "--cp 2 --dp 4 --zero 3 --shard-group 2",
             ParallelConfig{.dp = 4, .zero = 3, .shard_group = 2, .cp = 2}},
        // cp_comm all_gather: every rank's K and V, and in the backward their gradients beside them.
        Case{"CP4_AllGather", 4, "--cp 4 --cp-comm all_gather",
             ParallelConfig{.cp = 4, .cp_comm = CpComm::kAllGather}}),
    [](const auto& info) { return std::string(info.param.name); });

// Full recomputation: the recomputed layer's working set and the last stage's head activations
// (final-norm input, LM head input, logits) never coexist — the head's backward frees its own
// before any layer is recomputed — so the memory model counts the larger of the two.
class ExecMemoryModelFullRecompute : public ::testing::TestWithParam<Case> {};
TEST_P(ExecMemoryModelFullRecompute, MeasuredPeaksMatchEstimate) { check_against_memory_model(GetParam()); }
INSTANTIATE_TEST_SUITE_P(
    Configs, ExecMemoryModelFullRecompute,
    ::testing::Values(Case{"Full", 1, "--recompute full", ParallelConfig{.recompute = Recompute::kFull}},
                      Case{"PP2_ZB_Full", 2, "--pp 2 --schedule zb --recompute full",
                           ParallelConfig{.pp = 2, .recompute = Recompute::kFull, .schedule = Schedule::kZeroBubble}}),
    [](const auto& info) { return std::string(info.param.name); });

// Op-level SAC (torchtitan): each layer keeps its input, the outputs of the linear layers the policy saves
// (LLaMA: wq, wv, w1 and w2's partial sums; with a QKV bias wo and w3; GPT: none), attention's output and
// log-sum-exp, and under SP both reduce-scatters' outputs; the backward rebuilds one layer at a time, and
// what that layer kept is counted once beside its working set (counted twice, activations came out 2–4 %
// high). The forward's MLP peak holds its norm's statistics; a zero-bubble B pass rebuilds the layer
// from what it kept, without that forward peak (counted with it, the model was 0.7–1.2 % high).
class ExecMemoryModelOpRecompute : public ::testing::TestWithParam<Case> {};
TEST_P(ExecMemoryModelOpRecompute, MeasuredPeaksMatchEstimate) { check_against_memory_model(GetParam()); }
INSTANTIATE_TEST_SUITE_P(
    Configs, ExecMemoryModelOpRecompute,
    ::testing::Values(Case{"Op_Llama", 1, "--attention flash --recompute op",
                           ParallelConfig{.recompute = Recompute::kOp}, "micro_llama"},
                      Case{"Op_Llama_TP2_SP", 2, "--attention flash --recompute op --tp 2 --sp on",
                           ParallelConfig{.tp = 2, .recompute = Recompute::kOp, .sequence_parallel = true},
                           "micro_llama"},
                      Case{"Op_Llama_PP2", 2, "--attention flash --recompute op --pp 2",
                           ParallelConfig{.pp = 2, .recompute = Recompute::kOp}, "micro_llama"},
                      Case{"Op_Llama_PP2_ZB", 2, "--attention flash --recompute op --pp 2 --schedule zb",
                           ParallelConfig{.pp = 2, .recompute = Recompute::kOp, .schedule = Schedule::kZeroBubble},
                           "micro_llama"},
                      Case{"Op_QkvBias", 1, "--attention flash --recompute op",
                           ParallelConfig{.recompute = Recompute::kOp}, "micro_qwen"},
                      Case{"Op_TP2_SP", 2, "--attention flash --recompute op --tp 2 --sp on",
                           ParallelConfig{.tp = 2, .recompute = Recompute::kOp, .sequence_parallel = true}, "micro"}),
    [](const auto& info) { return std::string(info.param.name); });

// QK-norm: each layer keeps Q and K before their norm and its 1/rms per head and token (per token over
// the full width), beside Q, K and V after it; the norm's output is a transient of the QKV op. Op-level
// SAC keeps neither (the norm re-runs from the kept QKV columns).
class ExecMemoryModelQkNorm : public ::testing::TestWithParam<Case> {};
TEST_P(ExecMemoryModelQkNorm, MeasuredPeaksMatchEstimate) { check_against_memory_model(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Configs, ExecMemoryModelQkNorm,
                         ::testing::Values(Case{"PerHead", 1, "", ParallelConfig{}, "micro_qwen3"},
                                           Case{"PerHead_TP2", 2, "--tp 2", ParallelConfig{.tp = 2}, "micro_qwen3"},
                                           Case{"PerHead_PP2_Selective", 2, "--pp 2 --recompute selective",
                                                ParallelConfig{.pp = 2, .recompute = Recompute::kSelective},
                                                "micro_qwen3"},
                                           Case{"PerHead_Op", 1, "--attention flash --recompute op",
                                                ParallelConfig{.recompute = Recompute::kOp}, "micro_qwen3"},
                                           Case{"FullWidth", 1, "", ParallelConfig{}, "micro_olmo2"},
                                           Case{"FullWidth_Full", 1, "--recompute full",
                                                ParallelConfig{.recompute = Recompute::kFull}, "micro_olmo2"}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace loom::exec::testing
