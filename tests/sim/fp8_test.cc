// FP8 (--precision fp8): the simulator's FP8 GEMMs and casts against TransformerEngine's published
// GEMM benchmark, and the memory model's FP8 weight copies and FP8-saved activations.
#include <gtest/gtest.h>

#include <string>

#include "core/partition.h"
#include "core/presets.h"
#include "planner/memory_model.h"
#include "sim/cost_model.h"
#include "sim/simulator.h"

namespace loom::sim {
namespace {

ClusterSpec cluster(const char* name) {
  auto c = cluster_preset(name);
  EXPECT_TRUE(c.ok()) << name;
  return *c;
}

// The GPT 5B of TransformerEngine's FP8 benchmark (speedups.rst): hidden 4096, ffn 16384, 32 heads.
ModelSpec te_5b() {
  ModelSpec m;
  m.name = "te-5b";
  m.layers = 24;
  m.hidden = 4096;
  m.heads = 32;
  m.kv_heads = 32;
  m.ffn_hidden = 16384;
  m.vocab = 50304;
  m.seq_len = 2048;
  m.activation = Activation::kGelu;
  m.dropout = false;
  return m;
}

bool linear_or_cast(const std::string& name) {
  for (const char* gemm : {"qkv", "attn_out", "mlp_up", "mlp_down"})
    if (name.starts_with(gemm)) return true;
  return name.starts_with("fp8_cast");
}

// Seconds of one layer's linear GEMMs (forward, input and weight gradients) and FP8 casts.
double linear_layer_s(const TrainingSpec& t, const ClusterSpec& c) {
  const ModelSpec m = te_5b();
  ParallelConfig config{.micro_batch = 4};
  const CollectiveModel collectives(c);
  CostModel cost(m, t, config, c, collectives);
  // A middle chunk (neither embedding nor head): pp 1 holds both, so take one layer's passes.
  const ChunkCost chunk = cost.chunk(0, 0, false);
  double s = 0;
  for (const PassCost* p : {&chunk.forward, &chunk.backward})
    for (const Segment& seg : p->segments)
      if (linear_or_cast(seg.name)) s += seg.seconds;
  return s / m.layers;
}

TrainingSpec training(Precision p, Fp8Recipe r = Fp8Recipe::kDelayed) {
  TrainingSpec t{.gpus = 1, .global_batch = 4, .seq_len = 2048};
  t.precision = p;
  t.fp8_recipe = r;
  return t;
}

// TransformerEngine's benchmark of the 5B model's linear layers on an H200, casts included (autocast):
// delayed scaling 1.69x, current scaling 1.57x over bf16 (speedups.rst). dgx-h200.json's FP8 ceiling
// comes from the same page's pre-quantised figure (1.92x, no casts), so the casts, which Loom costs
// from bytes and bandwidth alone, are what this checks: within 10 % of each published speedup, and
// current scaling (one more read per cast) slower than delayed.
TEST(Fp8, LinearLayerSpeedupsMatchTransformerEnginesH200Benchmark) {
  const ClusterSpec h200 = cluster("dgx-h200");
  const double bf16 = linear_layer_s(training(Precision::kBf16), h200);
  const double delayed = bf16 / linear_layer_s(training(Precision::kFp8, Fp8Recipe::kDelayed), h200);
  const double current = bf16 / linear_layer_s(training(Precision::kFp8, Fp8Recipe::kTensorwise), h200);
  EXPECT_NEAR(delayed, 1.69, 0.169) << "delayed scaling";
  EXPECT_NEAR(current, 1.57, 0.157) << "current scaling";
  EXPECT_LT(current, delayed);
}

// torchao's rowwise recipe: its GEMMs run at the cost file's rowwise ceiling (here set to half the
// tensorwise one: a compute-bound GEMM takes twice as long, less the launch), and each tensor is cast
// twice, a scale per row and per column, each pass reading it for the amaxes and to cast and writing
// one FP8 copy: 2 · (2 + 2 + 1) bytes per bf16 value.
TEST(Fp8, RowwiseRunsAtItsOwnCeilingAndCastsEachTensorTwice) {
  ClusterSpec h100 = cluster("dgx-h100");
  h100.compute.gemm_fp8_rowwise_max_efficiency = 0.5 * h100.compute.gemm_fp8_max_efficiency;
  const ModelSpec m = te_5b();
  const ParallelConfig config{.micro_batch = 4};
  const CollectiveModel collectives(h100);
  const CostModel tensorwise(m, training(Precision::kFp8, Fp8Recipe::kTensorwise), config, h100, collectives);
  const CostModel rowwise(m, training(Precision::kFp8, Fp8Recipe::kRowwise), config, h100, collectives);
  const ChunkCost a = tensorwise.chunk(0, 0, false), b = rowwise.chunk(0, 0, false);
  auto first = [](const PassCost& p, const std::string& name) {
    for (const Segment& seg : p.segments)
      if (seg.name == name) return seg.seconds;
    ADD_FAILURE() << name;
    return 0.0;
  };
  const double launch = h100.compute.kernel_launch_s;
  EXPECT_NEAR(first(b.forward, "mlp_up") - launch, 2.0 * (first(a.forward, "mlp_up") - launch), 1e-12);
  const double elements = 4.0 * 2048 * 4096;  // the first cast: the norm's output, 4 sequences of 2048
  EXPECT_NEAR(first(b.forward, "fp8_cast"), rowwise.memory_s("fp8_cast", elements * 2.0 * (2 + 2 + 1)), 1e-15);
  EXPECT_NEAR(first(a.forward, "fp8_cast"), tensorwise.memory_s("fp8_cast", elements * (2 + 1 + 1 + 2)), 1e-15);
  // Two FP8 copies of each weight, as the Hopper transposes are for tensorwise.
  const MemoryReport rows = estimate_memory(m, training(Precision::kFp8, Fp8Recipe::kRowwise), config, h100);
  const MemoryReport tens = estimate_memory(m, training(Precision::kFp8, Fp8Recipe::kTensorwise), config, h100);
  EXPECT_DOUBLE_EQ(rows.most_loaded().params_bytes, tens.most_loaded().params_bytes);
  // On Blackwell, which reads either layout, tensorwise keeps one copy and rowwise still two.
  const ClusterSpec b200 = cluster("dgx-b200");
  ASSERT_FALSE(b200.device.fp8_gemm_tn_only);
  const double one =
      estimate_memory(m, training(Precision::kFp8, Fp8Recipe::kTensorwise), config, b200).most_loaded().params_bytes;
  const double two =
      estimate_memory(m, training(Precision::kFp8, Fp8Recipe::kRowwise), config, b200).most_loaded().params_bytes;
  const double bf16 = estimate_memory(m, training(Precision::kBf16), config, b200).most_loaded().params_bytes;
  EXPECT_GT(one, bf16);
  EXPECT_NEAR(two - bf16, 2.0 * (one - bf16), 1e-6 * two);
}

// Attention, norms and the LM head stay bf16: only the linear layers' GEMMs and the casts differ.
TEST(Fp8, OnlyLinearLayersChange) {
  const ClusterSpec h100 = cluster("dgx-h100");
  const ModelSpec m = te_5b();
  ParallelConfig config{.micro_batch = 2};
  const CollectiveModel collectives(h100);
  const ChunkCost bf16 = CostModel(m, training(Precision::kBf16), config, h100, collectives).chunk(0, 0, false);
  const ChunkCost fp8 = CostModel(m, training(Precision::kFp8), config, h100, collectives).chunk(0, 0, false);
  auto total = [](const PassCost& p, bool linear) {
    double s = 0;
    for (const Segment& seg : p.segments)
      if (linear_or_cast(seg.name) == linear) s += seg.seconds;
    return s;
  };
  EXPECT_DOUBLE_EQ(total(bf16.forward, false), total(fp8.forward, false));
  EXPECT_DOUBLE_EQ(total(bf16.backward, false), total(fp8.backward, false));
  EXPECT_LT(total(fp8.forward, true), total(bf16.forward, true));
  EXPECT_LT(total(fp8.backward, true), total(bf16.backward, true));
}

// A cluster without FP8 tensor cores cannot run FP8 GEMMs: the cost model keeps bf16 (the spec
// readers refuse --precision fp8 there before it gets this far).
TEST(Fp8, NoFp8PeakMeansNoFp8Gemms) {
  const ClusterSpec a100 = cluster("dgx-a100-80gb");
  ASSERT_EQ(a100.device.peak_fp8_flops, 0.0);
  const ModelSpec m = te_5b();
  const CollectiveModel collectives(a100);
  ParallelConfig config;
  EXPECT_DOUBLE_EQ(CostModel(m, training(Precision::kFp8), config, a100, collectives).linear_gemm_s(8192, 4096, 4096),
                   CostModel(m, training(Precision::kBf16), config, a100, collectives).linear_gemm_s(8192, 4096, 4096));
}

// Memory: TransformerEngine keeps the bf16 weights and adds FP8 copies (and on Hopper their
// transposes), while the linear layers' saved inputs shrink to one byte. For Llama 3 70B at TP 8,
// PP 4 (the published NeMo layout) the weights win: FP8 needs more memory than bf16, as TE's issues
// report, and the difference is exactly the copies minus the smaller saved inputs.
TEST(Fp8, WeightCopiesOutweighSmallerSavedInputsOnHopper) {
  const ClusterSpec h100 = cluster("dgx-h100");
  auto model = model_preset("llama3-70b");
  ASSERT_TRUE(model.ok());
  const ModelSpec& m = *model;
  ParallelConfig c{.tp = 4, .pp = 4, .dp = 4, .zero = 1, .micro_batch = 1, .sequence_parallel = true};
  TrainingSpec bf16{.gpus = 64, .global_batch = 128, .seq_len = 4096};
  TrainingSpec fp8 = bf16;
  fp8.precision = Precision::kFp8;
  const MemoryReport a = estimate_memory(m, bf16, c, h100);
  const MemoryReport b = estimate_memory(m, fp8, c, h100);
  const StageMemory& sa = a.stages[0];
  const StageMemory& sb = b.stages[0];
  // Two bytes per layer parameter: the FP8 weight and its transpose.
  const double layer_params = layer_params_per_tp_rank(m, c.tp) * sa.layers;
  EXPECT_DOUBLE_EQ(sb.params_bytes - sa.params_bytes, 2.0 * layer_params);
  // Saved inputs of the four linear layers at one byte instead of two, per token: the two norm
  // outputs (h each, split over TP by SP), the attention output and the MLP's activation output (over TP).
  const double tokens = 4096.0 * c.micro_batch;
  const double per_layer = tokens * (2.0 * m.hidden / c.tp + static_cast<double>(m.q_dim()) / c.tp +
                                     static_cast<double>(m.ffn_hidden) / c.tp);
  EXPECT_DOUBLE_EQ(sa.activation_bytes_per_layer - sb.activation_bytes_per_layer, per_layer);
  EXPECT_GT(b.most_loaded_total_bytes(), a.most_loaded_total_bytes());
  // Blackwell needs no transposes: one byte per layer parameter.
  const ClusterSpec b200 = cluster("dgx-b200");
  EXPECT_DOUBLE_EQ(estimate_memory(m, fp8, c, b200).stages[0].params_bytes -
                       estimate_memory(m, bf16, c, b200).stages[0].params_bytes,
                   layer_params);
}

// The step: FP8 is faster for a GEMM-bound layout, and the weights' cast lands in the optimizer step.
TEST(Fp8, StepIsFasterAndStillReportsMfuAgainstTheBf16Peak) {
  const ClusterSpec h100 = cluster("dgx-h100");
  auto model = model_preset("llama3-8b");
  ASSERT_TRUE(model.ok());
  ParallelConfig c{.tp = 1, .pp = 1, .dp = 8, .zero = 1, .micro_batch = 1};
  TrainingSpec bf16{.gpus = 8, .global_batch = 64, .seq_len = 8192};
  TrainingSpec fp8 = bf16;
  fp8.precision = Precision::kFp8;
  auto a = simulate(*model, bf16, c, h100);
  auto b = simulate(*model, fp8, c, h100);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_LT(b->step_time_s, a->step_time_s);
  EXPECT_DOUBLE_EQ(a->model_flops, b->model_flops);
  EXPECT_NEAR(b->mfu / a->mfu, a->step_time_s / b->step_time_s, 1e-9);
}

}  // namespace
}  // namespace loom::sim
