// The names Loom writes and reads for its enums (cost files, plans, model JSON, traces): one table
// per enum, used both to print a value and to parse one, so every name is spelled exactly once.
// Tables list each value's canonical name first; later entries for the same value are aliases.
#pragma once

#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace loom {

enum class Collective { kAllReduce, kReduceScatter, kAllGather, kSendRecv };
enum class LinkLevel { kIntraNode, kInterNode };
enum class Activation { kGelu, kSwiGLU };
enum class Norm { kLayerNorm, kRMSNorm };
enum class PositionEmbedding { kLearned, kRotary };
// QK-norm: Q and K normalised (RMSNorm) after their projection, before RoPE and the scores. kPerHead: over each
// head's head_dim, one weight of head_dim for Q's heads and one for K's (Qwen3, Gemma 3, GLM-4.5's use_qk_norm;
// Megatron-core's --qk-layernorm); kFullWidth: over the whole Q and the whole K, weights as wide (OLMo 2 and 3,
// OLMoE).
enum class QkNorm { kNone, kPerHead, kFullWidth };
enum class AttentionKernel { kFlash, kUnfused };
// The precision of the linear layers' GEMMs: bf16 mixed precision, or FP8 as TransformerEngine runs it.
enum class Precision { kBf16, kFp8 };
// How FP8 scaling factors are chosen (Megatron-LM --fp8-recipe; TransformerEngine recipes): from an
// amax history of earlier steps (DelayedScaling), or from each tensor's own amax, read before the cast
// (Float8CurrentScaling; torchao's "tensorwise").
// FP8 scaling: TransformerEngine's delayed scaling (amax history), current scaling with one scale per
// tensor (TE's Float8CurrentScaling, torchao's "tensorwise"), or torchao's "rowwise" recipe, one scale per
// row of each GEMM operand along its reduction dimension (torch._scaled_mm's rowwise kernel).
enum class Fp8Recipe { kDelayed, kTensorwise, kRowwise };
// What one ZeRO-3 parameter gather (and gradient reduce-scatter) covers: a transformer layer, as
// FSDP's per-block units and Loom's executor run them, or one linear module, as DeepSpeed's hooks
// on every submodule with parameters do.
enum class Zero3Unit { kLayer, kModule };
// How the element-wise work around the GEMMs runs: fused (torch.compile, TransformerEngine, Megatron's
// fused kernels: one kernel per norm, activation and RoPE), or eager PyTorch, where a composite op such
// as RMSNorm is one ATen kernel per primitive (cost model: CostModel::add_norm and neighbours).
enum class Elementwise { kFused, kEager };
// Which kernel a fused (flash) attention runs: the cost file's fused attention (cuDNN's on Hopper and
// Blackwell, as TransformerEngine and current PyTorch run it: ClusterSpec flash_attention_*) or
// FlashAttention-2's kernels, PyTorch's FLASH_ATTENTION backend of scaled_dot_product_attention
// (fa2_attention_*). Unfused attention ignores it.
enum class FlashKernel { kFused, kFa2 };
// Which library runs context-parallel attention (ParallelConfig::cp > 1): TransformerEngine's
// context_parallel.py, as Megatron-core runs it (one attention kernel per ring step, the partial outputs
// merged inside its kernels' softmax statistics), or PyTorch's torch.distributed.tensor.experimental
// _attention.py, as torchtitan runs it (one scaled_dot_product_attention call per step, the partial
// outputs merged by eager fp32 ops, the key/value gradients passed around the ring in fp32).
enum class CpAttention { kTe, kPyTorch };
// The loss's element-wise kernels after the LM head's GEMM, by what they read and write per logit of a
// rank's vocabulary share (CostModel::add_loss):
// - kExecutor, Loom's executor (exec/model/gpt_stage.cc): the GEMM writes fp32 logits; the max and the sum
//   of exponentials come from one read of each row where one rank holds whole rows (two reads, the max's
//   all-reduce between them, under TP); the gradient is written, in the activation dtype, at the end of
//   the forward where the statistics are at hand.
// - kMegatron, Megatron's vocabulary-parallel cross-entropy on the upcast logits, one PyTorch kernel per
//   pass over them (the preset that names it gives the code).
// - kNominal, Loom's first estimate for a stack whose loss kernels it has not read: the logits and two
//   fp32 passes forward, one fp32 read and a write in the activation dtype backward.
enum class LossKernel { kExecutor, kMegatron, kNominal };

template <typename E>
struct NameEntry {
  E value;
  const char* name;
};

inline constexpr NameEntry<Collective> kCollectiveNames[] = {{Collective::kAllReduce, "all_reduce"},
                                                             {Collective::kReduceScatter, "reduce_scatter"},
                                                             {Collective::kAllGather, "all_gather"},
                                                             {Collective::kSendRecv, "send_recv"}};
inline constexpr NameEntry<LinkLevel> kLinkLevelNames[] = {{LinkLevel::kIntraNode, "intra_node"},
                                                           {LinkLevel::kInterNode, "inter_node"}};
inline constexpr NameEntry<Activation> kActivationNames[] = {{Activation::kGelu, "gelu"},
                                                             {Activation::kSwiGLU, "swiglu"}};
inline constexpr NameEntry<Norm> kNormNames[] = {{Norm::kLayerNorm, "layernorm"}, {Norm::kRMSNorm, "rmsnorm"}};
inline constexpr NameEntry<PositionEmbedding> kPositionEmbeddingNames[] = {{PositionEmbedding::kLearned, "learned"},
                                                                           {PositionEmbedding::kRotary, "rope"}};
inline constexpr NameEntry<QkNorm> kQkNormNames[] = {
    {QkNorm::kNone, "none"}, {QkNorm::kPerHead, "per_head"}, {QkNorm::kFullWidth, "full_width"}};
inline constexpr NameEntry<AttentionKernel> kAttentionKernelNames[] = {{AttentionKernel::kFlash, "flash"},
                                                                       {AttentionKernel::kUnfused, "unfused"}};
inline constexpr NameEntry<Precision> kPrecisionNames[] = {{Precision::kBf16, "bf16"}, {Precision::kFp8, "fp8"}};
inline constexpr NameEntry<Fp8Recipe> kFp8RecipeNames[] = {{Fp8Recipe::kDelayed, "delayed"},
                                                           {Fp8Recipe::kTensorwise, "tensorwise"},
                                                           {Fp8Recipe::kRowwise, "rowwise"},
                                                           {Fp8Recipe::kTensorwise, "current"}};

inline constexpr NameEntry<Zero3Unit> kZero3UnitNames[] = {{Zero3Unit::kLayer, "layer"},
                                                           {Zero3Unit::kModule, "module"}};
inline constexpr NameEntry<Elementwise> kElementwiseNames[] = {{Elementwise::kFused, "fused"},
                                                               {Elementwise::kEager, "eager"}};
inline constexpr NameEntry<FlashKernel> kFlashKernelNames[] = {{FlashKernel::kFused, "fused"},
                                                               {FlashKernel::kFa2, "fa2"}};
inline constexpr NameEntry<LossKernel> kLossKernelNames[] = {
    {LossKernel::kExecutor, "executor"}, {LossKernel::kMegatron, "megatron"}, {LossKernel::kNominal, "nominal"}};
inline constexpr NameEntry<CpAttention> kCpAttentionNames[] = {{CpAttention::kTe, "te"},
                                                               {CpAttention::kPyTorch, "pytorch"}};

// The table of an enum's names, for code generic over enums (tests, error messages).
template <typename E>
constexpr std::span<const NameEntry<E>> name_table();
template <>
constexpr std::span<const NameEntry<Collective>> name_table<Collective>() {
  return kCollectiveNames;
}
template <>
constexpr std::span<const NameEntry<LinkLevel>> name_table<LinkLevel>() {
  return kLinkLevelNames;
}
template <>
constexpr std::span<const NameEntry<Activation>> name_table<Activation>() {
  return kActivationNames;
}
template <>
constexpr std::span<const NameEntry<Norm>> name_table<Norm>() {
  return kNormNames;
}
template <>
constexpr std::span<const NameEntry<PositionEmbedding>> name_table<PositionEmbedding>() {
  return kPositionEmbeddingNames;
}
template <>
constexpr std::span<const NameEntry<QkNorm>> name_table<QkNorm>() {
  return kQkNormNames;
}
template <>
constexpr std::span<const NameEntry<AttentionKernel>> name_table<AttentionKernel>() {
  return kAttentionKernelNames;
}

template <>
constexpr std::span<const NameEntry<Precision>> name_table<Precision>() {
  return kPrecisionNames;
}
template <>
constexpr std::span<const NameEntry<Fp8Recipe>> name_table<Fp8Recipe>() {
  return kFp8RecipeNames;
}
template <>
constexpr std::span<const NameEntry<Zero3Unit>> name_table<Zero3Unit>() {
  return kZero3UnitNames;
}
template <>
constexpr std::span<const NameEntry<Elementwise>> name_table<Elementwise>() {
  return kElementwiseNames;
}
template <>
constexpr std::span<const NameEntry<FlashKernel>> name_table<FlashKernel>() {
  return kFlashKernelNames;
}
template <>
constexpr std::span<const NameEntry<CpAttention>> name_table<CpAttention>() {
  return kCpAttentionNames;
}
template <>
constexpr std::span<const NameEntry<LossKernel>> name_table<LossKernel>() {
  return kLossKernelNames;
}

// The canonical name of `value` in `table` ("?" if the table lacks it, which a test rules out).
template <typename E>
constexpr const char* name_in(std::span<const NameEntry<E>> table, E value) {
  for (const auto& e : table)
    if (e.value == value) return e.name;
  return "?";
}

// The value `text` names in `table` (canonical name or alias); nullopt for an unknown name.
template <typename E>
constexpr std::optional<E> parse_in(std::span<const NameEntry<E>> table, std::string_view text) {
  for (const auto& e : table)
    if (text == e.name) return e.value;
  return std::nullopt;
}

// The canonical names of a table for an error message: "a, b or c".
template <typename E>
std::string one_of(std::span<const NameEntry<E>> table) {
  std::string out;
  int listed = 0, canonical = 0;
  for (const auto& e : table) canonical += name_in(table, e.value) == e.name;
  for (const auto& e : table) {
    if (name_in(table, e.value) != e.name) continue;  // an alias
    if (listed > 0) out += listed + 1 == canonical ? " or " : ", ";
    out += e.name;
    ++listed;
  }
  return out;
}
template <typename E>
std::string one_of() {
  return one_of(name_table<E>());
}

inline const char* to_string(Collective c) { return name_in<Collective>(kCollectiveNames, c); }
inline const char* to_string(LinkLevel l) { return name_in<LinkLevel>(kLinkLevelNames, l); }
inline const char* to_string(Activation a) { return name_in<Activation>(kActivationNames, a); }
inline const char* to_string(Norm n) { return name_in<Norm>(kNormNames, n); }
inline const char* to_string(PositionEmbedding p) { return name_in<PositionEmbedding>(kPositionEmbeddingNames, p); }
inline const char* to_string(QkNorm q) { return name_in<QkNorm>(kQkNormNames, q); }
inline const char* to_string(AttentionKernel k) { return name_in<AttentionKernel>(kAttentionKernelNames, k); }
inline const char* to_string(Precision p) { return name_in<Precision>(kPrecisionNames, p); }
inline const char* to_string(Fp8Recipe r) { return name_in<Fp8Recipe>(kFp8RecipeNames, r); }
inline const char* to_string(Zero3Unit u) { return name_in<Zero3Unit>(kZero3UnitNames, u); }
inline const char* to_string(Elementwise e) { return name_in<Elementwise>(kElementwiseNames, e); }
inline const char* to_string(FlashKernel k) { return name_in<FlashKernel>(kFlashKernelNames, k); }
inline const char* to_string(CpAttention a) { return name_in<CpAttention>(kCpAttentionNames, a); }
inline const char* to_string(LossKernel k) { return name_in<LossKernel>(kLossKernelNames, k); }

inline std::optional<Collective> parse_collective(std::string_view s) {
  return parse_in<Collective>(kCollectiveNames, s);
}
inline std::optional<LinkLevel> parse_link_level(std::string_view s) { return parse_in<LinkLevel>(kLinkLevelNames, s); }
inline std::optional<Activation> parse_activation(std::string_view s) {
  return parse_in<Activation>(kActivationNames, s);
}
inline std::optional<Norm> parse_norm(std::string_view s) { return parse_in<Norm>(kNormNames, s); }
inline std::optional<PositionEmbedding> parse_position_embedding(std::string_view s) {
  return parse_in<PositionEmbedding>(kPositionEmbeddingNames, s);
}
inline std::optional<QkNorm> parse_qk_norm(std::string_view s) { return parse_in<QkNorm>(kQkNormNames, s); }
inline std::optional<AttentionKernel> parse_attention_kernel(std::string_view s) {
  return parse_in<AttentionKernel>(kAttentionKernelNames, s);
}

inline std::optional<Precision> parse_precision(std::string_view s) { return parse_in<Precision>(kPrecisionNames, s); }
inline std::optional<Fp8Recipe> parse_fp8_recipe(std::string_view s) { return parse_in<Fp8Recipe>(kFp8RecipeNames, s); }
inline std::optional<Zero3Unit> parse_zero3_unit(std::string_view s) { return parse_in<Zero3Unit>(kZero3UnitNames, s); }
inline std::optional<Elementwise> parse_elementwise(std::string_view s) {
  return parse_in<Elementwise>(kElementwiseNames, s);
}
inline std::optional<FlashKernel> parse_flash_kernel(std::string_view s) {
  return parse_in<FlashKernel>(kFlashKernelNames, s);
}
inline std::optional<CpAttention> parse_cp_attention(std::string_view s) {
  return parse_in<CpAttention>(kCpAttentionNames, s);
}
inline std::optional<LossKernel> parse_loss_kernel(std::string_view s) {
  return parse_in<LossKernel>(kLossKernelNames, s);
}

// A collective name that a reader has already checked (a cost file's points and fits): an unknown
// one here is a broken invariant, a bug in Loom, not bad input.
inline Collective collective_named(std::string_view s) {
  if (auto c = parse_collective(s)) return *c;
  throw std::logic_error("collective name '" + std::string(s) + "' was not checked when its file was read");
}

}  // namespace loom
