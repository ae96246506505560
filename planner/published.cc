#include "planner/published.h"

#include <fmt/format.h>

#include "core/framework.h"
#include "core/json_fields.h"
#include "core/json_io.h"
#include "core/presets.h"
#include "planner/search.h"
#include "sim/simulator.h"

namespace loom {

namespace {

// The paper's runs: Megatron-LM with fp16/bf16 mixed precision and fp32 gradient accumulation
// (18 bytes/parameter of model state, Fig. 1), its fused-softmax attention (no FlashAttention),
// dropout on, 1F1B or interleaved 1F1B, synchronous pipeline transfers.
TrainingSpec paper_training(int gpus, long long global_batch, int seq) {
  TrainingSpec t;
  t.gpus = gpus;
  t.global_batch = global_batch;
  t.seq_len = seq;
  t.grad_bytes = 4;
  t.attention = AttentionKernel::kUnfused;
  // The attention's dropout is torch's, a kernel of its own after the fused scale-mask-softmax, in the
  // backward too.
  t.softmax_bwd_applies_dropout = false;
  // Megatron-LM's pipeline transfers are synchronous (batch_isend_irecv, wait, cuda synchronize).
  t.pipeline_sends_block = true;
  // Its vocabulary-parallel cross-entropy on the upcast logits, one kernel a pass (core/framework.cc,
  // megatron-lm-2021).
  t.loss_kernel = LossKernel::kMegatron;
  // Its embedding's gradient dense, zeroed and added into main_grad every micro-batch (core/framework.cc).
  t.embedding_grad_dense = true;
  return t;
}

// A validation row's GPT as Megatron-LM builds it: ModelSpec's defaults (learned positions, biases,
// dropout, tied embeddings, GELU) with the row's layers, hidden size and heads, an MLP of 4h. The shape
// is read as a model JSON is (types, ranges, heads dividing hidden, Loom's size limit): the file is the
// user's --validation-dir.
Result<ModelSpec> megatron_gpt(const std::string& name, const Json& row, const Json& common, const std::string& where) {
  Json shape = {{"name", name},
                {"vocab", common.contains("vocab") ? common["vocab"] : Json(51200)},
                {"seq_len", common.contains("seq_len") ? common["seq_len"] : Json(2048)}};
  for (const char* key : {"layers", "hidden", "heads"})
    if (row.contains(key)) shape[key] = row[key];
  auto checked = model_from_json(shape);
  if (!checked) return make_error(fmt::format("{}: {}", where, checked.error().message));
  ModelSpec m;
  m.name = name;
  m.layers = checked->layers;
  m.hidden = checked->hidden;
  m.heads = checked->heads;
  m.kv_heads = m.heads;
  m.ffn_hidden = 4 * m.hidden;
  m.vocab = checked->vocab;
  m.seq_len = checked->seq_len;
  return m;
}

// A row's run: GPU count, global batch, TP and PP (and, where given, micro-batch and interleaving) as
// whole numbers in range, GPUs a multiple of tp·pp, and its published time, in seconds, positive.
Status check_run(const Json& row, const char* time_key, const std::string& where) {
  FieldReader r(row, where);
  const long long gpus = r.integer("gpus", std::nullopt, 1, 1 << 24);
  r.integer("global_batch", std::nullopt, 1, 1LL << 40);
  const long long tp = r.integer("tp", 1, 1, 1 << 20), pp = r.integer("pp", 1, 1, 1 << 20);
  r.integer("micro_batch", 1, 1, 1 << 24);
  r.integer("interleave", 1, 1, 1 << 10);
  if (time_key != nullptr) r.number(time_key, std::nullopt, 1e-9);
  if (!r.ok()) return make_error(r.error());
  if (gpus % (tp * pp) != 0)
    return make_error(fmt::format("{}: {} GPUs do not split over tp {} × pp {}", where, gpus, tp, pp));
  return {};
}

}  // namespace

Result<std::vector<PublishedRow>> reproduce_korthikanti_table5(const std::string& json_path,
                                                               const ClusterSpec& cluster) {
  auto json = read_json_file(json_path);
  if (!json) return json.error();
  const Json& j = *json;
  if (!j.contains("configs") || !j["configs"].is_array() || !j.contains("common") || !j["common"].is_object() ||
      !j.contains("table5_iteration_time_s") || !j["table5_iteration_time_s"].is_object())
    return make_error(fmt::format("{}: not the Korthikanti et al. validation file", json_path));
  std::vector<PublishedRow> rows;
  for (const char* setting : {"full_recompute", "sequence_parallel_plus_selective"}) {
    for (const auto& c : j["configs"]) {
      if (!c.is_object() || !c.value("model", Json()).is_string())
        return make_error(fmt::format("{}: a config without a 'model' name", json_path));
      const std::string name = c.value("model", "");
      const auto& times = j["table5_iteration_time_s"][setting];
      if (!times.is_object() || !times.contains(name)) continue;
      const std::string where = fmt::format("{}: {}", json_path, name);
      if (!times[name].is_number() || !(times[name].get<double>() > 0))
        return make_error(fmt::format("{}: the {} time must be a positive number of seconds", where, setting));
      if (Status run = check_run(c, nullptr, where); !run) return run.error();
      auto model = megatron_gpt("megatron-" + name, c, j["common"], where);
      if (!model) return model.error();
      const ModelSpec& m = *model;
      const int seq = m.seq_len;
      PublishedRow row;
      row.model = name;
      row.setting = setting;
      row.gpus = c.value("gpus", 0);
      row.global_batch = c.value("global_batch", 0);
      row.published_s = times[name].get<double>();
      ParallelConfig& p = row.config;
      p.tp = c.value("tp", 1);
      p.pp = c.value("pp", 1);
      p.dp = row.gpus / (p.tp * p.pp);
      p.micro_batch = c.value("micro_batch", 1);
      p.vpp = c.value("interleave", 1);
      p.schedule = p.vpp > 1 ? Schedule::kInterleaved : Schedule::k1F1B;
      const bool full = std::string(setting) == "full_recompute";
      p.recompute = full ? Recompute::kFull : Recompute::kSelective;
      p.sequence_parallel = !full;
      auto sim = sim::simulate(m, paper_training(row.gpus, row.global_batch, seq), p, cluster);
      if (!sim) return make_error(fmt::format("{} {}: {}", name, setting, sim.error().message));
      row.predicted_s = sim->step_time_s;
      rows.push_back(row);
    }
  }
  return rows;
}

Result<std::vector<PublishedRow>> reproduce_narayanan_table1(const std::string& json_path, const ClusterSpec& cluster,
                                                             const std::string& framework, int threads) {
  auto json = read_json_file(json_path);
  if (!json) return json.error();
  const Json& j = *json;
  if (!j.contains("rows") || !j.contains("common") || !j["rows"].is_array())
    return make_error(fmt::format("{}: not the Narayanan et al. validation file", json_path));
  auto preset = find_framework(framework);
  if (!preset) return preset.error();
  if (!j["common"].is_object())
    return make_error(fmt::format("{}: not the Narayanan et al. validation file", json_path));
  std::vector<PublishedRow> rows;
  for (const auto& r : j["rows"]) {
    if (!r.is_object() || !r.value("params_billion", Json()).is_number())
      return make_error(fmt::format("{}: a row without its 'params_billion'", json_path));
    const std::string where = fmt::format("{}: the {}B row", json_path, r.value("params_billion", 0.0));
    if (Status run = check_run(r, "iteration_time_s_derived", where); !run) return run.error();
    auto model = megatron_gpt(fmt::format("gpt-{}b", r.value("params_billion", 0.0)), r, j["common"], where);
    if (!model) return model.error();
    const ModelSpec& m = *model;
    const int seq = m.seq_len;
    PublishedRow row;
    row.model = fmt::format("{}B", r.value("params_billion", 0.0));
    row.gpus = r.value("gpus", 0);
    row.global_batch = r.value("global_batch", 0LL);
    row.published_s = r.value("iteration_time_s_derived", 0.0);
    TrainingSpec t;
    t.gpus = row.gpus;
    t.global_batch = row.global_batch;
    t.seq_len = seq;
    apply_framework(**preset, t);
    SearchSpace space;
    space.tp = {r.value("tp", 1)};
    space.pp = {r.value("pp", 1)};
    space.recompute = {Recompute::kFull};
    PlanOptions options;
    options.threads = threads;
    options.top = 0;  // every configuration that fits: the fastest and the slowest are both wanted
    auto plans = search_plans(m, t, cluster, space, options);
    if (!plans) return make_error(fmt::format("{}: {}", row.model, plans.error().message));
    if (plans->plans.empty()) return make_error(fmt::format("{}: no configuration fits", row.model));
    const auto setting = [](const ParallelConfig& c) {
      return fmt::format("mb{} vpp{} {}", c.micro_batch, c.vpp, to_string(c.schedule));
    };
    const PlanRow& best = plans->plans.front();  // plans are ranked by step time
    const PlanRow& slowest = plans->plans.back();
    row.config = best.config;
    row.predicted_s = best.metrics.step_time_s;
    row.setting = setting(best.config);
    row.slowest_s = slowest.metrics.step_time_s;
    row.slowest_setting = setting(slowest.config);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace loom
