// TrainingSpec: what is being trained — how many GPUs, the batch, sequence length, token budget,
// precision and optimizer — independent of how it is split.
#pragma once

#include <cstdint>
#include <string>

#include "core/names.h"

namespace loom {

struct TrainingSpec {
  int gpus = 0;
  std::int64_t global_batch = 0;    // sequences per optimizer step
  int seq_len = 0;                  // 0: the model's own
  std::string seq_len_source = "";  // "--seq", or the model field it came from (for the plan's # lines)
  double tokens = 0;                // token budget for days-to-train; 0: not given
  // Mixed precision with fp32 master weights and Adam (ZeRO paper, §3.1): 2 + 2 + 12 bytes/param.
  int param_bytes = 2;
  int grad_bytes = 2;
  int optimizer_bytes = 12;
  int activation_bytes = 2;
  AttentionKernel attention = AttentionKernel::kFlash;
  // The kernel fused attention runs (core/names.h FlashKernel).
  FlashKernel flash_kernel = FlashKernel::kFused;
  // The library that runs context-parallel attention (core/names.h CpAttention).
  CpAttention cp_attention = CpAttention::kTe;
  // Sequence parallelism's all-gathers and reduce-scatters work on a tensor whose sequence is its second
  // dimension, [b, s, h] (DTensor's Shard(1), as torchtitan lays it out), where NCCL gathers and scatters
  // along the first: each all-gather's output is copied into place and each reduce-scatter's input copied
  // out of it (torch.distributed._functional_collectives: torch.cat of torch.chunk). Megatron's
  // tensors are [s, b, h]: no copy.
  bool sp_collective_copies = false;
  // Element-wise kernels fused (torch.compile, TransformerEngine) or one eager PyTorch kernel per op.
  Elementwise elementwise = Elementwise::kFused;
  // Bytes per logit (of one rank's vocabulary share) the loss holds at its peak, beside every layer's
  // activations: 4, the fp32 logits Megatron's vocab-parallel cross-entropy keeps (Korthikanti et al.
  // §4.3). A framework whose loss holds more says so (core/framework.h).
  double loss_bytes_per_logit = 4.0;
  // Where activations are narrower than those fp32 logits (bf16), the logits' gradient is kept in the
  // activation dtype for the head's GEMMs, written at the end of the forward (which frees the fp32 logits)
  // and read by the head's backward beside its input gradient: workspace (Loom's executor,
  // exec/model/gpt_stage.cc). A framework preset describes its own loss by loss_bytes_per_logit instead.
  bool head_casts_logits_grad = true;
  // What the loss's element-wise kernels read and write (core/names.h LossKernel): Loom's executor's by
  // default; a framework preset names its stack's.
  LossKernel loss_kernel = LossKernel::kExecutor;
  // The token embedding's backward writes a dense gradient of its whole vocabulary share, [v/t, h] in the
  // activation dtype and zeroed first (PyTorch's embedding_dense_backward: F.embedding with sparse=False),
  // which is then added into the gradient kept across micro-batches (Megatron's main_grad, autograd's
  // .grad) unless ZeRO-3 reduce-scatters it at once; learned positions likewise over their table. Every
  // --framework preset runs it (core/framework.cc). false: the embedding's backward adds each token's row
  // into the fp32 gradient in place (Loom's executor: kernels/embedding.cu, Backend::embedding_backward).
  bool embedding_grad_dense = false;
  // Unfused attention with dropout: the softmax's backward applies the dropout's mask as it reads dP, in
  // one pass (Loom's executor: kernels/softmax.cu, exec/cpu/cpu_attention.cc). A framework preset runs
  // the dropout's backward as a kernel of its own first (Megatron: torch's dropout after its fused
  // scale-mask-softmax).
  bool softmax_bwd_applies_dropout = true;
  // FP8 runs the linear layers' GEMMs (fprop, dgrad, wgrad) in FP8 with bf16 everywhere else, as
  // TransformerEngine does; the LM head, attention and norms stay bf16.
  Precision precision = Precision::kBf16;
  Fp8Recipe fp8_recipe = Fp8Recipe::kDelayed;
  bool allow_cross_node_tp = false;
  // Reduce gradients bucket by bucket while the last backward runs (PyTorch DDP, Megatron-LM);
  // false: one reduction after the backward (frameworks without gradient bucketing).
  bool overlap_grad_reduce = true;
  // A stage's next pass starts only once its pipeline send has completed. Megatron-LM's
  // p2p_communication.py waits on batch_isend_irecv's requests and then calls
  // torch.cuda.synchronize() (Megatron-core: batch_p2p_sync, on by default; also in
  // Megatron-DeepSpeed). false: sends run on their own channel behind the compute, as Loom's
  // executor and Megatron-core with --overlap-p2p-communication do.
  bool pipeline_sends_block = false;
  // A column-parallel linear's input-gradient all-reduce (reduce-scatter under SP) runs beside its
  // weight-gradient GEMM (Megatron-LM's asynchronous TP all-reduce). false: one after the other.
  bool tp_comm_overlap = true;
  // ZeRO-3 under a pipeline keeps each stage's parameters gathered from its first forward to the end of
  // the step, and accumulates its gradients unsharded (in grad_bytes) until the last backward, which then
  // reduce-scatters them once (torchtitan: reshard_after_forward off under PP, and
  // torch.distributed.pipelining turning FSDP's gradient sync off but for the last backward). false: each
  // pass gathers, each backward reduce-scatters, as without a pipeline.
  bool zero3_pp_keep_gathered = false;
  // ZeRO-3 shards are the fp32 master weights themselves (FSDP2 keeps a sharded parameter in its own
  // dtype and casts to bf16 only for the all-gather): no bf16 copy of the shard beside the optimizer's
  // 12 bytes. false: a bf16 shard beside the fp32 master (DeepSpeed, Megatron-FSDP, Loom's executor).
  bool zero3_fp32_shards = false;
  // ZeRO-3's gathers and reduce-scatters copy through buffers of their own, as FSDP2's do
  // (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py): before a gather each rank copies its shard,
  // cast to the gathered dtype, into the gather's input (on the gather's stream); after it the gathered
  // buffer is copied out into the unit's parameters on the compute stream, before the unit's pass; and
  // before a reduce-scatter the unit's gradients are copied into its input, cast to the reduce dtype (on
  // the reduce-scatter's stream). false: no copy (each --framework preset says why for its stack).
  bool zero3_collective_copies = false;
  // What one ZeRO-3 gather and reduce-scatter covers (core/names.h; the --framework's, core/framework.h).
  Zero3Unit zero3_unit = Zero3Unit::kLayer;
  // ZeRO-3's prefetch: as a unit's compute starts, its hook issues the gathers of the units after it
  // until this many parameter elements are newly in flight, at least one unit. 0: one unit ahead, as
  // FSDP1 (backward prefetch, rate limiter), FSDP2 (implicit prefetch) and Loom's executor do; DeepSpeed:
  // its stage3_prefetch_bucket_size, 5e7 (../shared/reference/collectives-at-scale.md §4). A unit whose
  // gather outlasts the compute of the unit before it stalls the compute stream (CostModel::zero3_prefetch_wait_s).
  double zero3_prefetch_elements = 0;
  // The software stack the run is described by (core/framework.h; empty: none named, the
  // behaviours above as set). A named one also limits the configurations to those it can run.
  std::string framework = "";
  // Expert parallelism: the busiest EP rank's routed tokens over the mean (≥ 1). Its expert GEMMs and
  // its all-to-all share take that much longer, and every rank waits for it at the combine. 1: the
  // load balancing (Megatron-core's aux loss, DeepSeek-V3's expert bias) keeps experts even. Loom's
  // references hold no measured max/mean value to default to (../shared/reference/modern-parallelism.md
  // §6 has only how little it moves with EP: ≤ 5 % from EP 4 to 32), so the plan states what it assumed.
  double moe_imbalance = 1.0;
  // An MoE layer's shared expert runs on its own stream while the dispatch and combine all-to-alls are
  // in flight, its up projection beside the dispatch and its down projection beside the combine
  // (Megatron-core --moe-shared-expert-overlap, off by default; moe/shared_experts.py). false: the
  // all-to-alls are waited for.
  bool moe_shared_expert_overlap = false;
  // Run-to-run variability of each compute kernel's time, as a coefficient of variation (σ/μ), i.i.d.
  // over kernels and ranks: a stated input, 0 by default (every rank runs at the mean). Each
  // synchronisation then waits for the slowest of its ranks (sim/jitter.h).
  double kernel_cv = 0.0;
  // Persistent speed differences between GPUs of one SKU, as a coefficient of variation (σ/μ) of each
  // GPU's kernel times, fixed for the whole step (a slow GPU stays slow): a stated input, 0 by default.
  // The step then waits for the slowest GPU of the world (sim/jitter.h). Sinha et al. (SC'22, arXiv
  // 2208.11035) report 8 % mean (22 % max) performance variation among same-SKU GPUs, outliers 1.5×
  // slower than the median (../shared/reference/collectives-at-scale.md §5): a spread, not a σ, which
  // is why Loom does not derive a default from it.
  double gpu_cv = 0.0;
  // Host time to issue one GPU operation (Python, the framework's dispatch and the launch call); the
  // host runs ahead of the GPU, so a pass is never shorter than its launches times this. 0: the GPU
  // never waits for the host.
  double host_op_s = 0.0;
};

// Plain fp32 training, as Loom's CPU executor runs: fp32 parameters (no master copy), gradients
// and activations; Adam's two moments.
inline void use_fp32_precision(TrainingSpec& t) {
  t.param_bytes = 4;
  t.grad_bytes = 4;
  t.optimizer_bytes = 8;
  t.activation_bytes = 4;
}

}  // namespace loom
