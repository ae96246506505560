#include "core/spec_inputs.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include <fmt/format.h>

#include "core/framework.h"
#include "core/presets.h"

namespace loom {

namespace {

Status check_sizes(const SpecInputs& in, const ClusterSpec& cluster) {
  if (in.gpus < 1) return make_error(fmt::format("--gpus: {} must be at least 1", in.gpus));
  if (in.gpus > (1LL << 20)) return make_error(fmt::format("--gpus: {} is more GPUs than any cluster has", in.gpus));
  if (in.global_batch < 1) return make_error(fmt::format("--global-batch: {} must be at least 1", in.global_batch));
  if (in.global_batch > (1LL << 30))
    return make_error(fmt::format("--global-batch: {} is absurdly large", in.global_batch));
  if (in.seq < 0) return make_error(fmt::format("--seq: {} must be positive", in.seq));
  if (in.seq > (1LL << 24)) return make_error(fmt::format("--seq: {} is absurdly long", in.seq));
  if (!(in.tokens >= 0) || !std::isfinite(in.tokens))
    return make_error(fmt::format("--tokens: {} must be a finite number, not negative", in.tokens));
  const long long nodes = (in.gpus + cluster.gpus_per_node - 1) / cluster.gpus_per_node;
  if (cluster.max_nodes > 0 && nodes > cluster.max_nodes)
    return make_error(fmt::format("--gpus: {} GPUs need {} nodes but cluster '{}' has {}", in.gpus, nodes, cluster.name,
                                  cluster.max_nodes));
  if (in.grad_bytes != 0 && in.grad_bytes != 2 && in.grad_bytes != 4) return make_error("--grad-bytes: must be 2 or 4");
  if (!(in.kernel_cv >= 0.0) || in.kernel_cv > 1.0)
    return make_error(
        fmt::format("--kernel-cv: {} must be between 0 and 1 (a coefficient of variation)", in.kernel_cv));
  if (!(in.gpu_cv >= 0.0) || in.gpu_cv > 1.0)
    return make_error(fmt::format("--gpu-cv: {} must be between 0 and 1 (a coefficient of variation)", in.gpu_cv));
  if (in.host_op_us != -1.0 && (!(in.host_op_us >= 0.0) || in.host_op_us > 1e5))
    return make_error(fmt::format("--host-op-us: {} must be between 0 and 100000 microseconds", in.host_op_us));
  if (in.zero3_prefetch != -1.0 && (!(in.zero3_prefetch >= 0.0) || in.zero3_prefetch > 1e15))
    return make_error(fmt::format("--zero3-prefetch: {} must be between 0 (one unit ahead) and 1e15 parameter elements",
                                  in.zero3_prefetch));
  if (in.mtp_layers != -1 && (in.mtp_layers < 0 || in.mtp_layers > kMaxMtpLayers))
    return make_error(
        fmt::format("--mtp-layers: {} must be between 0 and {} (or -1: the model's)", in.mtp_layers, kMaxMtpLayers));
  if (!(in.moe_imbalance >= 1.0) || in.moe_imbalance > 1e3)
    return make_error(fmt::format("--moe-imbalance: {} must be between 1 (balanced) and 1000", in.moe_imbalance));
  if (in.framework.find(',') != std::string::npos)
    return make_error(fmt::format(
        "--framework: '{}' names several stacks; `loom plan` and loom-gui rank several, this command takes one",
        in.framework));
  if (!in.framework.empty())
    if (auto preset = find_framework(in.framework); !preset) return preset.error();
  if (!in.attention.empty() && !parse_attention_kernel(in.attention))
    return make_error(fmt::format("--attention: unknown kernel '{}' ({})", in.attention, one_of<AttentionKernel>()));
  if (!in.elementwise.empty() && !parse_elementwise(in.elementwise))
    return make_error(fmt::format("--elementwise: unknown kind '{}' ({})", in.elementwise, one_of<Elementwise>()));
  if (!in.flash_kernel.empty() && !parse_flash_kernel(in.flash_kernel))
    return make_error(fmt::format("--flash-kernel: unknown kernel '{}' ({})", in.flash_kernel, one_of<FlashKernel>()));
  // Both given and contradictory (a stack's unfused default with --flash-kernel is left to the stack: `plan`
  // ranks several stacks with one set of flags).
  if (!in.flash_kernel.empty() && parse_attention_kernel(in.attention) == AttentionKernel::kUnfused)
    return make_error("--flash-kernel: applies to --attention flash only, not unfused");
  if (!in.cp_attention.empty() && !parse_cp_attention(in.cp_attention))
    return make_error(fmt::format("--cp-attention: unknown library '{}' ({})", in.cp_attention, one_of<CpAttention>()));
  const auto precision = parse_precision(in.precision);
  if (!precision)
    return make_error(fmt::format("--precision: unknown precision '{}' ({})", in.precision, one_of<Precision>()));
  if (!in.fp8_recipe.empty() && !parse_fp8_recipe(in.fp8_recipe))
    return make_error(fmt::format("--fp8-recipe: unknown recipe '{}' ({})", in.fp8_recipe, one_of<Fp8Recipe>()));
  if (!in.fp8_recipe.empty() && precision != Precision::kFp8)
    return make_error("--fp8-recipe: applies to --precision fp8 only");
  if (precision == Precision::kFp8 && cluster.device.peak_fp8_flops <= 0)
    return make_error(
        fmt::format("--precision fp8: the {} of cluster '{}' has no FP8 tensor cores (no "
                    "device.peak_fp8_flops in its cost file)",
                    cluster.device.name, cluster.name));
  if (precision == Precision::kFp8 && parse_fp8_recipe(in.fp8_recipe) == Fp8Recipe::kRowwise &&
      cluster.compute.gemm_fp8_rowwise_max_efficiency <= 0)
    return make_error(
        fmt::format("--fp8-recipe rowwise: the cost file of cluster '{}' has no measured rowwise FP8 GEMM figure "
                    "(compute.gemm_fp8_rowwise_max_efficiency; bench/gpu/fp8_gemm.py measures it on the GPU)",
                    cluster.name));
  return {};
}

}  // namespace

Result<Specs> resolve_specs(const SpecInputs& in) {
  Specs specs;
  auto model = load_model(in.model);
  if (!model) return model.error();
  specs.model = std::move(*model);
  auto cluster = load_cluster(in.cluster);
  if (!cluster) return cluster.error();
  specs.cluster = std::move(*cluster);
  specs.cluster_name = in.cluster;
  if (Status s = check_sizes(in, specs.cluster); !s) return s.error();
  if (in.mtp_layers >= 0) specs.model.mtp_layers = static_cast<int>(in.mtp_layers);

  TrainingSpec& t = specs.training;
  t.gpus = static_cast<int>(in.gpus);
  t.global_batch = in.global_batch;
  t.seq_len = in.seq > 0 ? static_cast<int>(in.seq) : specs.model.seq_len;
  t.seq_len_source = in.seq > 0 ? "--seq" : "the model's context: " + specs.model.seq_len_source;
  // Learned position embeddings have one row per position: nothing beyond them can be trained.
  if (in.seq > specs.model.seq_len && specs.model.position == PositionEmbedding::kLearned)
    return make_error(fmt::format("--seq: {} is beyond the {} learned positions of model '{}' ({})", in.seq,
                                  specs.model.seq_len, specs.model.name, specs.model.seq_len_source));
  t.tokens = in.tokens;
  t.allow_cross_node_tp = in.allow_cross_node_tp;
  t.pipeline_sends_block = in.sync_pipeline_sends;
  // The MoE flags describe routed experts and a shared expert: on a model without them they would
  // change nothing, so saying so beats a plan that silently ignored them.
  if (in.moe_imbalance != 1.0 && !specs.model.moe.active())
    return make_error(fmt::format(
        "--moe-imbalance: applies to mixture-of-experts models only; {} has no routed experts", specs.model.name));
  if (in.moe_shared_expert_overlap && specs.model.moe.shared_ffn <= 0)
    return make_error(fmt::format("--moe-shared-expert-overlap: {} has no shared expert to run beside the all-to-alls",
                                  specs.model.name));
  t.moe_imbalance = in.moe_imbalance;
  t.moe_shared_expert_overlap = in.moe_shared_expert_overlap;
  t.kernel_cv = in.kernel_cv;
  t.gpu_cv = in.gpu_cv;
  if (in.host_op_us >= 0) t.host_op_s = in.host_op_us * 1e-6;
  if (in.zero3_prefetch >= 0) t.zero3_prefetch_elements = in.zero3_prefetch;
  if (in.grad_bytes != 0) t.grad_bytes = in.grad_bytes;
  if (!in.attention.empty()) t.attention = *parse_attention_kernel(in.attention);
  if (!in.elementwise.empty()) t.elementwise = *parse_elementwise(in.elementwise);
  if (!in.flash_kernel.empty()) t.flash_kernel = *parse_flash_kernel(in.flash_kernel);
  if (!in.cp_attention.empty()) t.cp_attention = *parse_cp_attention(in.cp_attention);
  // The stack's behaviours where no flag set them: a flag given wins over its framework.
  if (!in.framework.empty())
    apply_framework(
        *find_framework(in.framework).value(), t,
        {!in.attention.empty(), in.grad_bytes != 0, in.sync_pipeline_sends, in.host_op_us >= 0, !in.elementwise.empty(),
         !in.flash_kernel.empty(), !in.cp_attention.empty(), in.zero3_prefetch >= 0});
  t.precision = *parse_precision(in.precision);
  if (!in.fp8_recipe.empty()) t.fp8_recipe = *parse_fp8_recipe(in.fp8_recipe);
  return specs;
}

Result<std::vector<Specs>> resolve_specs_per_framework(const SpecInputs& in) {
  // None named: one stack of Loom's own defaults.
  std::vector<std::string> names;
  if (in.framework.empty()) names.push_back("");
  // getline drops a trailing empty name, so a trailing comma is checked on its own.
  if (!in.framework.empty() && in.framework.back() == ',')
    return make_error(fmt::format("--framework: empty name in '{}'", in.framework));
  std::stringstream list(in.framework);
  for (std::string name; std::getline(list, name, ',');) {
    if (name.empty()) return make_error(fmt::format("--framework: empty name in '{}'", in.framework));
    if (std::find(names.begin(), names.end(), name) != names.end())
      return make_error(fmt::format("--framework: '{}' named twice", name));
    names.push_back(name);
  }
  std::vector<Specs> out;
  for (const std::string& name : names) {
    SpecInputs one = in;
    one.framework = name;
    auto specs = resolve_specs(one);
    if (!specs) return specs.error();
    out.push_back(std::move(*specs));
  }
  return out;
}

}  // namespace loom
