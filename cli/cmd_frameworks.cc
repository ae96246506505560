// `loom frameworks`: the software stacks `--framework` names, each behaviour Loom applies for it
// and each parallel feature it lacks, with the source or the reason.
#include <string>

#include <fmt/format.h>

#include "cli/command.h"
#include "cli/output.h"
#include "core/framework.h"

namespace loom::cli {

namespace {

std::string on_off(bool value) { return value ? "yes" : "no"; }

std::string preset_text(const FrameworkPreset& p) {
  std::string t = fmt::format("{}\n  {}\n", p.name, p.description);
  auto line = [&t](const char* what, const std::string& value, const char* source) {
    t += fmt::format("  {:<28} {:<8} {}\n", what, value, source);
  };
  line("attention", to_string(p.attention.value), p.attention.source);
  line("gradient bytes", std::to_string(p.grad_bytes.value), p.grad_bytes.source);
  line("grad reduce overlapped", on_off(p.overlap_grad_reduce.value), p.overlap_grad_reduce.source);
  line("pipeline sends block", on_off(p.pipeline_sends_block.value), p.pipeline_sends_block.source);
  line("TP reduce beside wgrad GEMM", on_off(p.tp_comm_overlap.value), p.tp_comm_overlap.source);
  line("ZeRO-3 collective per", to_string(p.zero3_unit.value), p.zero3_unit.source);
  line("ZeRO-3 gathered through PP", p.zero3_pp_keep_gathered.value ? "yes" : "no", p.zero3_pp_keep_gathered.source);
  line("ZeRO-3 shards fp32 masters", p.zero3_fp32_shards.value ? "yes" : "no", p.zero3_fp32_shards.source);
  line(
      "ZeRO-3 prefetch",
      p.zero3_prefetch_elements.value > 0 ? fmt::format("{:g}M elem", p.zero3_prefetch_elements.value / 1e6) : "1 unit",
      p.zero3_prefetch_elements.source);
  line("host time per GPU op", fmt::format("{:g} us", p.host_op_s.value * 1e6), p.host_op_s.source);
  line("element-wise kernels", to_string(p.elementwise.value), p.elementwise.source);
  line("fused attention kernel", to_string(p.flash_kernel.value), p.flash_kernel.source);
  line("context-parallel attention", to_string(p.cp_attention.value), p.cp_attention.source);
  line("SP collectives copy", on_off(p.sp_collective_copies.value), p.sp_collective_copies.source);
  line("ZeRO-3 collectives copy", on_off(p.zero3_collective_copies.value), p.zero3_collective_copies.source);
  line("loss peak per logit", fmt::format("{:g} bytes", p.loss_bytes_per_logit.value), p.loss_bytes_per_logit.source);
  line("loss peak, compiled", fmt::format("{:g} bytes", p.compiled_loss_bytes_per_logit.value),
       p.compiled_loss_bytes_per_logit.source);
  line("loss kernels", to_string(p.loss_kernel.value), p.loss_kernel.source);
  line("embedding gradient dense", on_off(p.embedding_grad_dense.value), p.embedding_grad_dense.source);
  std::string stages;
  for (int z = 0; z <= 3; ++z)
    if (p.zero_stages & (1u << z)) stages += (stages.empty() ? "" : ",") + std::to_string(z);
  line("ZeRO stages", stages, p.zero_source);
  const std::pair<const char*, const Missing*> features[] = {{"sequence parallelism", &p.sequence_parallel},
                                                             {"interleaved schedule", &p.interleaved},
                                                             {"zero-bubble schedule", &p.zero_bubble},
                                                             {"GPipe schedule", &p.gpipe},
                                                             {"context parallelism", &p.context_parallel},
                                                             {"FP8", &p.fp8},
                                                             {"hybrid sharding (HSDP)", &p.hsdp},
                                                             {"uneven pipeline stages", &p.uneven_stages},
                                                             {"TP without SP", &p.tp_without_sp},
                                                             {"op-level recompute", &p.op_recompute}};
  for (const auto& [name, missing] : features)
    if (missing->missing) line(name, "no", missing->why);
  return t;
}

std::function<int()> add_frameworks(CLI::App& root) {
  auto out = std::make_shared<std::string>();
  CLI::App* app = root.add_subcommand(
      "frameworks", "the software stacks --framework names: the behaviours applied and the features each lacks");
  app->add_option("--out", *out, "write to FILE instead of stdout");
  return [out] {
    std::string text;
    for (const FrameworkPreset& p : framework_presets()) text += (text.empty() ? "" : "\n") + preset_text(p);
    write_output(*out, text);
    return kExitOk;
  };
}

}  // namespace

LOOM_REGISTER_COMMAND("frameworks", add_frameworks);

}  // namespace loom::cli
