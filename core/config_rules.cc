#include "core/config_rules.h"

#include <fmt/format.h>

#include "core/framework.h"
#include "core/pipeline_split.h"

namespace loom {

namespace {

RuleViolation broken(std::string_view rule, std::string message) { return {std::string(rule), std::move(message)}; }

int seq_len_of(const ModelSpec& model, const TrainingSpec& training) {
  return training.seq_len > 0 ? training.seq_len : model.seq_len;
}

RuleStatus check_all(const ModelSpec& model, const TrainingSpec& training, const ClusterSpec* cluster,
                     const ParallelConfig& c, StageSplit split) {
  if (auto s = check_sizes(c); !s) return s;
  if (auto s = check_world_size(training, c); !s) return s;
  if (auto s = check_tp(model, c.tp); !s) return s;
  if (auto s = check_cp(model, training, c); !s) return s;
  if (cluster)
    if (auto s = check_tp_placement(*cluster, training, c.tp); !s) return s;
  if (auto s = check_layout(model, training, c, split); !s) return s;
  if (auto s = check_micro_batch(training, c); !s) return s;
  if (auto s = check_schedule(model, c, c.micro_batches(training.global_batch), split); !s) return s;
  if (auto s = check_zero(c); !s) return s;
  if (auto s = check_sequence_parallel(model, training, c); !s) return s;
  if (auto s = check_recompute(model, training, c); !s) return s;
  if (auto s = check_ep(model, c); !s) return s;
  return check_framework(training, c);
}

}  // namespace

RuleStatus check_framework(const TrainingSpec& training, const ParallelConfig& c) {
  if (training.framework.empty()) return {};
  auto preset = find_framework(training.framework);
  if (!preset) return broken(rule::kFramework, preset.error().message);
  if (auto why = framework_lacks(**preset, training, c)) return broken(rule::kFramework, *why);
  return {};
}

RuleStatus check_recompute(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& c) {
  if (c.recompute != Recompute::kOp) return {};
  if (model.moe.active() || model.mla.active())
    return broken(rule::kOpRecomputeDense,
                  fmt::format("--recompute op (torchtitan's op-level activation checkpointing) is modelled for dense "
                              "models with GPT/LLaMA attention, not {}'s {}",
                              model.name, model.moe.active() ? "mixture-of-experts layers" : "latent attention"));
  if (training.attention == AttentionKernel::kUnfused)
    return broken(rule::kOpRecomputeFlash,
                  "--recompute op keeps scaled-dot-product attention's output and log-sum-exp (a flash kernel's), "
                  "not --attention unfused's probabilities");
  return {};
}

RuleStatus check_ep(const ModelSpec& model, const ParallelConfig& c) {
  const int etp = c.expert_tp();
  if (etp != c.tp) {
    if (!model.moe.active())
      return broken(rule::kEpNeedsMoe,
                    fmt::format("etp {} needs a mixture-of-experts model; {} has no routed experts", etp, model.name));
    // The simulator and the executor model the two ends: experts split like the dense MLP, or whole.
    if (etp != 1)
      return broken(rule::kEtp, fmt::format("etp {} must be 1 or tp {} (experts split over TP or whole)", etp, c.tp));
    if (c.zero >= 3 || c.shard_group > 0)
      return broken(rule::kEpZero3, fmt::format("etp {} with ZeRO-3{} is not modelled: experts' states are sharded by "
                                                "ZeRO-1/2 over the expert-data-parallel group",
                                                etp, c.shard_group > 0 ? " (HSDP)" : ""));
  }
  if (c.ep == 1) return {};
  if (!model.moe.active())
    return broken(rule::kEpNeedsMoe,
                  fmt::format("ep {} needs a mixture-of-experts model; {} has no routed experts", c.ep, model.name));
  if (model.moe.experts % c.ep != 0)
    return broken(rule::kEpExperts, fmt::format("{} experts are not divisible by ep {}", model.moe.experts, c.ep));
  if (etp == c.tp && c.grad_ranks() % c.ep != 0)
    return broken(rule::kEpGradRanks, fmt::format("ep {} must divide dp·cp = {} (expert-parallel ranks come from the "
                                                  "data-parallel group)",
                                                  c.ep, c.grad_ranks()));
  if (etp != c.tp && (c.tp * c.grad_ranks()) % c.ep != 0)
    return broken(rule::kEpGradRanks, fmt::format("ep {} must divide tp·dp·cp = {} (with etp 1 expert-parallel ranks "
                                                  "come from the tensor- and data-parallel groups)",
                                                  c.ep, c.tp * c.grad_ranks()));
  if (c.zero >= 3 || c.shard_group > 0)
    return broken(rule::kEpZero3, fmt::format("ep {} with ZeRO-3{} is not modelled: experts' states are sharded by "
                                              "ZeRO-1/2 over the expert-data-parallel group",
                                              c.ep, c.shard_group > 0 ? " (HSDP)" : ""));
  return {};
}

RuleStatus check_sizes(const ParallelConfig& c) {
  if (c.tp < 1 || c.pp < 1 || c.dp < 1 || c.micro_batch < 1 || c.vpp < 1)
    return broken(rule::kSizes, fmt::format("tp {}, pp {}, dp {}, micro-batch {} and vpp {} must each be at least 1",
                                            c.tp, c.pp, c.dp, c.micro_batch, c.vpp));
  if (c.cp < 1) return broken(rule::kSizes, fmt::format("cp {} must be at least 1", c.cp));
  if (c.ep < 1) return broken(rule::kSizes, fmt::format("ep {} must be at least 1", c.ep));
  if (c.split.first_stage_layers < 0 || c.split.last_stage_layers < 0)
    return broken(rule::kSizes, fmt::format("first stage layers {} and last stage layers {} must not be negative",
                                            c.split.first_stage_layers, c.split.last_stage_layers));
  return {};
}

RuleStatus check_world_size(const TrainingSpec& training, const ParallelConfig& c) {
  if (c.world_size() != training.gpus)
    return broken(rule::kWorldSize, fmt::format("tp {}{} × pp {} × dp {} = {} but --gpus is {}", c.tp,
                                                c.cp > 1 ? fmt::format(" × cp {}", c.cp) : "", c.pp, c.dp,
                                                c.world_size(), training.gpus));
  return {};
}

RuleStatus check_cp(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& c) {
  if (c.cp == 1) return {};
  // Causal load balancing cuts the sequence into 2·cp chunks, rank r keeping chunks r and
  // 2·cp−1−r (Megatron-LM docs/user-guide/features/context_parallel.md; arguments.py asserts it).
  const int seq = seq_len_of(model, training);
  if (seq % (2 * c.cp) != 0)
    return broken(rule::kCpSeq, fmt::format("sequence {} not divisible by 2·cp = {} (causal load balancing cuts it "
                                            "into 2·cp chunks)",
                                            seq, 2 * c.cp));
  // A window shorter than the sequence changes which K/V chunks each rank's queries need (a ring
  // would skip the far ones); Loom costs CP for causal attention over the whole sequence only.
  if (model.windowed_at(seq))
    return broken(rule::kCpSlidingWindow,
                  fmt::format("cp {} under sliding-window attention ({} of {} layers see {} tokens) is not modelled",
                              c.cp, model.sliding_layers, model.layers, model.sliding_window));
  if (model.chunked_at(seq))
    return broken(rule::kCpSlidingWindow,
                  fmt::format("cp {} under chunked attention ({} of {} layers attend within chunks of {} tokens) is "
                              "not modelled",
                              c.cp, model.chunked_layers, model.layers, model.attention_chunk));
  // TransformerEngine runs CP only in its flash and cuDNN fused attention backends; the unfused
  // one asserts against it (dot_product_attention/backends.py, UnfusedDotProductAttention).
  if (training.attention != AttentionKernel::kFlash)
    return broken(rule::kCpNeedsFlash,
                  fmt::format("cp {} needs flash (fused) attention, not {}", c.cp, to_string(training.attention)));
  // PyTorch's ring attention rotates K and V by an all-gather or around the ring (_RotateMethod
  // ALL_GATHER, ALL_TO_ALL); it has no head-sharding (Ulysses) exchange.
  if (training.cp_attention == CpAttention::kPyTorch && c.cp_comm == CpComm::kA2A)
    return broken(rule::kCpPyTorchA2a,
                  "a2a context parallelism is TransformerEngine's; PyTorch's ring attention (--cp-attention pytorch) "
                  "exchanges keys and values by p2p or all_gather");
  // Ulysses turns sequence sharding into head sharding: every tp·cp rank needs whole query and
  // key/value heads (TransformerEngine flash_attn_a2a_communicate asserts heads % cp == 0).
  if (c.cp_comm == CpComm::kA2A) {
    const long long ranks = static_cast<long long>(c.tp) * c.cp;
    if (model.heads % ranks != 0 || model.kv_heads % ranks != 0)
      return broken(rule::kCpA2aHeads,
                    fmt::format("a2a context parallelism needs heads {} and kv_heads {} divisible by tp·cp = {}",
                                model.heads, model.kv_heads, ranks));
  }
  return {};
}

RuleStatus check_tp(const ModelSpec& model, int tp) {
  if (model.heads % tp != 0)
    return broken(rule::kHeadsTp, fmt::format("heads {} not divisible by tp {}", model.heads, tp));
  if (model.kv_heads % tp != 0)
    return broken(rule::kKvHeadsTp, fmt::format("kv_heads {} not divisible by tp {} (query groups must split evenly)",
                                                model.kv_heads, tp));
  if (model.ffn_hidden % tp != 0)
    return broken(rule::kFfnTp, fmt::format("ffn_hidden {} not divisible by tp {}", model.ffn_hidden, tp));
  return {};
}

// Tensor parallelism all-reduces inside every layer; across nodes it runs at the inter-node
// bandwidth, which Megatron-LM's guidance (and every published layout) avoids.
RuleStatus check_tp_placement(const ClusterSpec& cluster, const TrainingSpec& training, int tp) {
  if (!training.allow_cross_node_tp && tp > cluster.gpus_per_node)
    return broken(rule::kTpSpansNodes, fmt::format("tp {} spans nodes of {} GPUs (pass --allow-cross-node-tp to allow)",
                                                   tp, cluster.gpus_per_node));
  return {};
}

RuleStatus check_layout(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& c,
                        StageSplit split) {
  if (auto s = check_split_stages(model, c, split); !s) return s;
  if (training.global_batch < 1 || training.global_batch % c.dp != 0)
    return broken(rule::kBatchDp, fmt::format("global batch {} not divisible by dp {}", training.global_batch, c.dp));
  return {};
}

RuleStatus check_micro_batch(const TrainingSpec& training, const ParallelConfig& c) {
  const std::int64_t per_step = static_cast<std::int64_t>(c.dp) * c.micro_batch;
  if (training.global_batch % per_step != 0)
    return broken(rule::kBatchMicroBatch, fmt::format("global batch {} not divisible by dp {} × micro-batch {}",
                                                      training.global_batch, c.dp, c.micro_batch));
  // The step graph holds each micro-batch's passes through each model chunk of each stage: about 300 bytes
  // an op, so 2^21 forward passes take about 1.3 GB and 2 s to simulate. The largest published runs need
  // tens of thousands (1T parameters over 64 stages: 32,768); a global batch of 2^30 on one GPU asked for
  // 2^30 and ran the machine out of memory.
  const std::int64_t passes = training.global_batch / per_step * c.pp * c.vpp;
  if (passes > kMaxSimulatedPasses)
    return broken(rule::kTooManyPasses,
                  fmt::format("{} micro-batches × pp {} × vpp {} = {} forward passes a step, more than the {} Loom "
                              "simulates (a larger micro-batch or dp has fewer)",
                              training.global_batch / per_step, c.pp, c.vpp, passes, kMaxSimulatedPasses));
  return {};
}

RuleStatus check_schedule(const ModelSpec& model, const ParallelConfig& c, std::int64_t micro_batches,
                          StageSplit split) {
  const bool interleaved = c.schedule == Schedule::kInterleaved;
  if (c.vpp > 1 && !interleaved)
    return broken(rule::kVppNeedsInterleaved,
                  fmt::format("vpp {} needs the interleaved schedule, not {}", c.vpp, to_string(c.schedule)));
  // One stage has nothing to interleave with (Megatron-LM asserts pp > 1 for it too).
  if (interleaved && c.pp < 2)
    return broken(rule::kInterleavedNeedsPp, "the interleaved schedule needs pp of at least 2");
  if (auto s = check_split_chunks(model, c, split); !s) return s;
  // Micro-batches advance through the model chunks in groups of pp (Narayanan et al. 2021, §2.2.2).
  if (interleaved && micro_batches % c.pp != 0)
    return broken(
        rule::kInterleavedMicroBatches,
        fmt::format("interleaved schedule needs micro-batches ({}) divisible by pp ({})", micro_batches, c.pp));
  return {};
}

RuleStatus check_zero(const ParallelConfig& c) {
  if (c.zero < 0 || c.zero > 3)
    return broken(rule::kZeroStage, fmt::format("ZeRO stage {} does not exist (0 to 3)", c.zero));
  if (c.shard_group == 0) return {};
  if (c.zero != 3)
    return broken(
        rule::kShardGroup,
        fmt::format("shard group {} needs ZeRO-3 (HSDP shards ZeRO-3's states), not ZeRO-{}", c.shard_group, c.zero));
  if (c.shard_group < 2 || c.shard_group >= c.dp || c.dp % c.shard_group != 0)
    return broken(rule::kShardGroup,
                  fmt::format("shard group {} must divide dp {} and lie between 2 and dp/2 (dp itself is plain ZeRO-3)",
                              c.shard_group, c.dp));
  return {};
}

// Sequence parallelism splits the tokens of a micro-batch over the tensor-parallel ranks outside
// the tensor-parallel regions (Korthikanti et al. 2022, §4.2.2): it needs tp ranks to split over
// and an even split.
RuleStatus check_sequence_parallel(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& c) {
  // Whole experts on each TP rank route that rank's own tokens: the TP ranks must hold different ones.
  if (model.moe.active() && c.expert_tp() < c.tp && !c.sequence_parallel)
    return broken(rule::kEtpNeedsSp, fmt::format("etp {} below tp {} needs sequence parallelism (each TP rank routes "
                                                 "its own tokens to whole experts)",
                                                 c.expert_tp(), c.tp));
  if (!c.sequence_parallel) return {};
  if (c.tp == 1) return broken(rule::kSpNeedsTp, "sequence parallelism needs tp > 1");
  // Under context parallelism each rank splits its own s/cp tokens.
  const std::int64_t tokens = static_cast<std::int64_t>(c.micro_batch) * seq_len_of(model, training) / c.cp;
  if (tokens % c.tp != 0)
    return broken(rule::kSpTokens, fmt::format("sequence parallelism needs micro_batch·seq{} ({}) divisible by tp {}",
                                               c.cp > 1 ? "/cp" : "", tokens, c.tp));
  return {};
}

RuleStatus check_config(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& config,
                        StageSplit split) {
  return check_all(model, training, nullptr, config, split);
}

RuleStatus check_config(const ModelSpec& model, const TrainingSpec& training, const ClusterSpec& cluster,
                        const ParallelConfig& config) {
  return check_all(model, training, &cluster, config, StageSplit::kEven);
}

}  // namespace loom
