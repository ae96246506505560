// core/framework.h: the --framework presets set the training spec's behaviours (flags given win),
// every behaviour and every missing feature carries its source, and the one legality rule rejects
// what a stack cannot run with the feature named.
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "core/config_rules.h"
#include "core/framework.h"
#include "core/json_io.h"
#include "core/spec_inputs.h"

namespace loom {
namespace {

TEST(Framework, EveryPresetNamesItsSourcesAndWhyAFeatureIsMissing) {
  std::set<std::string> names;
  for (const FrameworkPreset& p : framework_presets()) {
    EXPECT_TRUE(names.insert(p.name).second) << p.name;
    EXPECT_GT(std::string(p.description).size(), 20u) << p.name;
    for (const char* source :
         {p.attention.source, p.grad_bytes.source, p.overlap_grad_reduce.source, p.pipeline_sends_block.source,
          p.tp_comm_overlap.source, p.zero3_unit.source, p.zero_source})
      EXPECT_GT(std::string(source).size(), 20u) << p.name;
    for (const Missing* m : {&p.sequence_parallel, &p.interleaved, &p.zero_bubble, &p.gpipe, &p.context_parallel,
                             &p.fp8, &p.hsdp, &p.uneven_stages, &p.tp_without_sp, &p.op_recompute})
      EXPECT_EQ(m->missing, std::string(m->why).size() > 0) << p.name << ": " << m->why;
    EXPECT_NE(p.zero_stages & 1u, 0u) << p.name << " runs plain data parallelism";
    EXPECT_NE(framework_names().find(p.name), std::string::npos);
  }
  EXPECT_EQ(names, (std::set<std::string>{"megatron-lm-2021", "megatron-core", "torchtitan", "deepspeed"}));
}

TEST(Framework, TheFlagsHelpListsEveryPreset) {
  SpecInputs in;
  std::string help;
  for_each_spec_flag(in, [&](const char* flag, auto&, const char* text, bool) {
    if (std::string(flag) == "--framework") help = text;
  });
  for (const FrameworkPreset& p : framework_presets()) EXPECT_NE(help.find(p.name), std::string::npos) << help;
}

SpecInputs gpt_on_a100s(const char* framework) {
  SpecInputs in;
  in.model = "gpt3-175b";
  in.cluster = "dgx-a100-80gb";
  in.gpus = 64;
  in.global_batch = 64;
  in.framework = framework;
  return in;
}

TEST(Framework, ThePresetSetsTheBehavioursAFlagDidNotGive) {
  auto specs = resolve_specs(gpt_on_a100s("megatron-lm-2021"));
  ASSERT_TRUE(specs) << specs.error().message;
  const TrainingSpec& t = specs->training;
  EXPECT_EQ(t.framework, "megatron-lm-2021");
  EXPECT_EQ(t.attention, AttentionKernel::kUnfused);
  EXPECT_EQ(t.grad_bytes, 4);
  EXPECT_TRUE(t.pipeline_sends_block);
  EXPECT_FALSE(t.overlap_grad_reduce);
  EXPECT_FALSE(t.tp_comm_overlap);
  EXPECT_EQ(t.host_op_s, 8e-6);                   // eager PyTorch's dispatch
  EXPECT_EQ(t.elementwise, Elementwise::kFused);  // Apex and torch.jit fusions
  EXPECT_EQ(t.flash_kernel, FlashKernel::kFused);
  EXPECT_EQ(t.cp_attention, CpAttention::kTe);

  SpecInputs explicit_flags = gpt_on_a100s("megatron-lm-2021");
  explicit_flags.attention = "flash";
  explicit_flags.grad_bytes = 2;
  explicit_flags.host_op_us = 0;
  auto kept = resolve_specs(explicit_flags);
  ASSERT_TRUE(kept) << kept.error().message;
  EXPECT_EQ(kept->training.attention, AttentionKernel::kFlash);
  EXPECT_EQ(kept->training.grad_bytes, 2);
  EXPECT_EQ(kept->training.host_op_s, 0.0);
  EXPECT_FALSE(kept->training.overlap_grad_reduce);  // no flag for it: the preset's

  // DeepSpeed prefetches its 5e7-element bucket; --zero3-prefetch states another depth and wins.
  EXPECT_EQ(resolve_specs(gpt_on_a100s("deepspeed"))->training.zero3_prefetch_elements, 5e7);
  SpecInputs deeper = gpt_on_a100s("deepspeed");
  deeper.zero3_prefetch = 2e8;
  EXPECT_EQ(resolve_specs(deeper)->training.zero3_prefetch_elements, 2e8);
  deeper.zero3_prefetch = 0;
  EXPECT_EQ(resolve_specs(deeper)->training.zero3_prefetch_elements, 0.0);

  // No framework: Loom's own defaults, flash attention among them.
  auto plain = resolve_specs(gpt_on_a100s(""));
  ASSERT_TRUE(plain) << plain.error().message;
  EXPECT_EQ(plain->training.attention, AttentionKernel::kFlash);
  EXPECT_TRUE(plain->training.framework.empty());
  EXPECT_TRUE(plain->training.overlap_grad_reduce);
  EXPECT_TRUE(plain->training.tp_comm_overlap);
  EXPECT_EQ(plain->training.host_op_s, 0.0);
  EXPECT_EQ(plain->training.elementwise, Elementwise::kFused);
  EXPECT_EQ(plain->training.flash_kernel, FlashKernel::kFused);
  // Megatron-core's TransformerEngine picks cuDNN's fused attention on Hopper: the cost file's.
  EXPECT_EQ(resolve_specs(gpt_on_a100s("megatron-core"))->training.flash_kernel, FlashKernel::kFused);
  EXPECT_EQ(resolve_specs(gpt_on_a100s("megatron-core"))->training.cp_attention, CpAttention::kTe);

  // torchtitan runs eager unless compiled; --elementwise fused says it was.
  auto titan = resolve_specs(gpt_on_a100s("torchtitan"));
  ASSERT_TRUE(titan) << titan.error().message;
  EXPECT_EQ(titan->training.elementwise, Elementwise::kEager);
  EXPECT_EQ(titan->training.loss_bytes_per_logit, 12.0);  // its eager fp32 cross-entropy
  // Its published runs' SDPA ran FlashAttention-2's kernels; --flash-kernel fused is today's PyTorch.
  EXPECT_EQ(titan->training.flash_kernel, FlashKernel::kFa2);
  SpecInputs current = gpt_on_a100s("torchtitan");
  current.flash_kernel = "fused";
  EXPECT_EQ(resolve_specs(current)->training.flash_kernel, FlashKernel::kFused);
  // Its context parallelism is PyTorch's ring attention; --cp-attention te says otherwise.
  EXPECT_EQ(titan->training.cp_attention, CpAttention::kPyTorch);
  EXPECT_TRUE(titan->training.sp_collective_copies);  // DTensor's [b, s, h] sequence sharding
  EXPECT_FALSE(resolve_specs(gpt_on_a100s("megatron-core"))->training.sp_collective_copies);
  EXPECT_TRUE(titan->training.zero3_collective_copies);  // FSDP2's all-gather and reduce-scatter buffers
  EXPECT_FALSE(resolve_specs(gpt_on_a100s("megatron-core"))->training.zero3_collective_copies);
  EXPECT_FALSE(resolve_specs(gpt_on_a100s("deepspeed"))->training.zero3_collective_copies);
  SpecInputs te = gpt_on_a100s("torchtitan");
  te.cp_attention = "te";
  EXPECT_EQ(resolve_specs(te)->training.cp_attention, CpAttention::kTe);
  SpecInputs compiled = gpt_on_a100s("torchtitan");
  compiled.elementwise = "fused";
  EXPECT_EQ(resolve_specs(compiled)->training.elementwise, Elementwise::kFused);
  EXPECT_EQ(resolve_specs(compiled)->training.loss_bytes_per_logit, 4.0);  // the loss compiled with the model
  EXPECT_EQ(specs->training.loss_bytes_per_logit, 4.0);                    // Megatron's
}

TEST(Framework, AnUnknownNameIsOneLineListingTheKnownOnes) {
  auto specs = resolve_specs(gpt_on_a100s("megatron-lm-2019"));
  ASSERT_FALSE(specs.ok());
  EXPECT_EQ(specs.error().message, "--framework: unknown framework 'megatron-lm-2019' (" + framework_names() + ")");
  EXPECT_FALSE(specs.error().internal());
}

TEST(Framework, TrainingJsonKeepsTheStackAndRefusesAnUnknownOne) {
  TrainingSpec t{.gpus = 8, .global_batch = 8};
  apply_framework(*find_framework("torchtitan").value(), t);
  auto back = training_from_json(to_json(t));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->framework, "torchtitan");
  EXPECT_FALSE(back->tp_comm_overlap);
  EXPECT_EQ(back->host_op_s, 8e-6);
  EXPECT_EQ(back->elementwise, Elementwise::kEager);
  EXPECT_EQ(back->flash_kernel, FlashKernel::kFa2);
  EXPECT_EQ(back->cp_attention, CpAttention::kPyTorch);
  EXPECT_TRUE(back->sp_collective_copies);
  EXPECT_EQ(back->loss_bytes_per_logit, 12.0);
  EXPECT_TRUE(back->zero3_pp_keep_gathered);
  EXPECT_TRUE(back->zero3_fp32_shards);
  EXPECT_TRUE(back->zero3_collective_copies);
  TrainingSpec ds{.gpus = 8, .global_batch = 8};
  apply_framework(*find_framework("deepspeed").value(), ds);
  EXPECT_EQ(training_from_json(to_json(ds))->zero3_unit, Zero3Unit::kModule);
  EXPECT_EQ(training_from_json(to_json(ds))->zero3_prefetch_elements, 5e7);
  EXPECT_EQ(back->zero3_prefetch_elements, 0.0);  // one unit ahead
  Json negative = to_json(ds);
  negative["zero3_prefetch_elements"] = -1;
  auto no_prefetch = training_from_json(negative);
  ASSERT_FALSE(no_prefetch.ok());
  EXPECT_NE(no_prefetch.error().message.find("zero3_prefetch_elements"), std::string::npos)
      << no_prefetch.error().message;
  Json bad = to_json(t);
  bad["framework"] = "jax";
  auto refused = training_from_json(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("'framework' must be"), std::string::npos) << refused.error().message;
  // A plan file from before the field: Loom's defaults.
  Json old = to_json(TrainingSpec{.gpus = 8, .global_batch = 8});
  old.erase("framework");
  old.erase("tp_comm_overlap");
  old.erase("zero3_unit");
  old.erase("elementwise");
  auto defaults = training_from_json(old);
  ASSERT_TRUE(defaults) << defaults.error().message;
  EXPECT_TRUE(defaults->framework.empty());
  EXPECT_TRUE(defaults->tp_comm_overlap);
  EXPECT_EQ(defaults->zero3_unit, Zero3Unit::kLayer);
  EXPECT_EQ(defaults->elementwise, Elementwise::kFused);
  Json compiled = to_json(t);
  compiled["elementwise"] = "compiled";
  auto unknown = training_from_json(compiled);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().message, "training: 'elementwise' must be fused or eager, not 'compiled'");
  Json fa3 = to_json(t);
  fa3["flash_kernel"] = "fa3";
  auto refused_kernel = training_from_json(fa3);
  ASSERT_FALSE(refused_kernel.ok());
  EXPECT_EQ(refused_kernel.error().message, "training: 'flash_kernel' must be fused or fa2, not 'fa3'");
  EXPECT_FALSE(to_json(TrainingSpec{}).contains("flash_kernel"));  // plan files from before the field read alike
  Json ring = to_json(t);
  ring["cp_attention"] = "megatron";
  auto refused_library = training_from_json(ring);
  ASSERT_FALSE(refused_library.ok());
  EXPECT_EQ(refused_library.error().message, "training: 'cp_attention' must be te or pytorch, not 'megatron'");
  EXPECT_FALSE(to_json(TrainingSpec{}).contains("cp_attention"));
  EXPECT_FALSE(to_json(TrainingSpec{}).contains("sp_collective_copies"));
  EXPECT_FALSE(to_json(TrainingSpec{}).contains("zero3_collective_copies"));
  // The loss's kernels: the stack's, kept through a plan file; Loom's executor's by default and in files from
  // before the field.
  EXPECT_EQ(back->loss_kernel, LossKernel::kNominal);
  EXPECT_EQ(training_from_json(to_json(ds))->loss_kernel, LossKernel::kMegatron);
  EXPECT_FALSE(to_json(TrainingSpec{}).contains("loss_kernel"));
  EXPECT_EQ(defaults->loss_kernel, LossKernel::kExecutor);
  Json fused_loss = to_json(ds);
  fused_loss["loss_kernel"] = "liger";
  auto refused_loss = training_from_json(fused_loss);
  ASSERT_FALSE(refused_loss.ok());
  EXPECT_EQ(refused_loss.error().message, "training: 'loss_kernel' must be executor, megatron or nominal, not 'liger'");
  // The embedding's dense gradient: every stack's, kept through a plan file; the executor's rows in place by
  // default and in files from before the field.
  EXPECT_TRUE(back->embedding_grad_dense);
  EXPECT_TRUE(training_from_json(to_json(ds))->embedding_grad_dense);
  EXPECT_FALSE(to_json(TrainingSpec{}).contains("embedding_grad_dense"));
  EXPECT_FALSE(defaults->embedding_grad_dense);
  Json sparse = to_json(ds);
  sparse["embedding_grad_dense"] = "yes";
  EXPECT_FALSE(training_from_json(sparse).ok());
}

// What each stack cannot run is rejected with the feature named; what it can passes.
TEST(Framework, ConfigurationsTheStackCannotRunAreRejectedNamingTheFeature) {
  struct Case {
    const char* framework;
    ParallelConfig config;
    const char* lacks;  // empty: legal
  };
  const ParallelConfig tp8{.tp = 8, .pp = 1, .dp = 8};
  auto with = [](ParallelConfig c, auto change) {
    change(c);
    return c;
  };
  const Case cases[] = {
      {"megatron-lm-2021", tp8, ""},
      {"megatron-lm-2021", with(tp8, [](ParallelConfig& c) { c.zero = 1; }), "ZeRO-1"},
      {"megatron-lm-2021", with(tp8, [](ParallelConfig& c) { c.sequence_parallel = true; }), "sequence parallelism"},
      {"megatron-lm-2021", ParallelConfig{.tp = 8, .pp = 2, .dp = 4, .vpp = 2, .schedule = Schedule::kInterleaved}, ""},
      {"megatron-lm-2021", ParallelConfig{.tp = 8, .pp = 2, .dp = 4, .schedule = Schedule::kZeroBubble}, "zero-bubble"},
      {"megatron-lm-2021", ParallelConfig{.tp = 8, .pp = 2, .dp = 4, .schedule = Schedule::kGPipe}, "GPipe"},
      {"megatron-lm-2021", with(tp8, [](ParallelConfig& c) { c.cp = 2, c.dp = 4; }), "context parallelism"},
      {"megatron-lm-2021", ParallelConfig{.tp = 8, .pp = 2, .dp = 4, .split = {.first_stage_layers = 40}},
       "uneven pipeline stages"},
      {"megatron-core", with(tp8, [](ParallelConfig& c) { c.zero = 1, c.sequence_parallel = true; }), ""},
      {"megatron-core", ParallelConfig{.tp = 8, .pp = 2, .dp = 4, .schedule = Schedule::kZeroBubble}, "zero-bubble"},
      {"torchtitan", with(tp8, [](ParallelConfig& c) { c.zero = 3, c.sequence_parallel = true; }), ""},
      {"torchtitan", with(tp8, [](ParallelConfig& c) { c.zero = 3; }), "without sequence parallelism"},
      {"torchtitan", ParallelConfig{.tp = 1, .pp = 1, .dp = 64, .zero = 2}, "ZeRO-2"},
      {"torchtitan", ParallelConfig{.tp = 1, .pp = 1, .dp = 64, .zero = 3, .shard_group = 8}, ""},
      {"deepspeed", ParallelConfig{.tp = 1, .pp = 1, .dp = 64, .zero = 3}, ""},
      {"deepspeed", ParallelConfig{.tp = 8, .pp = 2, .dp = 4, .vpp = 2, .schedule = Schedule::kInterleaved},
       "interleaved"},
  };
  for (const Case& c : cases) {
    TrainingSpec t{.gpus = c.config.world_size(), .global_batch = 64};
    t.framework = c.framework;
    const RuleStatus status = check_framework(t, c.config);
    if (std::string(c.lacks).empty()) {
      EXPECT_TRUE(status.ok()) << c.framework << " " << describe(c.config) << ": " << status.violation().message;
      continue;
    }
    ASSERT_FALSE(status.ok()) << c.framework << " " << describe(c.config);
    EXPECT_EQ(status.violation().rule, rule::kFramework);
    EXPECT_NE(status.violation().message.find(c.framework), std::string::npos) << status.violation().message;
    EXPECT_NE(status.violation().message.find(c.lacks), std::string::npos) << status.violation().message;
  }
}

}  // namespace
}  // namespace loom
