#include "planner/report.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "core/pipeline_split.h"
#include "core/units.h"

namespace loom {

namespace {

// ", MoE 8 experts, top 2, expert ffn 14336 (+ shared 5632), dense first 1": the # model line's MoE part.
std::string moe_summary(const ModelSpec& m) {
  if (!m.moe.active()) return "";
  std::string s =
      fmt::format(", MoE {} experts, top {}, expert ffn {}", m.moe.experts, m.moe.experts_per_token, m.moe.expert_ffn);
  if (m.moe.shared_ffn > 0) s += fmt::format(" (+ shared {})", m.moe.shared_ffn);
  if (m.moe.first_dense_layers > 0) s += fmt::format(", first {} layers dense", m.moe.first_dense_layers);
  if (m.moe.layer_freq > 1) s += fmt::format(", every {} layers", m.moe.layer_freq);
  return s;
}

struct Column {
  const char* name;
  bool right_aligned;
};

// Optional columns. CP follows TP, EP follows DP and precision follows stage_layers; the table and
// markdown show each only when a plan shown needs it (so bf16 tables without context or expert
// parallelism read as before), the CSV always has all three (scripts want fixed columns).
struct Optional {
  bool days = false;
  bool cp = false;
  bool precision = false;
  bool ep = false;         // EP follows DP
  bool framework = false;  // last: the stack each row runs under, when several stacks are ranked together
};
constexpr std::size_t kCpColumn = 2;
constexpr std::size_t kEpColumn = 4;
constexpr std::size_t kPrecisionColumn = 12;

std::vector<Column> columns(const Optional& o) {
  std::vector<Column> c = {{"rank", true},        {"TP", true},     {"PP", true},        {"DP", true},
                           {"ZeRO", true},        {"shard", true},  {"MB", true},        {"VPP", true},
                           {"recompute", false},  {"SP", false},    {"schedule", false}, {"stage_layers", false},
                           {"mem_GiB", true},     {"params", true}, {"grads", true},     {"optim", true},
                           {"act", true},         {"buf", true},    {"step_s", true},    {"tokens/s", true},
                           {"TFLOP/s/GPU", true}, {"MFU%", true},   {"bubble%", true}};
  if (o.days) c.push_back({"days", true});
  if (o.framework) c.push_back({"framework", false});
  if (o.precision) c.insert(c.begin() + kPrecisionColumn, {"precision", false});
  if (o.ep) c.insert(c.begin() + kEpColumn, {"EP", true});
  if (o.cp) c.insert(c.begin() + kCpColumn, {"CP", true});
  return c;
}

// "2" for the ring, "2 a2a" or "2 all_gather" for the other kinds.
std::string cp_label(const ParallelConfig& c) {
  return c.cp > 1 && c.cp_comm != CpComm::kP2P ? fmt::format("{} {}", c.cp, to_string(c.cp_comm))
                                               : fmt::format("{}", c.cp);
}

// "8", or "8 etp1" when the experts are whole on each rank (expert TP 1 under TP > 1).
std::string ep_label(const ParallelConfig& c) {
  return c.expert_tp() != c.tp ? fmt::format("{} etp{}", c.ep, c.expert_tp()) : fmt::format("{}", c.ep);
}

// The ranks ZeRO-3 shards over ("8 of 64" reads as HSDP); "-" for the other stages.
std::string shard_label(const ParallelConfig& c) { return c.zero >= 3 ? fmt::format("{}", c.zero_shards()) : "-"; }

// ZeRO-3 where it differs from Loom's default (a layer per gather, one layer prefetched ahead).
std::string zero3_text(const TrainingSpec& t) {
  std::string text;
  if (t.zero3_unit == Zero3Unit::kModule) text += "; ZeRO-3 gathers each linear module";
  if (t.zero3_prefetch_elements > 0)
    text += fmt::format("{}, prefetching {:g} parameter elements ahead (--zero3-prefetch)",
                        text.empty() ? "; ZeRO-3 gathers" : "", t.zero3_prefetch_elements);
  return text;
}

std::vector<std::string> cells(const PlanRow& r, std::size_t rank, const Optional& o) {
  const ParallelConfig& c = r.config;
  const MemoryBreakdownGiB& m = r.metrics.memory_gib;
  std::vector<std::string> v = {fmt::format("{}", rank),
                                fmt::format("{}", c.tp),
                                fmt::format("{}", c.pp),
                                fmt::format("{}", c.dp),
                                fmt::format("{}", c.zero),
                                shard_label(c),
                                fmt::format("{}", c.micro_batch),
                                fmt::format("{}", c.vpp),
                                to_string(c.recompute),
                                c.sequence_parallel ? "on" : "off",
                                to_string(c.schedule),
                                stage_layers_label(r.stage_layers),
                                fmt::format("{:.1f}", m.total),
                                fmt::format("{:.1f}", m.params),
                                fmt::format("{:.1f}", m.grads),
                                fmt::format("{:.1f}", m.optimizer),
                                fmt::format("{:.1f}", m.activations),
                                fmt::format("{:.1f}", m.buffers),
                                fmt::format("{:.3f}", r.metrics.step_time_s),
                                fmt::format("{:.0f}", r.metrics.tokens_per_s),
                                fmt::format("{:.1f}", r.metrics.tflops_per_gpu),
                                fmt::format("{:.1f}", 100.0 * r.metrics.mfu),
                                fmt::format("{:.1f}", 100.0 * r.metrics.bubble_fraction)};
  if (o.days) v.push_back(fmt::format("{:.1f}", r.days_to_train));
  if (o.framework) v.push_back(r.framework);
  if (o.precision) v.insert(v.begin() + kPrecisionColumn, to_string(r.precision));
  if (o.ep) v.insert(v.begin() + kEpColumn, ep_label(c));
  if (o.cp) v.insert(v.begin() + kCpColumn, cp_label(c));
  return v;
}

std::size_t shown(const PlanResult& result, std::size_t top) {
  return top == 0 ? result.plans.size() : std::min(top, result.plans.size());
}

// The optional columns the plans shown need.
Optional needed(const ReportContext& ctx, const PlanResult& result, std::size_t top) {
  Optional o{.days = ctx.training->tokens > 0, .framework = !ctx.other_stacks.empty()};
  for (std::size_t i = 0; i < shown(result, top); ++i) {
    o.cp = o.cp || result.plans[i].config.cp > 1;
    o.precision = o.precision || result.plans[i].precision != Precision::kBf16;
    o.ep = o.ep || result.plans[i].config.ep > 1 || result.plans[i].config.expert_tp() != result.plans[i].config.tp;
  }
  return o;
}

}  // namespace

ReportContext stacks_report_context(const std::vector<Specs>& stacks) {
  const Specs& first = stacks.front();
  ReportContext ctx{&first.model, &first.cluster, &first.training, first.cluster_name, {}};
  for (std::size_t i = 1; i < stacks.size(); ++i) ctx.other_stacks.push_back(&stacks[i].training);
  return ctx;
}

std::vector<std::string> assumption_lines(const ReportContext& ctx, const PlanResult& result) {
  const ModelSpec& m = *ctx.model;
  const ClusterSpec& c = *ctx.cluster;
  const TrainingSpec& t = *ctx.training;
  std::vector<std::string> lines;
  lines.push_back(fmt::format(
      "model {}: {:.2f} B parameters{}, {} layers, hidden {}, {} heads ({}{}), ffn {}, vocab {}, "
      "{}, {}{}{}{}{}{}",
      m.name, m.total_params() / 1e9, m.moe.active() ? fmt::format(" ({:.2f} B active)", m.active_params() / 1e9) : "",
      m.layers, m.hidden, m.heads,
      m.mla.active() ? fmt::format("MLA, kv rank {}", m.mla.kv_lora_rank) : fmt::format("{} kv", m.kv_heads),
      m.explicit_head_dim > 0 ? fmt::format(", head dim {}", m.explicit_head_dim) : "", m.ffn_hidden, m.vocab,
      to_string(m.activation), to_string(m.norm), moe_summary(m),
      m.sliding_layers > 0
          ? fmt::format(", sliding window {} on {} of {} layers", m.sliding_window, m.sliding_layers, m.layers)
          : "",
      m.chunked_layers > 0
          ? fmt::format(", attention chunks of {} on {} of {} layers", m.attention_chunk, m.chunked_layers, m.layers)
          : "",
      m.qk_norm == QkNorm::kPerHead     ? ", QK-norm per head"
      : m.qk_norm == QkNorm::kFullWidth ? ", QK-norm over Q's and K's full width"
                                        : "",
      m.mtp_layers > 0 ? fmt::format(", {} multi-token-prediction module{} of {:.2f} B on the last stage", m.mtp_layers,
                                     m.mtp_layers > 1 ? "s" : "", m.mtp_params() / 1e9)
                       : ""));
  if (!m.checkpoint_note.empty()) lines.push_back("checkpoint: " + m.checkpoint_note);
  lines.push_back(fmt::format(
      "cluster {} ({}): {} x {} per node, {:.0f} GiB, {:.0f} TFLOP/s peak, {:.0f} GB/s NVLink, "
      "{:.0f} GB/s per GPU between nodes",
      c.name, ctx.cluster_source, c.gpus_per_node, c.device.name, c.gpu_memory_gib(), c.device.peak_flops / 1e12,
      c.intra_node.bandwidth_bytes_per_s / 1e9, c.inter_node.bandwidth_bytes_per_s / 1e9));
  lines.push_back(fmt::format("training: {} GPUs, global batch {} x {} tokens{}{}", t.gpus, t.global_batch, t.seq_len,
                              t.seq_len_source.empty() ? "" : fmt::format(" (sequence from {})", t.seq_len_source),
                              t.tokens > 0 ? fmt::format(", token budget {:.3g}", t.tokens) : ""));
  // What each stack sets: one precision and one software line per stack, named when there are several.
  std::vector<const TrainingSpec*> stacks = {&t};
  stacks.insert(stacks.end(), ctx.other_stacks.begin(), ctx.other_stacks.end());
  for (const TrainingSpec* s : stacks) {
    const std::string under = stacks.size() > 1 ? fmt::format(" under {}", s->framework) : "";
    lines.push_back(fmt::format(
        "precision{}: {}-byte params, {}-byte grads, {}-byte optimizer states per parameter (mixed "
        "precision Adam), {}-byte activations; {} attention{}{}",
        under, s->param_bytes, s->grad_bytes, s->optimizer_bytes, s->activation_bytes, to_string(s->attention),
        s->attention == AttentionKernel::kFlash && s->flash_kernel == FlashKernel::kFa2
            ? c.compute.fa2_attention_efficiency > 0
                  ? " as FlashAttention-2's kernels (--flash-kernel fa2)"
                  : " as FlashAttention-2's kernels (--flash-kernel fa2), at the cost file's fused-attention figures "
                    "(it has none of their own)"
            : "",
        s->precision == Precision::kFp8
            ? fmt::format("; FP8 linear-layer GEMMs ({} scaling; {:.0f} TFLOP/s FP8 peak), weights also kept "
                          "in FP8{}; MFU against the bf16 peak",
                          to_string(s->fp8_recipe), c.device.peak_fp8_flops / 1e12,
                          c.device.fp8_gemm_tn_only ? " and transposed" : "")
            : ""));
  }
  for (const TrainingSpec* s : stacks)
    lines.push_back(fmt::format(
        "software: {}; gradients reduced {}; TP input-gradient reduction {} the weight-gradient GEMM; pipeline "
        "sends {}{}{}{}{}",
        s->framework.empty() ? "no --framework named" : "--framework " + s->framework,
        s->overlap_grad_reduce ? "in buckets during the last backward" : "after the backward",
        s->tp_comm_overlap ? "beside" : "after", s->pipeline_sends_block ? "block the next pass" : "run beside compute",
        s->elementwise == Elementwise::kEager ? "; element-wise ops as eager PyTorch's kernels (--elementwise eager)"
                                              : "",
        s->cp_attention == CpAttention::kPyTorch
            ? "; context parallelism as PyTorch's ring attention, fp32 merges and key/value gradients "
              "(--cp-attention pytorch)"
            : "",
        zero3_text(*s), s->framework.empty() ? "" : " (`loom frameworks` gives each behaviour's source)"));
  if (m.moe.active())
    lines.push_back(fmt::format(
        "experts: EP splits each MoE layer's routed experts over ep ranks of the dp·cp group (expert TP = TP, or 1 "
        "where the EP column says etp1); token dispatch and combine are all-to-alls on the EP group, {}; the busiest "
        "EP rank routes {:.2f}x the mean tokens (--moe-imbalance; 1 = balanced, assumed: loom run logs the measured "
        "one)",
        m.moe.shared_ffn > 0 && t.moe_shared_expert_overlap ? "the shared expert running beside them"
                                                            : "not overlapped with compute",
        t.moe_imbalance));
  if (t.kernel_cv > 0)
    lines.push_back(fmt::format(
        "jitter: each kernel's time varies by {:.1f} % (σ/μ, --kernel-cv, stated) from rank to rank; every TP "
        "collective waits for the slowest of its ranks, the step's end for the slowest of the world's TP groups",
        100.0 * t.kernel_cv));
  if (t.gpu_cv > 0)
    lines.push_back(fmt::format(
        "stragglers: each GPU's speed differs persistently by {:.1f} % (σ/μ, --gpu-cv, stated); the step waits for "
        "the slowest GPU of the world, k(N)·σ of the most loaded stage's compute (normal tail assumed)",
        100.0 * t.gpu_cv));
  lines.push_back(
      fmt::format("memory: most loaded pipeline stage; buf = communication buffers + one layer's backward "
                  "workspace + {:.1f} GiB framework reserve; fits if total <= {:.1f} GiB",
                  bytes_to_gib(c.framework_reserve_bytes), c.gpu_memory_gib()));
  const std::string stacks_searched =
      stacks.size() > 1 ? fmt::format(" over {} software stacks, each searched alone", stacks.size()) : "";
  if (result.skipped == 0)
    lines.push_back(
        fmt::format("search: {} legal configurations{}, {} fit in memory and were simulated, {} rejected "
                    "(--explain lists why)",
                    result.enumerated, stacks_searched, result.simulated, result.rejected.size()));
  else
    lines.push_back(
        fmt::format("search: {} legal configurations{}, {} fit in memory: {} simulated, {} skipped (a lower bound on "
                    "their step is slower than the plans shown); {} rejected "
                    "(--explain lists why)",
                    result.enumerated, stacks_searched, result.simulated + result.skipped, result.simulated,
                    result.skipped, result.rejected.size()));
  lines.push_back(
      "times: simulated step (discrete-event, 1 pipeline, DP replicas symmetric); TFLOP/s and MFU count "
      "model FLOPs without recompute");
  return lines;
}

std::string format_table(const ReportContext& ctx, const PlanResult& result, std::size_t top) {
  const Optional o = needed(ctx, result, top);
  const auto cols = columns(o);
  std::vector<std::vector<std::string>> rows;
  for (std::size_t i = 0; i < shown(result, top); ++i) rows.push_back(cells(result.plans[i], i + 1, o));
  std::vector<std::size_t> width(cols.size());
  for (std::size_t j = 0; j < cols.size(); ++j) {
    width[j] = std::string(cols[j].name).size();
    for (const auto& r : rows) width[j] = std::max(width[j], r[j].size());
  }
  std::string out;
  for (const auto& line : assumption_lines(ctx, result)) out += "# " + line + "\n";
  auto emit = [&](const std::vector<std::string>& values) {
    std::string line;
    for (std::size_t j = 0; j < values.size(); ++j) {
      if (j) line += "  ";
      line += cols[j].right_aligned ? fmt::format("{:>{}}", values[j], width[j])
                                    : fmt::format("{:<{}}", values[j], width[j]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  };
  std::vector<std::string> header;
  for (const auto& c : cols) header.push_back(c.name);
  emit(header);
  for (const auto& r : rows) emit(r);
  return out;
}

std::string format_csv(const ReportContext& ctx, const PlanResult& result, std::size_t top) {
  const Optional o{.days = ctx.training->tokens > 0, .cp = true, .precision = true, .ep = true, .framework = true};
  std::string out;
  const auto cols = columns(o);
  for (std::size_t j = 0; j < cols.size(); ++j) out += (j ? "," : "") + std::string(cols[j].name);
  out += "\n";
  for (std::size_t i = 0; i < shown(result, top); ++i) {
    const auto v = cells(result.plans[i], i + 1, o);
    for (std::size_t j = 0; j < v.size(); ++j) out += (j ? "," : "") + v[j];
    out += "\n";
  }
  return out;
}

std::string format_markdown(const ReportContext& ctx, const PlanResult& result, std::size_t top) {
  const Optional o = needed(ctx, result, top);
  std::string out;
  for (const auto& line : assumption_lines(ctx, result)) out += "> " + line + "\n";
  out += "\n|";
  const auto cols = columns(o);
  for (const auto& c : cols) out += fmt::format(" {} |", c.name);
  out += "\n|";
  for (const auto& c : cols) out += c.right_aligned ? "---:|" : ":---|";
  out += "\n";
  for (std::size_t i = 0; i < shown(result, top); ++i) {
    out += "|";
    for (const auto& v : cells(result.plans[i], i + 1, o)) out += fmt::format(" {} |", v);
    out += "\n";
  }
  return out;
}

Json plan_row_json(const PlanRow& row, std::size_t rank) {
  Json j;
  j["rank"] = rank;
  j["config"] = to_json(row.config);
  j["config"]["stage_layers"] = row.stage_layers;
  j["config"]["precision"] = to_string(row.precision);
  const Json metrics = to_json(row.metrics);
  for (auto it = metrics.begin(); it != metrics.end(); ++it) j[it.key()] = it.value();
  j["micro_batches"] = row.micro_batches;
  j["exposed_comm"] = {{"tp_s", row.exposed.tp_s},
                       {"pp_s", row.exposed.pp_s},
                       {"dp_s", row.exposed.dp_s},
                       {"cp_s", row.exposed.cp_s},
                       {"ep_s", row.exposed.ep_s}};
  j["days_to_train"] = row.days_to_train;
  j["limited_by"] = row.limited_by;
  j["framework"] = row.framework;
  return j;
}

Json model_summary_json(const ModelSpec& model) {
  Json j = to_json(model);
  j["parameters"] = model.total_params();
  j["active_parameters"] = model.active_params();
  return j;
}

Json format_json(const ModelSpec& model, const PlanResult& result, std::size_t top) {
  Json plans = Json::array();
  for (std::size_t i = 0; i < shown(result, top); ++i) plans.push_back(plan_row_json(result.plans[i], i + 1));
  Json rejected = Json::array();
  for (const auto& r : result.rejected)
    rejected.push_back({{"config", to_json(r.config)}, {"reason", r.reason}, {"framework", r.framework}});
  Json j;
  j["model"] = model_summary_json(model);
  j["plans"] = plans;
  j["rejected"] = rejected;
  return j;
}

std::string format_rejections(const PlanResult& result, std::size_t examples_per_rule) {
  std::map<std::string, std::vector<const Rejection*>> by_rule;
  for (const auto& r : result.rejected) by_rule[r.rule].push_back(&r);
  std::vector<std::pair<std::string, std::vector<const Rejection*>>> groups(by_rule.begin(), by_rule.end());
  std::stable_sort(groups.begin(), groups.end(),
                   [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
  std::string out = fmt::format("# rejected: {} configurations\n", result.rejected.size());
  for (const auto& [rule, list] : groups) {
    out += fmt::format("{} ({}):\n", rule, list.size());
    for (std::size_t i = 0; i < std::min(examples_per_rule, list.size()); ++i)
      out += fmt::format("  {}: {}\n", describe(list[i]->config), list[i]->reason);
    if (list.size() > examples_per_rule) out += fmt::format("  ... and {} more\n", list.size() - examples_per_rule);
  }
  return out;
}

}  // namespace loom
