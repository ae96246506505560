// The inputs every command that takes specs shares (model, cluster, GPUs, batch, ...) as plain
// values, resolved into the model, cluster and training specs with one clear line on bad input.
// `loom` and `loom-gui` bind the same flags to these through for_each_spec_flag.
#pragma once

#include <string>
#include <vector>

#include "core/cluster_spec.h"
#include "core/model_spec.h"
#include "core/result.h"
#include "core/training_spec.h"

namespace loom {

struct SpecInputs {
  std::string model;    // preset name, Loom model JSON, or Hugging Face config.json
  std::string cluster;  // preset name or cluster/cost file
  long long gpus = 0;
  long long global_batch = 0;
  long long seq = 0;              // 0: the model's
  long long mtp_layers = -1;      // negative: the model's (ModelSpec::mtp_layers)
  double tokens = 0;              // token budget, for days to train; 0: none
  std::string attention = "";     // empty: the --framework's kernel, else flash
  std::string elementwise = "";   // empty: the --framework's, else fused
  std::string flash_kernel = "";  // empty: the --framework's, else fused
  std::string cp_attention = "";  // empty: the --framework's, else te
  std::string framework = "";     // empty: none named (core/framework.h)
  std::string precision = to_string(Precision::kBf16);
  std::string fp8_recipe = "";  // empty: TrainingSpec's default (delayed scaling)
  bool allow_cross_node_tp = false;
  int grad_bytes = 0;  // 0: the default of TrainingSpec
  bool sync_pipeline_sends = false;
  double moe_imbalance = 1.0;
  bool moe_shared_expert_overlap = false;
  double kernel_cv = 0.0;
  double gpu_cv = 0.0;
  double host_op_us = -1.0;      // negative: the --framework's, else 0
  double zero3_prefetch = -1.0;  // negative: the --framework's, else 0 (one unit ahead)
};

struct Specs {
  ModelSpec model;
  ClusterSpec cluster;
  TrainingSpec training;
  std::string cluster_name;  // as given (preset name or path)
};

// Loads model and cluster and checks the sizes; errors name the flag ("--gpus: 0 must be at least 1").
Result<Specs> resolve_specs(const SpecInputs& inputs);

// `loom plan --framework a,b`: one Specs per software stack named in the comma list, in its order,
// each resolved as if that stack alone were named (a flag given still wins over every stack). One
// Specs when none or one is named. A name given twice, or an empty one, is bad input.
Result<std::vector<Specs>> resolve_specs_per_framework(const SpecInputs& inputs);

// Calls visit(flag, field, help, required) for every input in the order the help lists them;
// `required` marks the inputs a command that needs specs cannot default (--model, --gpus, --global-batch).
template <typename Visit>
void for_each_spec_flag(SpecInputs& in, Visit&& visit) {
  visit("--model", in.model, "model preset, Loom model JSON, Hugging Face config.json or checkpoint directory", true);
  visit("--gpus", in.gpus, "number of GPUs (ranks)", true);
  visit("--global-batch", in.global_batch, "sequences per optimizer step", true);
  visit("--cluster", in.cluster, "cluster preset or cost file (JSON)", false);
  visit("--seq", in.seq, "sequence length (default: the model's)", false);
  visit("--mtp-layers", in.mtp_layers,
        "multi-token-prediction modules after the last layer, on the last pipeline stage (Megatron-core's "
        "--mtp-num-layers; 0: none) (default: the model's, config.json's num_nextn_predict_layers)",
        false);
  visit("--tokens", in.tokens, "token budget, for days to train", false);
  visit("--framework", in.framework,
        "software stack whose known behaviours apply: megatron-lm-2021, megatron-core, torchtitan or deepspeed "
        "(default: none; `plan` takes a comma list and ranks each stack's layouts together)",
        false);
  visit("--attention", in.attention, "attention kernel: flash or unfused (default: the --framework's, else flash)",
        false);
  visit("--elementwise", in.elementwise,
        "element-wise kernels: fused (torch.compile, TransformerEngine, Megatron's fusions) or eager (one PyTorch "
        "kernel per op: RMSNorm, RoPE, GQA's K/V copies, SwiGLU) (default: the --framework's, else fused)",
        false);
  visit("--flash-kernel", in.flash_kernel,
        "the kernel fused attention runs: fused (the cost file's fused attention: cuDNN's on Hopper and Blackwell, "
        "as TransformerEngine and current PyTorch run it) or fa2 (FlashAttention-2's kernels, PyTorch's "
        "FLASH_ATTENTION backend) (default: the --framework's, else fused)",
        false);
  visit("--cp-attention", in.cp_attention,
        "what runs context-parallel attention: te (TransformerEngine, as Megatron-core runs it) or pytorch "
        "(PyTorch's ring attention, as torchtitan runs it: one SDPA call per step, fp32 merges and key/value "
        "gradients) (default: the --framework's, else te)",
        false);
  visit("--precision", in.precision, "linear-layer GEMMs: bf16, or fp8 (TransformerEngine-style, bf16 elsewhere)",
        false);
  visit("--fp8-recipe", in.fp8_recipe,
        "FP8 scaling: delayed (amax history), tensorwise (current scaling) or rowwise (torchao's rowwise recipe; "
        "needs the cost file's measured rowwise GEMM figure)",
        false);
  visit("--allow-cross-node-tp", in.allow_cross_node_tp, "let tensor parallelism span nodes", false);
  visit("--grad-bytes", in.grad_bytes, "bytes per gradient element (2 = bf16, 4 = fp32 main grads)", false);
  visit("--sync-pipeline-sends", in.sync_pipeline_sends,
        "a stage waits for its pipeline send before its next pass (Megatron-LM's batch_p2p_sync)", false);
  visit("--moe-imbalance", in.moe_imbalance,
        "expert parallelism: the busiest EP rank's routed tokens over the mean (default 1: balanced)", false);
  visit("--moe-shared-expert-overlap", in.moe_shared_expert_overlap,
        "the shared expert runs beside the EP dispatch and combine all-to-alls (Megatron-core's flag)", false);
  visit("--kernel-cv", in.kernel_cv,
        "each kernel's time varies by this coefficient of variation (σ/μ) from rank to rank; every synchronisation "
        "waits for the slowest (default 0)",
        false);
  visit("--gpu-cv", in.gpu_cv,
        "each GPU's speed differs persistently by this coefficient of variation (σ/μ) from the others; the step "
        "waits for the slowest GPU of the world (default 0)",
        false);
  visit("--host-op-us", in.host_op_us,
        "host time to issue one GPU op, in microseconds; a pass is never shorter than its ops times this (default: "
        "the --framework's, else 0)",
        false);
  visit("--zero3-prefetch", in.zero3_prefetch,
        "ZeRO-3: parameter elements each unit's hook prefetches beyond the unit computing, at least one unit (0: one "
        "unit ahead, as FSDP; DeepSpeed's stage3_prefetch_bucket_size) (default: the --framework's, else 0)",
        false);
}

}  // namespace loom
