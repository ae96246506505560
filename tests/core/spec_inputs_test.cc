// core/spec_inputs.h: the spec inputs of every command resolved below the CLI, with the flag named
// in every error.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>

#include "core/json_io.h"
#include "core/presets.h"
#include "core/spec_inputs.h"

namespace loom {
namespace {

SpecInputs llama_on_a100s() {
  SpecInputs in;
  in.model = "llama2-7b";
  in.cluster = "dgx-a100-80gb";
  in.gpus = 16;
  in.global_batch = 64;
  return in;
}

TEST(ResolveSpecs, LoadsPresetsAndFillsTheTrainingSpec) {
  SpecInputs in = llama_on_a100s();
  in.seq = 2048;
  in.tokens = 1e12;
  in.attention = "unfused";
  in.grad_bytes = 4;
  in.sync_pipeline_sends = true;
  auto specs = resolve_specs(in);
  ASSERT_TRUE(specs) << specs.error().message;
  EXPECT_EQ(specs->model.name, "llama2-7b");
  EXPECT_EQ(specs->cluster_name, "dgx-a100-80gb");
  EXPECT_EQ(specs->training.gpus, 16);
  EXPECT_EQ(specs->training.global_batch, 64);
  EXPECT_EQ(specs->training.seq_len, 2048);
  EXPECT_DOUBLE_EQ(specs->training.tokens, 1e12);
  EXPECT_EQ(specs->training.attention, AttentionKernel::kUnfused);
  EXPECT_EQ(specs->training.grad_bytes, 4);
  EXPECT_TRUE(specs->training.pipeline_sends_block);
}

TEST(ResolveSpecs, Fp8OnHopperWithItsRecipe) {
  SpecInputs in = llama_on_a100s();
  in.cluster = "dgx-h100";
  in.precision = "fp8";
  auto delayed = resolve_specs(in);
  ASSERT_TRUE(delayed) << delayed.error().message;
  EXPECT_EQ(delayed->training.precision, Precision::kFp8);
  EXPECT_EQ(delayed->training.fp8_recipe, Fp8Recipe::kDelayed);  // Megatron-LM's default --fp8-recipe
  in.fp8_recipe = "current";
  auto current = resolve_specs(in);
  ASSERT_TRUE(current) << current.error().message;
  EXPECT_EQ(current->training.fp8_recipe, Fp8Recipe::kTensorwise);
}

TEST(ResolveSpecs, SequenceDefaultsToTheModels) {
  auto specs = resolve_specs(llama_on_a100s());
  ASSERT_TRUE(specs) << specs.error().message;
  EXPECT_EQ(specs->training.seq_len, specs->model.seq_len);
}

TEST(ResolveSpecs, BadInputNamesTheFlagOnOneLine) {
  struct Case {
    void (*spoil)(SpecInputs&);
    std::string expected;  // contained in the message
  };
  const Case cases[] = {
      {[](SpecInputs& in) { in.gpus = 0; }, "--gpus: 0 must be at least 1"},
      {[](SpecInputs& in) { in.global_batch = 0; }, "--global-batch: 0 must be at least 1"},
      {[](SpecInputs& in) { in.attention = "paged"; }, "--attention: unknown kernel 'paged' (flash or unfused)"},
      {[](SpecInputs& in) { in.grad_bytes = 3; }, "--grad-bytes: must be 2 or 4"},
      {[](SpecInputs& in) { in.model = "llama2-7"; }, "did you mean 'llama2-7b'"},
      {[](SpecInputs& in) { in.precision = "fp4"; }, "--precision: unknown precision 'fp4' (bf16 or fp8)"},
      {[](SpecInputs& in) { in.precision = "fp8"; },
       "--precision fp8: the A100-SXM4-80GB of cluster 'dgx-a100-80gb' has no FP8 tensor cores"},
      {[](SpecInputs& in) { in.fp8_recipe = "delayed"; }, "--fp8-recipe: applies to --precision fp8 only"},
      {[](SpecInputs& in) {
         in.cluster = "dgx-h100";
         in.precision = "fp8";
         in.fp8_recipe = "mxfp8";
       },
       "--fp8-recipe: unknown recipe 'mxfp8' (delayed, tensorwise or rowwise)"},
      {[](SpecInputs& in) {
         in.cluster = "dgx-b200";  // datasheet figures only: no B200 has been lent to measure one
         in.precision = "fp8";
         in.fp8_recipe = "rowwise";
       },
       "--fp8-recipe rowwise: the cost file of cluster 'dgx-b200' has no measured rowwise FP8 GEMM figure "
       "(compute.gemm_fp8_rowwise_max_efficiency; bench/gpu/fp8_gemm.py measures it on the GPU)"},
      {[](SpecInputs& in) { in.moe_imbalance = 0.5; }, "--moe-imbalance: 0.5 must be between 1 (balanced) and 1000"},
      {[](SpecInputs& in) { in.moe_imbalance = 1.5; },
       "--moe-imbalance: applies to mixture-of-experts models only; llama2-7b has no routed experts"},
      {[](SpecInputs& in) { in.moe_shared_expert_overlap = true; },
       "--moe-shared-expert-overlap: llama2-7b has no shared expert to run beside the all-to-alls"},
      {[](SpecInputs& in) {
         in.model = std::string(LOOM_VALIDATION_DIR) + "/hf_configs/mixtral-8x7b";  // routed experts, no shared one
         in.moe_shared_expert_overlap = true;
       },
       "--moe-shared-expert-overlap: mixtral-8x7b has no shared expert to run beside the all-to-alls"},
      {[](SpecInputs& in) { in.kernel_cv = -0.1; },
       "--kernel-cv: -0.1 must be between 0 and 1 (a coefficient of variation)"},
      {[](SpecInputs& in) { in.gpu_cv = 1.5; }, "--gpu-cv: 1.5 must be between 0 and 1 (a coefficient of variation)"},
      {[](SpecInputs& in) { in.host_op_us = -3; }, "--host-op-us: -3 must be between 0 and 100000 microseconds"},
      {[](SpecInputs& in) { in.zero3_prefetch = -2; },
       "--zero3-prefetch: -2 must be between 0 (one unit ahead) and 1e15 parameter elements"},
      {[](SpecInputs& in) { in.elementwise = "compiled"; }, "--elementwise: unknown kind 'compiled' (fused or eager)"},
      {[](SpecInputs& in) { in.flash_kernel = "fa3"; }, "--flash-kernel: unknown kernel 'fa3' (fused or fa2)"},
      {[](SpecInputs& in) {
         in.attention = "unfused";
         in.flash_kernel = "fa2";
       },
       "--flash-kernel: applies to --attention flash only, not unfused"},
      {[](SpecInputs& in) { in.cp_attention = "ring"; }, "--cp-attention: unknown library 'ring' (te or pytorch)"},
      {[](SpecInputs& in) { in.mtp_layers = 17; }, "--mtp-layers: 17 must be between 0 and 16 (or -1: the model's)"},
      {[](SpecInputs& in) { in.mtp_layers = -2; }, "--mtp-layers: -2 must be between 0 and 16 (or -1: the model's)"},
  };
  for (const Case& c : cases) {
    SpecInputs in = llama_on_a100s();
    c.spoil(in);
    auto specs = resolve_specs(in);
    ASSERT_FALSE(specs.ok()) << c.expected;
    EXPECT_FALSE(specs.error().internal());
    EXPECT_NE(specs.error().message.find(c.expected), std::string::npos) << specs.error().message;
    EXPECT_EQ(specs.error().message.find('\n'), std::string::npos);
  }
}

// --mtp-layers sets the model's multi-token-prediction modules: on a model without (Llama 2) and, 0, off one
// whose config.json has them; left at -1 the model's own count stands.
TEST(ResolveSpecs, MtpLayersOverridesTheModels) {
  SpecInputs in = llama_on_a100s();
  in.mtp_layers = 2;
  auto two = resolve_specs(in);
  ASSERT_TRUE(two.ok()) << two.error().message;
  EXPECT_EQ(two->model.mtp_layers, 2);
  in.mtp_layers = -1;
  EXPECT_EQ(resolve_specs(in)->model.mtp_layers, 0);
  Json model = to_json(*model_preset("llama2-7b"));
  model["mtp_layers"] = 1;
  const auto path = std::filesystem::temp_directory_path() / ("loom_mtp_model_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << model.dump();
  in.model = path.string();
  EXPECT_EQ(resolve_specs(in)->model.mtp_layers, 1);
  in.mtp_layers = 0;
  EXPECT_EQ(resolve_specs(in)->model.mtp_layers, 0);
  std::filesystem::remove(path);
}

TEST(SpecFlagTable, NamesEveryInputOnceAndMarksTheThreeACommandCannotDefault) {
  SpecInputs in;
  std::vector<std::string> flags, required;
  for_each_spec_flag(in, [&](const char* flag, auto&, const char*, bool needed) {
    flags.push_back(flag);
    if (needed) required.push_back(flag);
  });
  EXPECT_EQ(flags.size(), 23u);  // ... --mtp-layers, --framework, --elementwise, --flash-kernel, --cp-attention,
                                 // --precision, --fp8-recipe, --moe-imbalance, --moe-shared-expert-overlap,
                                 // --kernel-cv, --gpu-cv, --host-op-us and --zero3-prefetch among them
  EXPECT_EQ(required, (std::vector<std::string>{"--model", "--gpus", "--global-batch"}));
}

}  // namespace
}  // namespace loom
