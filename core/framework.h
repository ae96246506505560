// The software stack a run is described by (`--framework`): the behaviours of Megatron-LM,
// Megatron-core, DeepSpeed or torchtitan that change a step's time, and the parallel features each
// can run, every one with its source. A preset sets the training spec's defaults (a flag given on
// the command line wins) and adds one legality rule: a configuration the stack cannot run is
// rejected, naming the feature and why.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/names.h"
#include "core/parallel_config.h"
#include "core/result.h"
#include "core/training_spec.h"

namespace loom {

// A behaviour the preset sets, with its source.
template <typename T>
struct Sourced {
  T value;
  const char* source;
};

// A feature the stack lacks, with why (which release brought it, or what it has instead).
struct Missing {
  bool missing = false;
  const char* why = "";
};

struct FrameworkPreset {
  const char* name;
  const char* description;
  Sourced<AttentionKernel> attention;
  Sourced<int> grad_bytes;               // bytes of the gradient each micro-batch accumulates into and reduces
  Sourced<bool> overlap_grad_reduce;     // buckets reduced during the last backward
  Sourced<bool> pipeline_sends_block;    // a stage waits for its send before its next pass
  Sourced<bool> tp_comm_overlap;         // input-gradient TP all-reduce beside the weight-gradient GEMM
  Sourced<Zero3Unit> zero3_unit;         // what one ZeRO-3 gather and reduce-scatter covers
  Sourced<bool> zero3_pp_keep_gathered;  // ZeRO-3 under PP gathers once a step (TrainingSpec)
  Sourced<bool> zero3_fp32_shards;       // ZeRO-3's shards are the fp32 masters (TrainingSpec)
  // ZeRO stages the stack runs (bit z set: stage z).
  unsigned zero_stages = 0b1111;
  const char* zero_source = "";  // where the stages come from, or why the others are missing
  Missing sequence_parallel, interleaved, zero_bubble, gpipe, context_parallel, fp8, hsdp, uneven_stages;
  Missing tp_without_sp;             // tensor parallelism with sequence parallelism off
  Missing op_recompute;              // op-level selective activation checkpointing (--recompute op)
  Sourced<double> host_op_s;         // host time to issue one GPU op (TrainingSpec::host_op_s)
  Sourced<Elementwise> elementwise;  // fused or eager element-wise kernels (TrainingSpec::elementwise)
  // What the loss holds at its peak per logit (TrainingSpec::loss_bytes_per_logit), with the element-wise ops
  // eager and fused (compiled).
  Sourced<double> loss_bytes_per_logit;
  Sourced<double> compiled_loss_bytes_per_logit;
  Sourced<FlashKernel> flash_kernel;        // the kernel fused attention runs (TrainingSpec::flash_kernel)
  Sourced<CpAttention> cp_attention;        // what runs context-parallel attention (TrainingSpec::cp_attention)
  Sourced<bool> sp_collective_copies;       // SP collectives copy their tensor (TrainingSpec::sp_collective_copies)
  Sourced<double> zero3_prefetch_elements;  // ZeRO-3 prefetch depth (TrainingSpec::zero3_prefetch_elements)
  Sourced<bool> zero3_collective_copies;  // ZeRO-3's buffers copied in and out (TrainingSpec::zero3_collective_copies)
  Sourced<LossKernel> loss_kernel;        // what the loss's kernels read and write (TrainingSpec::loss_kernel)
  Sourced<bool> embedding_grad_dense;     // the embedding's gradient dense (TrainingSpec::embedding_grad_dense)
};

// Every preset, in the order `--framework`'s help lists them.
std::span<const FrameworkPreset> framework_presets();
// "megatron-lm-2021, megatron-core, deepspeed or torchtitan".
std::string framework_names();
// The preset named `name`, or an error listing the names.
Result<const FrameworkPreset*> find_framework(std::string_view name);

// Sets `training`'s behaviours to the preset's and records its name. The fields listed in
// `keep` (given explicitly by the user) are left as they are.
struct ExplicitTraining {
  bool attention = false;
  bool grad_bytes = false;
  bool pipeline_sends_block = false;
  bool host_op_s = false;
  bool elementwise = false;
  bool flash_kernel = false;
  bool cp_attention = false;
  bool zero3_prefetch_elements = false;
};
void apply_framework(const FrameworkPreset& preset, TrainingSpec& training, ExplicitTraining keep = {});

// Why `preset` cannot run `config` under `training`, or nothing when it can.
std::optional<std::string> framework_lacks(const FrameworkPreset& preset, const TrainingSpec& training,
                                           const ParallelConfig& config);

}  // namespace loom
