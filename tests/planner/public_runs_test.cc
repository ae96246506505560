// The published H100/H200/B200 runs of ../shared/validation/h100_public.json, simulated row by row
// (`loom validate --public-runs` prints the same table). The rows were not used to set any figure.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "planner/public_runs.h"

namespace loom {
namespace {

const std::string kFile = std::string(LOOM_VALIDATION_DIR) + "/h100_public.json";

std::vector<PublicRun> runs() {
  auto r = reproduce_public_runs(kFile);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : std::vector<PublicRun>{};
}

// Every row is read; a row is refused only for a feature Loom does not model yet, named. The
// long-sequence table publishes TFLOP/s without a micro-batch or a step time: its rows run the fastest
// micro-batch that fits, and are not scored; two of its B200 rows, whose 8 and 4 sequences do not split
// over the 16 DP ranks their GPU count implies, are read with the DP the table prints (4), said in a note.
TEST(PublicRuns, EveryRowIsSimulatedOrRefusedForANamedMissingFeature) {
  const auto all = runs();
  ASSERT_EQ(all.size(), 96u);
  const std::string rowwise =
      "rowwise-scaled FP8 GEMMs (torchao float8 rowwise): dgx-h100 has no measured rowwise GEMM figure "
      "(bench/gpu/fp8_gemm.py)";
  std::map<std::string, int> refused;
  int simulated = 0, chosen_micro_batch = 0, inconsistent = 0;
  for (const PublicRun& r : all) {
    if (r.simulated()) {
      ++simulated;
      EXPECT_GT(r.predicted_s, 0) << r.id;
      EXPECT_GT(r.predicted_tflops, 0) << r.id;
      if (!r.micro_batch_note.empty()) {
        ++chosen_micro_batch;
        EXPECT_EQ(r.micro_batch_note, "micro-batch not published: the fastest that fits") << r.id;
        EXPECT_GT(r.published_tflops, 0) << r.id;
        EXPECT_FALSE(r.scored()) << r.id;
      }
      if (!r.config_note.empty()) {
        // NeMo's long-sequence B200 rows at 512K and 1M tokens: 8 and 4 sequences, printed DP 4.
        ++inconsistent;
        EXPECT_TRUE(r.id.starts_with("nemo-longseq")) << r.id;
        EXPECT_EQ(r.config.dp, 4) << r.id;
        EXPECT_EQ(r.training.gpus, r.config.tp * r.config.cp * 4) << r.id;
        EXPECT_NE(r.config_note.find("read with the printed dp 4"), std::string::npos) << r.config_note;
        EXPECT_FALSE(r.scored()) << r.id;
      }
    } else {
      ++refused[r.refused];
      EXPECT_EQ(r.refused, rowwise) << r.id;
    }
  }
  // FP8 (delayed, current and rowwise scaling), context parallelism, uneven stages, FSDP and interleaving
  // are modelled: no row is refused. torchao's rowwise FP8 (4 rows) was, until bench/gpu/fp8_gemm.py
  // measured its GEMM ceiling on an H200 (2026-11-28).
  EXPECT_EQ(refused[rowwise], 0);
  EXPECT_EQ(inconsistent, 2);
  EXPECT_EQ(chosen_micro_batch, 17);
  EXPECT_EQ(simulated, 96);
}

// The report of errors per source and overall, printed to the log and bounded from above.
TEST(PublicRuns, StepTimeErrorPerSource) {
  const auto all = runs();
  for (const PublicRun& r : all)
    if (r.scored())
      std::printf("%-40s %-9s %-4s published %8.3f s predicted %8.3f s  %+6.1f %%\n", r.id.c_str(), r.cluster.c_str(),
                  to_string(r.training.precision), r.published_s, r.predicted_s, 100.0 * r.error());
  const auto summaries = summarize(all);
  for (const auto& s : summaries)
    std::printf("%s: %d rows, %d simulated, %d scored, mean |error| %.1f %%, max %.1f %%, mean %+.1f %%\n",
                s.source.empty() ? "all" : s.source.c_str(), s.rows, s.simulated, s.scored, 100 * s.mean_abs_error,
                100 * s.max_abs_error, 100 * s.mean_error);
  const PublicRunsSummary& overall = summaries.back();
  EXPECT_EQ(overall.scored, 79);

  // Megatron-core's runs (NeMo, Megatron-Bridge: 46 rows) meet the mean bar (<= 8 %); their
  // max, 18 % on one NeMo-Launcher row, does not meet its 15 %. The PyTorch-native FSDP runs
  // (torchtitan, NeMo AutoModel) come out 17-57 % too fast: a cost of FSDP as those frameworks run it
  // that Loom lacks. Below the bar, the bounds are the figures measured when these tests were written
  // (Megatron-core 6.3 % / 18.1 %, all rows 18.1 % / 56.5 %), a ratchet: a change that makes the
  // simulator less accurate on these runs fails here. Costing groups across nodes as NCCL does
  // (sim/nccl_tuning.h: one ring at the node's NIC bandwidth, 192 GB/s on DGX A100 as NVIDIA
  // measured, where the two-level composition gave about 126) left the Megatron-core mean at 6.3 %
  // and moved its worst row, launcher2406-Nemotron-8B-64, from −18.1 to −18.7 %.
  // The torchtitan rows under their --framework preset (fp32 gradient reduction, TP collectives on
  // the compute stream except in the async-TP rows) moved 0.5–3 points closer; all rows 17.7 %.
  // Their "selective (op-level SAC)" as torchtitan's policy (core/op_recompute.h: wk, wo and w3
  // re-run in the backward with the element-wise ops) instead of Megatron's attention-core recompute,
  // which flash attention makes free: those 12 rows 6.5-10 points closer, all rows 16.4 %.
  // RoPE charged as a kernel of its own (fused: one read and write of Q and K), and torchtitan's two
  // eager rows with eager PyTorch's element-wise kernels (9.5 and 9.1 points closer): all rows 15.9 %.
  // FSDP2's fp32 shards, the loss's peak and ZeRO-3 gathered through a pipeline: 15.8 %. NeMo AutoModel's
  // row, which publishes no recompute and needs 111 GiB without one, with full recompute (below): -31.7 ->
  // -9.7 %, all rows 15.5 %.
  // torchtitan's rows with the attention kernel their PyTorch ran, FlashAttention-2's (--flash-kernel fa2,
  // core/framework.cc; its curve measured on an H100 and an H200: about half of cuDNN's rate): those 28
  // rows from 31.3 to 16.0 % mean |error| (the rows of 8K-token sequences 6-14 points closer, the 32K-262K
  // ones 18-36), the two H200 rows, the only ones on GPUs without a power cap, within 2 %: all rows 9.8 %,
  // max 27.1 %.
  // torchtitan's CP as PyTorch's ring attention (fp32 merges and key/value gradients): the CP rows 0.8-1.7
  // points slower. DTensor's sequence-parallel collectives copying their [b, s, h] tensor, and async TP
  // read from the 2024-12 tables' "AsyncTP" too (it had been missed there: T4's async row and T5, T6 ran as
  // vanilla TP): all rows 9.5 %, max 23.2 %.
  // Op-level SAC's recompute ending at w2 (torch.utils.checkpoint's early stop): its final residual add
  // no longer charged again, the op-level rows up to 0.4 points faster (they were already too fast):
  // all rows 9.5 %, max 23.4 %.
  // torchao's rowwise FP8 rows (torchtitan's async-TP table, 8B and 70B on TP 8), refused until then,
  // simulated with the rowwise GEMM ceiling measured on an H200 (profiles/dgx-h100.json) and torchtitan's
  // bf16 TP all-gather under that recipe (the whole gathered sequence cast on each TP rank): -26 to -38 %
  // where their bf16 siblings are -14 to -23 %. The runs measured rowwise FP8 slower than bf16 (3.31 against
  // 2.81 s for the 8B); Loom has them level. All 79 scored rows 10.7 %, max 37.8 %.
  // FSDP2's copies through its all-gather and reduce-scatter buffers (TrainingSpec::zero3_collective_copies):
  // the FSDP rows without TP about 1 point slower, closer: all rows 10.6 %, max 37.7 %.
  // Megatron-core's vocabulary-parallel cross-entropy charged as its kernels run (TrainingSpec::loss_kernel:
  // the upcast and five in-place passes forward, the multiply and the cast back backward, 38 and 14 bytes a
  // bf16 logit where 10 and 6 had been charged): the NeMo tables 0.6-1.5 points closer on their means, the
  // Megatron-Bridge rows further (mean +0.8 -> +2.0 %, max 6.7 -> 8.7 %): all rows 10.3 %, max 37.7 %.
  std::vector<PublicRun> megatron;
  for (const PublicRun& r : all)
    if (r.source.find("torchtitan") == std::string::npos && r.source.find("AutoModel") == std::string::npos)
      megatron.push_back(r);
  const PublicRunsSummary m = summarize(megatron).back();
  std::printf("Megatron-core rows: %d scored, mean |error| %.1f %%, max %.1f %%\n", m.scored, 100 * m.mean_abs_error,
              100 * m.max_abs_error);
  EXPECT_EQ(m.scored, 46);
  EXPECT_LE(m.mean_abs_error, 0.08);
  EXPECT_LE(m.max_abs_error, 0.19);
  EXPECT_LE(overall.mean_abs_error, 0.104);
  EXPECT_LE(overall.max_abs_error, 0.378);
}

// torchtitan's benchmark measured the same runs eager and compiled (its Tables 1 and 3: FSDP on 8 and on
// 128 H100s, the same batch): compiling each TransformerBlock fused its element-wise ops and took 13.6 and
// 14.0 % off the step. Loom derives the eager step from the ATen kernels the model's RMSNorm, RoPE,
// repeat_kv and SwiGLU run (sim/cost_model.cc, nothing taken from these rows): its eager/compiled ratio
// must match the measured one within a few % of the compiled step, whatever the absolute error of both rows.
// Since the rows run FlashAttention-2 (--flash-kernel fa2), attention, the same in both, is a larger
// share of the step and Loom's ratio fell from 1.146 / 1.147 to 1.127 / 1.128 (its eager cost is unchanged:
// 0.26 s a step, where the rows differ by 0.39 and 0.41 s); the bound is 4 % until the rest is found.
TEST(PublicRuns, EagerAgainstCompiledTorchtitanMatchesTheMeasuredRatio) {
  const auto all = runs();
  std::map<std::string, const PublicRun*> by_id;
  for (const PublicRun& r : all) by_id[r.id] = &r;
  for (const char* table : {"tt2412-T1", "tt2412-T3"}) {
    const PublicRun* eager = by_id[std::string(table) + "-FSDP"];
    const PublicRun* compiled = by_id[std::string(table) + "-FSDP + torch.compile"];
    ASSERT_TRUE(eager && compiled && eager->scored() && compiled->scored()) << table;
    EXPECT_EQ(eager->training.elementwise, Elementwise::kEager) << table;
    EXPECT_EQ(compiled->training.elementwise, Elementwise::kFused) << table;
    const double measured = eager->published_s / compiled->published_s;
    const double predicted = eager->predicted_s / compiled->predicted_s;
    std::printf("%s eager / compiled: measured %.3f, Loom %.3f\n", table, measured, predicted);
    EXPECT_GT(measured, 1.1);
    EXPECT_NEAR(predicted, measured, 0.04) << table;
  }
}

// Peak memory where a row publishes it (torchtitan's logs: the caching allocator's max reserved).
// Without a pipeline: the FSDP rows on 8 and 128 GPUs, with and without CP, and the 2D rows. Their
// cross-entropy on an fp32 copy of 128K-vocabulary logits is what most of them hold at the peak
// (core/framework.h, 12 bytes per logit eager; 4 where the 2025 runs compiled the loss): before it
// was counted the FSDP rows came out 16-39 % low. FSDP2's shards are the fp32 masters (no bf16 copy,
// 2 bytes a parameter less over the shards), which brought the compiled rows closer and left the
// others further below: Loom counts allocated bytes, torchtitan reports the allocator's reserved ones.
// What remains (figures when this test was written): the 2D rows (TP 8) 14-19 % low, which Loom does
// not yet explain; a change that makes these worse fails here.
TEST(PublicRuns, PeakMemoryWherePublished) {
  const auto all = runs();
  int fsdp_rows = 0, rows = 0;
  double worst_fsdp = 0, sum = 0, worst = 0;
  for (const PublicRun& r : all) {
    if (!r.memory_scored() || r.config.pp > 1) continue;
    std::printf("%-40s predicted %5.1f GiB published %5.1f GiB  %+5.1f %%\n", r.id.c_str(), r.predicted_peak_gib,
                r.published_peak_gib, 100.0 * r.memory_error());
    ++rows;
    sum += std::abs(r.memory_error());
    worst = std::max(worst, std::abs(r.memory_error()));
    if (r.config.tp == 1) {
      ++fsdp_rows;
      worst_fsdp = std::max(worst_fsdp, std::abs(r.memory_error()));
    }
  }
  EXPECT_EQ(rows, 14);
  EXPECT_EQ(fsdp_rows, 12);
  // Worst: the two eager rows, whose eager temporaries Loom does not count (-6.9 and -6.6 %).
  EXPECT_LE(worst_fsdp, 0.07);
  EXPECT_LE(sum / rows, 0.055);
  EXPECT_LE(worst, 0.20);
  // The pipelined rows (PP 8 with FSDP 8 and TP 8): each stage kept gathered, its gradients accumulated
  // unsharded in fp32 (core/framework.h); before that they came out about half the measured peak.
  int pipelined = 0;
  double pipelined_sum = 0, pipelined_worst = 0;
  for (const PublicRun& r : all) {
    if (!r.memory_scored() || r.config.pp == 1) continue;
    std::printf("%-40s predicted %5.1f GiB published %5.1f GiB  %+5.1f %%\n", r.id.c_str(), r.predicted_peak_gib,
                r.published_peak_gib, 100.0 * r.memory_error());
    ++pipelined;
    pipelined_sum += std::abs(r.memory_error());
    pipelined_worst = std::max(pipelined_worst, std::abs(r.memory_error()));
  }
  EXPECT_EQ(pipelined, 6);
  EXPECT_LE(pipelined_sum / pipelined, 0.10);
  EXPECT_LE(pipelined_worst, 0.18);
}

// A row that publishes no recompute ran without one unless Loom's memory for it exceeds the GPU by more
// than Loom's worst memory error on the rows that publish their peak (19.4 %, torchtitan's 2D rows): a
// row that ran fit. Only NeMo AutoModel's Llama 3 70B (FSDP2 x CP2, micro-batch 1, 8K) is that far over,
// 111 GiB without recompute on 80 GiB GPUs: it takes full recompute, the fastest that fits (selective
// saves nothing beside flash attention). Nemotron-4 340B at 85 GiB is within the error and stays without.
TEST(PublicRuns, AnUnpublishedRecomputeIsInferredOnlyBeyondTheMemoryModelsError) {
  const auto all = runs();
  double tolerance = 0;
  for (const PublicRun& r : all)
    if (r.memory_scored()) tolerance = std::max(tolerance, std::abs(r.memory_error()));
  EXPECT_GT(tolerance, 0.15);
  EXPECT_LT(tolerance, 0.25);
  int inferred = 0;
  for (const PublicRun& r : all) {
    if (!r.simulated()) continue;
    if (r.recompute_note.empty()) {
      // Without a note: the row's own recompute, or none where it publishes none and that was not ruled out.
      if (!r.recompute_published) {
        EXPECT_EQ(r.config.recompute, Recompute::kNone) << r.id;
      }
      continue;
    }
    ++inferred;
    EXPECT_FALSE(r.recompute_published) << r.id;
    EXPECT_EQ(r.id, "automodel-llama3-70b-64");
    EXPECT_EQ(r.config.recompute, Recompute::kFull) << r.id;
    EXPECT_LE(r.predicted_peak_gib, 80.0) << r.id;
    EXPECT_NE(r.recompute_note.find("none does not fit in 80 GiB, full is the fastest that fits"), std::string::npos)
        << r.recompute_note;
  }
  EXPECT_EQ(inferred, 1);
  const auto nemotron =
      std::find_if(all.begin(), all.end(), [](const PublicRun& r) { return r.id == "nemo2407-Nemotron-340B-128"; });
  ASSERT_NE(nemotron, all.end());
  EXPECT_GT(nemotron->predicted_peak_gib, 80.0);  // over, but within the tolerance
  EXPECT_EQ(nemotron->config.recompute, Recompute::kNone);
}

}  // namespace
}  // namespace loom
