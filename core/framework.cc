#include "core/framework.h"

#include <fmt/format.h>

#include <array>

namespace loom {

namespace {

constexpr Missing kHas{};
constexpr Missing lacks(const char* why) { return {true, why}; }

// All four stacks issue their kernels from eager PyTorch, one Python call each (none captures CUDA graphs by
// default: Megatron-core's --cuda-graph-impl defaults to none).
constexpr Sourced<double> kEagerDispatch{
    8e-6,
    "host time to submit one CUDA op from eager PyTorch on an A100 host, about 8 us (flagos-ai/Torch-FL PR #27; "
    "../shared/reference/collectives-at-scale.md section 6); a pass is never shorter than its launches times this"};

// Megatron-LM, Megatron-core and Megatron-DeepSpeed share the vocab-parallel cross-entropy.
constexpr Sourced<double> kMegatronLoss{
    4.0,
    "the fp32 logits the vocab-parallel cross-entropy keeps for its backward, 4sbv/t bytes (Korthikanti et al. "
    "2022, §4.3; megatron/core/tensor_parallel/cross_entropy.py, whose backward works in place)"};
constexpr Sourced<double> kMegatronCompiledLoss{4.0, "the same loss: its fusions do not change it"};

// Megatron-LM, Megatron-core and Megatron-DeepSpeed share the vocab-parallel embedding.
constexpr Sourced<bool> kMegatronEmbeddingGrad{
    true,
    "VocabParallelEmbedding looks its rows up with F.embedding (sparse=False), whose backward "
    "(aten embedding_dense_backward) zeroes a [v/t, h] gradient and adds each token's row into it; the DDP hook "
    "then adds that gradient into main_grad (param.main_grad.add_(param.grad)), every micro-batch"};

const std::array<FrameworkPreset, 4> kPresets = {{
    {
        "megatron-lm-2021",
        "Megatron-LM as Narayanan et al. (SC'21) ran it: fp16/bf16 mixed precision, the 1F1B and interleaved "
        "schedules, no distributed optimizer",
        {AttentionKernel::kUnfused,
         "attention as batched cuBLAS GEMMs around the fused scale-mask-softmax kernel "
         "(megatron/model/fused_softmax.py); FlashAttention (Dao et al.) was published in 2022"},
        {4,
         "every micro-batch accumulates into an fp32 main_grad buffer, all-reduced in fp32 "
         "(--accumulate-allreduce-grads-in-fp32, which megatron/arguments.py forces for bf16), as "
         "Korthikanti et al. count the same code base's model state (Fig. 1; docs/distrib_optimizer.md: "
         "18 bytes per parameter for bf16 params with fp32 grads)"},
        {false,
         "megatron/training.py train_step: forward_backward_func runs every micro-batch, then "
         "model.allreduce_gradients() reduces the whole gradient buffer at once; the bucketed reduction during "
         "the backward (--overlap-grad-reduce) arrived with Megatron-core in 2023"},
        {true,
         "megatron/p2p_communication.py: torch.distributed.batch_isend_irecv, a wait on every request, then "
         "torch.cuda.synchronize()"},
        {false,
         "the tensor-parallel all-reduces (the paper's f and g operators, §2.3) run on the compute stream; the "
         "input-gradient all-reduce beside the weight-gradient GEMM (--async-tensor-model-parallel-allreduce) "
         "came in later releases, which Korthikanti et al. (2022) ran"},
        {Zero3Unit::kLayer, "unused: Megatron-LM 2021 has no ZeRO-3 (below)"},
        {false, "unused: no ZeRO-3"},
        {false, "unused: no ZeRO-3"},
        0b0001,
        "no distributed optimizer: Megatron-LM's ZeRO-1 (--use-distributed-optimizer) came in 2022, and it has "
        "no ZeRO-2 or ZeRO-3",
        lacks("sequence parallelism came with Korthikanti et al. (2022)"),
        kHas,
        lacks("zero-bubble schedules (Qi et al., 2023) are not in Megatron-LM"),
        lacks("Megatron-LM runs 1F1B or interleaved 1F1B (megatron/schedules.py), not GPipe"),
        lacks("context parallelism came with Megatron-core (2023)"),
        lacks("FP8 needs TransformerEngine on Hopper (2022)"),
        lacks("no ZeRO-3, so no hybrid sharding"),
        lacks("layers must divide evenly over pipeline stages (megatron/arguments.py asserts it); "
              "--decoder-first/last-pipeline-num-layers came with Megatron-core (2024)"),
        kHas,
        lacks("Megatron-LM recomputes whole layers (--checkpoint-activations); op-level policies are PyTorch's "
              "selective activation checkpointing (2024), which torchtitan uses"),
        kEagerDispatch,
        {Elementwise::kFused,
         "Megatron-LM's fused kernels: Apex's FusedLayerNorm, bias-GeLU and bias-dropout-add fused by torch.jit "
         "(megatron/model/fused_layer_norm.py, fused_bias_gelu.py, transformer.py)"},
        kMegatronLoss,
        kMegatronCompiledLoss,
        {FlashKernel::kFused, "unused: the stack's attention is unfused (above)"},
        {CpAttention::kTe, "unused: the stack has no context parallelism (above)"},
        {false, "unused: the stack has no sequence parallelism (above)"},
        {0, "unused: no ZeRO-3"},
        {false, "unused: no ZeRO-3"},
        {LossKernel::kMegatron,
         "megatron/mpu/cross_entropy.py (_VocabParallelCrossEntropy) on output.float() "
         "(megatron/model/gpt_model.py post_language_model_processing, without --fp16-lm-cross-entropy): the "
         "upcast, then the max, the subtraction of the max, exp, the sum and the division into the softmax kept "
         "for the backward, one PyTorch kernel each and in place; the backward's multiply in place and the cast "
         "back"},
        kMegatronEmbeddingGrad,
    },
    {
        "megatron-core",
        "Megatron-core with TransformerEngine as NVIDIA's current recipes (NeMo, Megatron-Bridge) run it",
        {AttentionKernel::kFlash,
         "TransformerEngine's fused attention (cuDNN or flash backend), the default "
         "--transformer-impl transformer_engine"},
        {2,
         "the gradient buffer is in the parameters' dtype and reduced in it: DistributedDataParallelConfig."
         "grad_reduce_in_fp32 defaults to False (--accumulate-allreduce-grads-in-fp32 turns fp32 on)"},
        {true,
         "--overlap-grad-reduce (DistributedDataParallelConfig.overlap_grad_reduce), on in the NeMo and "
         "Megatron-Bridge performance recipes: buckets reduce while the backward runs"},
        {false,
         "--overlap-p2p-communication (on in the recipes that interleave): sends and receives run on their "
         "own stream beside the compute"},
        {true,
         "the input-gradient all-reduce (reduce-scatter under SP) runs beside the weight-gradient GEMM "
         "(LinearWithGradAccumulationAndAsyncCommunication, megatron/core/tensor_parallel/layers.py)"},
        {Zero3Unit::kLayer, "Megatron-FSDP gathers and reduce-scatters per transformer layer"},
        {false,
         "Loom's default, each pass gathering: Megatron-FSDP's behaviour under a pipeline is not among Loom's sources"},
        {false,
         "Megatron-FSDP keeps the bf16 model weights sharded beside the distributed optimizer's fp32 main weights"},
        0b1111,
        "the distributed optimizer (ZeRO-1, --use-distributed-optimizer) and Megatron-FSDP "
        "(--data-parallel-sharding-strategy optim, optim_grads, optim_grads_params: ZeRO-1, 2, 3)",
        kHas,
        kHas,
        lacks("zero-bubble schedules live in Sea AI Lab's fork, not in Megatron-core's schedules.py"),
        lacks("Megatron-core runs 1F1B or interleaved 1F1B (megatron/core/pipeline_parallel/schedules.py), not "
              "GPipe"),
        kHas,
        kHas,
        kHas,
        kHas,
        kHas,
        lacks("Megatron-core recomputes the attention core (--recompute-granularity selective), whole layers "
              "(full) or listed modules (--recompute-modules); op-level policies are PyTorch's selective "
              "activation checkpointing, which torchtitan uses"),
        kEagerDispatch,
        {Elementwise::kFused,
         "TransformerEngine's fused kernels: the norm inside LayerNormLinear, the fused bias-activation "
         "(bias_gelu_impl, bias_swiglu_impl) and RoPE as one kernel (--apply-rope-fusion)"},
        kMegatronLoss,
        kMegatronCompiledLoss,
        {FlashKernel::kFused,
         "TransformerEngine's DotProductAttention prefers cuDNN's FusedAttention to FlashAttention on Hopper and "
         "later \"for performance reasons\" (transformer_engine/pytorch/attention/dot_product_attention/utils.py "
         "get_attention_backend): the cost file's fused attention"},
        {CpAttention::kTe,
         "Megatron-core's context parallelism is TransformerEngine's attention with CP (cp_comm_type p2p, a2a, "
         "all_gather: transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py; "
         "../shared/reference/modern-parallelism.md section 1)"},
        {false,
         "Megatron-core's activations are [s, b, h] (megatron/core/transformer): sequence parallelism gathers and "
         "scatters the first dimension, in place"},
        {0,
         "Loom's default, one layer ahead: how far Megatron-FSDP prefetches is not among Loom's sources (with "
         "layers alike, one ahead already hides every gather that the compute can hide)"},
        {false,
         "Megatron-FSDP gathers into and reduce-scatters out of its own contiguous parameter and gradient buffers, "
         "which the modules' parameters and gradients are views of: no copy"},
        {LossKernel::kMegatron,
         "megatron/core/tensor_parallel/cross_entropy.py (VocabParallelCrossEntropy) on the upcast logits, "
         "unfused: TransformerConfig.cross_entropy_loss_fusion defaults to False. With the fusion "
         "(megatron/core/fusions/fused_cross_entropy.py) the upcast, the subtraction, exp and the sum run as "
         "fewer kernels, about 16 bytes a logit less in the forward, which Loom does not cost"},
        kMegatronEmbeddingGrad,
    },
    {
        "torchtitan",
        "torchtitan (PyTorch-native: FSDP2, DTensor tensor parallelism, torch.distributed.pipelining)",
        {AttentionKernel::kFlash, "PyTorch scaled_dot_product_attention (flash or cuDNN backend) or FlexAttention"},
        {4,
         "FSDP2's MixedPrecisionPolicy with bf16 parameters and fp32 reduce_dtype "
         "(torchtitan's mixed_precision_reduce defaults to float32)"},
        {true, "FSDP2 reduce-scatters each module's gradients as its backward ends; DDP buckets them"},
        {false,
         "torch.distributed.pipelining posts isend/irecv and waits only for a receive before the pass "
         "that consumes it"},
        {false,
         "DTensor's tensor-parallel collectives run on the compute stream; asynchronous TP "
         "(parallelism.enable_async_tensor_parallel, torch.compile's micro-pipelining) is off by "
         "default"},
        {Zero3Unit::kLayer,
         "fully_shard on every TransformerBlock: one all-gather and one reduce-scatter per layer (torchtitan's "
         "parallelize.py, FSDP2)"},
        {true,
         "under PP, apply_fsdp (parallelize_llama.py) sets reshard_after_forward=False, \"to avoid per-microbatch "
         "all-gathers\", and torch.distributed.pipelining's stage turns FSDP's gradient sync and reshard after "
         "backward off for all but the last backward, then runs FSDP's post-backward by hand (_stage.py): gradients "
         "accumulate unsharded in the reduce dtype"},
        {true,
         "FSDP2's fully_shard keeps each sharded parameter in its original dtype, fp32 (torchtitan builds the model "
         "in fp32), and casts to MixedPrecisionPolicy.param_dtype (bf16) only for the all-gather; the optimizer "
         "steps the fp32 shard itself: 4 + 4 (fp32 gradient) + 8 (Adam) bytes per parameter, no bf16 shard"},
        0b1001,
        "torchtitan replicates (DDP, ZeRO-0) or shards with FSDP2 (ZeRO-3); it has no ZeRO-1 or ZeRO-2",
        kHas,
        kHas,
        kHas,
        kHas,
        kHas,
        kHas,
        kHas,
        kHas,
        lacks("torchtitan's tensor-parallel plan shards the norms over the sequence (SequenceParallel in "
              "parallelize.py): its TP is always sequence-parallel"),
        kHas,
        kEagerDispatch,
        {Elementwise::kEager,
         "training.compile defaults to false, so the model runs in eager PyTorch (models/llama/model.py): "
         "nn.RMSNorm is ATen's composite rms_norm (an fp32 upcast, pow, mean, rsqrt, two multiplies, a "
         "downcast), RoPE a complex multiply in fp32 (apply_rotary_emb), repeat_kv copies K and V for GQA, "
         "SwiGLU a silu then a multiply; --elementwise fused for --training.compile, which compiles each "
         "TransformerBlock"},
        {12.0,
         "the loss is cross_entropy(pred.flatten(0, 1).float(), labels) (train.py loss_fn): the fp32 copy's "
         "log_softmax output (4 bytes) is kept; in the backward nll_loss's gradient (4) and log_softmax's "
         "(4) are made beside it, 12 bytes per logit (the bf16 logits, 2, are deleted before the backward; "
         "in the forward pred, its fp32 copy and the output make 10)"},
        {4.0,
         "compiled, torchtitan compiles the loss with the model (compile.components defaults to model and loss): "
         "the upcast fuses into the cross-entropy, which keeps the bf16 logits and writes their bf16 gradient, "
         "2 + 2 bytes. Before that option (torchtitan of 2024, training.compile) only the TransformerBlocks were "
         "compiled and the loss kept its eager 12"},
        {FlashKernel::kFa2,
         "scaled_dot_product_attention ran PyTorch's FLASH_ATTENTION backend, FlashAttention-2's kernels (PyTorch 2.2 "
         "release notes), in the nightlies of torchtitan's published runs (2024-12 to 2025-06): SDPA's priority order "
         "tried flash before cuDNN's attention, opt-in through TORCH_CUDNN_SDPA_PREFERRED (aten/src/ATen/native/"
         "transformers/cuda/sdp_utils.cpp), and under context parallelism torchtitan restricted SDPA to the flash "
         "and memory-efficient backends, the two ops PyTorch's ring attention handled (get_train_context). PyTorch "
         "2.11 picks cuDNN's on Hopper (bench/gpu/results/h100-sxm-flash-2026-11-22.json): --flash-kernel fused "
         "for a current stack"},
        {CpAttention::kPyTorch,
         "context_parallel_degree runs PyTorch's ring attention (torchtitan/distributed/context_parallel api, "
         "torch/distributed/tensor/experimental/_attention.py): one SDPA call per ring step, the partial outputs "
         "merged in fp32 (_SDPAMerger), the key/value gradients accumulated in fp32 and passed around the ring "
         "in fp32 (convert_to_f32); the default context_parallel_rotate_method all-gathers K and V "
         "(../shared/reference/modern-parallelism.md section 1, PT-CP)"},
        {true,
         "torchtitan's TP plan shards the sequence as dimension 1 of [b, s, h] (SequenceParallel, "
         "RowwiseParallel(output_layouts=Shard(1)) in parallelize.py), and DTensor's all-gather and reduce-scatter "
         "on a dimension other than 0 copy the whole tensor, torch.cat(torch.chunk(...)) after the gather and before "
         "the scatter (torch/distributed/_functional_collectives.py all_gather_tensor, reduce_scatter_tensor); not "
         "under asynchronous TP, whose fused all-gather-matmul and matmul-reduce-scatter "
         "(torch/distributed/_symmetric_memory) move the dimension to the front as a view"},
        {0,
         "FSDP2's default overlap prefetches one module ahead; explicit lists of two or more modules "
         "(set_modules_to_forward_prefetch, set_modules_to_backward_prefetch) prefetch more "
         "(../shared/reference/collectives-at-scale.md section 4)"},
        {true,
         "FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py): foreach_all_gather copies each rank's "
         "shards, cast to the param dtype, into the all-gather buffer (all_gather_copy_in, on its copy-in stream); "
         "foreach_all_gather_copy_out copies the gathered buffer out into the unsharded parameters "
         "(split_with_sizes_copy) on the compute stream, before the unit's pass; foreach_reduce copies the "
         "unsharded gradients into the reduce-scatter buffer, cast to the reduce dtype (_chunk_cat in "
         "foreach_reduce_scatter_copy_in), on the reduce-scatter stream before the collective"},
        {LossKernel::kNominal,
         "not derived: ATen's log_softmax and nll_loss kernels (eager) or the compiled loss are not costed pass "
         "by pass; Loom's nominal charge"},
        {true,
         "tok_embeddings is an nn.Embedding (sparse=False), outside the blocks torch.compile compiles "
         "(apply_compile compiles each TransformerBlock): its backward, aten embedding_dense_backward, zeroes a "
         "[v, h] gradient and adds each token's row into it; FSDP2 then copies it into the reduce-scatter"},
    },
    {
        "deepspeed",
        "DeepSpeed's ZeRO engine and pipeline engine running Megatron-DeepSpeed's GPT, as its 2021-2022 ZeRO-3 and 3D "
        "runs did",
        {AttentionKernel::kUnfused,
         "Megatron-DeepSpeed's attention without --use-flash-attn (its default): batched "
         "GEMMs around a fused softmax"},
        {2,
         "fp16 gradients reduced and partitioned in fp16 (ZeRO's 2 + 2 + 12 bytes per parameter, Rajbhandari "
         "et al. 2020, §3.1)"},
        {true,
         "overlap_comm, on by default at ZeRO-3 (runtime/zero/config.py): gradient buckets (reduce_bucket_size "
         "5e8) reduce while the backward runs"},
        {true,
         "the pipeline engine's p2p.send and p2p.recv are blocking torch.distributed calls "
         "(runtime/pipe/p2p.py)"},
        {false, "the model's tensor-parallel all-reduces run on the compute stream"},
        {Zero3Unit::kModule,
         "a hook on every submodule with parameters gathers them (coalesced per module) before "
         "its forward and backward and reduce-scatters its gradients "
         "(runtime/zero/partitioned_param_coordinator.py, stage3.py)"},
        {false, "unused: DeepSpeed's pipeline engine refuses ZeRO-2 and ZeRO-3 (runtime/pipe/engine.py)"},
        {false,
         "stage 3 partitions the fp16 parameters and keeps the fp32 master partition in the optimizer (Rajbhandari et "
         "al. 2020: 2 + 2 + 12 bytes)"},
        0b1111,
        "ZeRO stages 1, 2 and 3 (Rajbhandari et al. 2020)",
        lacks("Megatron-DeepSpeed's 2021-2022 code base predates Megatron-LM's sequence parallelism (2022)"),
        lacks("DeepSpeed's pipeline engine runs one model chunk per stage (runtime/pipe/schedule.py TrainSchedule)"),
        lacks("zero-bubble schedules (Qi et al., 2023) are not in DeepSpeed's pipeline engine"),
        lacks("DeepSpeed's TrainSchedule interleaves forwards and backwards as 1F1B does, not GPipe's all-forward"),
        lacks("DeepSpeed-Ulysses (all-to-all context parallelism) came in 2023, after the runs this preset describes"),
        lacks("no FP8 in DeepSpeed's engine"),
        kHas,
        kHas,
        kHas,
        lacks("DeepSpeed's activation checkpointing recomputes whole layers (runtime/activation_checkpointing)"),
        kEagerDispatch,
        {Elementwise::kFused,
         "Megatron-DeepSpeed keeps Megatron-LM's fused kernels (FusedLayerNorm, bias-GeLU and "
         "bias-dropout-add fused by torch.jit)"},
        kMegatronLoss,
        kMegatronCompiledLoss,
        {FlashKernel::kFused, "unused: the stack's attention is unfused (above)"},
        {CpAttention::kTe, "unused: the stack has no context parallelism (above)"},
        {false, "unused: the stack has no sequence parallelism (above)"},
        {5e7,
         "stage3_prefetch_bucket_size, 5e7 elements by default (runtime/zero/config.py): each module's hook "
         "prefetches the modules after it in the trace of the first step up to that many elements, at least one "
         "(runtime/zero/partitioned_param_coordinator.py; ../shared/reference/collectives-at-scale.md section 4); "
         "the 1e9-element stage3_max_live_parameters cap is not modelled"},
        {false,
         "not charged: the partitioned parameters are views into the all-gather's flat output (no copy out); "
         "reduce_scatter_coalesced's interleaving, padding and concatenation are extra device copies "
         "(../shared/reference/collectives-at-scale.md section 4) whose layout Loom's sources do not give"},
        {LossKernel::kMegatron,
         "Megatron-DeepSpeed keeps Megatron-LM's megatron/mpu/cross_entropy.py and its upcast of the logits"},
        {true,
         "Megatron-DeepSpeed keeps Megatron-LM's VocabParallelEmbedding (F.embedding, sparse=False): a dense "
         "[v/t, h] gradient each micro-batch, accumulated into the parameter's gradient by autograd"},
    },
}};

}  // namespace

std::span<const FrameworkPreset> framework_presets() { return kPresets; }

std::string framework_names() {
  std::string out;
  for (std::size_t i = 0; i < kPresets.size(); ++i) {
    if (i > 0) out += i + 1 == kPresets.size() ? " or " : ", ";
    out += kPresets[i].name;
  }
  return out;
}

Result<const FrameworkPreset*> find_framework(std::string_view name) {
  for (const auto& p : kPresets)
    if (name == p.name) return &p;
  return make_error(fmt::format("--framework: unknown framework '{}' ({})", name, framework_names()));
}

void apply_framework(const FrameworkPreset& preset, TrainingSpec& t, ExplicitTraining keep) {
  t.framework = preset.name;
  if (!keep.attention) t.attention = preset.attention.value;
  if (!keep.grad_bytes) t.grad_bytes = preset.grad_bytes.value;
  if (!keep.pipeline_sends_block) t.pipeline_sends_block = preset.pipeline_sends_block.value;
  t.overlap_grad_reduce = preset.overlap_grad_reduce.value;
  t.tp_comm_overlap = preset.tp_comm_overlap.value;
  t.zero3_unit = preset.zero3_unit.value;
  t.zero3_pp_keep_gathered = preset.zero3_pp_keep_gathered.value;
  t.zero3_fp32_shards = preset.zero3_fp32_shards.value;
  if (!keep.host_op_s) t.host_op_s = preset.host_op_s.value;
  if (!keep.elementwise) t.elementwise = preset.elementwise.value;
  if (!keep.flash_kernel) t.flash_kernel = preset.flash_kernel.value;
  if (!keep.cp_attention) t.cp_attention = preset.cp_attention.value;
  t.sp_collective_copies = preset.sp_collective_copies.value;
  t.zero3_collective_copies = preset.zero3_collective_copies.value;
  if (!keep.zero3_prefetch_elements) t.zero3_prefetch_elements = preset.zero3_prefetch_elements.value;
  t.loss_bytes_per_logit = t.elementwise == Elementwise::kEager ? preset.loss_bytes_per_logit.value
                                                                : preset.compiled_loss_bytes_per_logit.value;
  t.head_casts_logits_grad = false;  // the preset's loss figure is the whole of what its loss holds
  t.softmax_bwd_applies_dropout = false;
  t.loss_kernel = preset.loss_kernel.value;
  t.embedding_grad_dense = preset.embedding_grad_dense.value;
}

std::optional<std::string> framework_lacks(const FrameworkPreset& p, const TrainingSpec& t, const ParallelConfig& c) {
  auto no = [&](const char* feature, const Missing& m) -> std::optional<std::string> {
    if (!m.missing) return std::nullopt;
    return fmt::format("{}: {} ({})", p.name, feature, m.why);
  };
  if (c.zero < 0 || c.zero > 3 || !(p.zero_stages & (1u << c.zero)))
    return fmt::format("{}: ZeRO-{} ({})", p.name, c.zero, p.zero_source);
  if (c.sequence_parallel && c.tp > 1)
    if (auto why = no("sequence parallelism", p.sequence_parallel)) return why;
  if (!c.sequence_parallel && c.tp > 1)
    if (auto why = no("tensor parallelism without sequence parallelism", p.tp_without_sp)) return why;
  if (c.schedule == Schedule::kInterleaved)
    if (auto why = no("the interleaved schedule", p.interleaved)) return why;
  if (c.schedule == Schedule::kZeroBubble)
    if (auto why = no("the zero-bubble schedule", p.zero_bubble)) return why;
  if (c.schedule == Schedule::kGPipe && c.pp > 1)
    if (auto why = no("the GPipe schedule", p.gpipe)) return why;
  if (c.cp > 1)
    if (auto why = no("context parallelism", p.context_parallel)) return why;
  if (t.precision == Precision::kFp8)
    if (auto why = no("FP8", p.fp8)) return why;
  if (c.zero == 3 && c.shard_group > 0 && c.shard_group < c.dp)
    if (auto why = no("hybrid sharding", p.hsdp)) return why;
  if (!c.split.even() && c.pp > 1)
    if (auto why = no("uneven pipeline stages", p.uneven_stages)) return why;
  if (c.recompute == Recompute::kOp)
    if (auto why = no("op-level activation checkpointing", p.op_recompute)) return why;
  return std::nullopt;
}

}  // namespace loom
