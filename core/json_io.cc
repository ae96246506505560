#include "core/json_io.h"

#include <unistd.h>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <system_error>

#include <fmt/format.h>

#include "core/framework.h"
#include "core/json_fields.h"
#include "core/pipeline_split.h"

namespace loom {

namespace {

// Largest shapes any real model uses, times a generous margin: anything beyond is a typo.
constexpr long long kMaxLayers = 4096;
constexpr long long kMaxHidden = 1 << 20;
constexpr long long kMaxVocab = 1 << 24;
constexpr long long kMaxSeq = 1 << 24;
// The largest clusters built hold about 10^5 GPUs; 2^24 leaves two orders of magnitude and keeps
// tp·cp·pp·dp, and every rank index, far inside an int.
constexpr long long kMaxGpus = 1 << 24;
constexpr const char* kMaxGpusReason = "2^24, a hundred times the largest cluster built";

}  // namespace

Json to_json(const ModelSpec& m) {
  Json j;
  j["name"] = m.name;
  j["layers"] = m.layers;
  j["hidden"] = m.hidden;
  j["heads"] = m.heads;
  j["kv_heads"] = m.kv_heads;
  j["ffn_hidden"] = m.ffn_hidden;
  j["vocab"] = m.vocab;
  j["seq_len"] = m.seq_len;
  j["activation"] = to_string(m.activation);
  j["norm"] = to_string(m.norm);
  j["tied_embeddings"] = m.tied_embeddings;
  j["position_embedding"] = to_string(m.position);
  j["linear_bias"] = m.linear_bias;
  j["dropout"] = m.dropout;
  if (m.explicit_head_dim > 0) j["head_dim"] = m.explicit_head_dim;
  if (m.qkv_bias) j["qkv_bias"] = true;
  if (m.attention_sinks) j["attention_sinks"] = true;
  if (m.qk_norm != QkNorm::kNone) j["qk_norm"] = to_string(m.qk_norm);
  if (m.sliding_layers > 0) {
    j["sliding_window"] = m.sliding_window;
    j["sliding_window_layers"] = m.sliding_layers;
  }
  if (m.chunked_layers > 0) {
    j["attention_chunk"] = m.attention_chunk;
    j["attention_chunk_layers"] = m.chunked_layers;
  }
  if (m.mtp_layers > 0) j["mtp_layers"] = m.mtp_layers;
  if (m.moe.active())
    j["moe"] = {{"experts", m.moe.experts},         {"experts_per_token", m.moe.experts_per_token},
                {"expert_ffn", m.moe.expert_ffn},   {"shared_ffn", m.moe.shared_ffn},
                {"shared_gate", m.moe.shared_gate}, {"first_dense_layers", m.moe.first_dense_layers},
                {"layer_freq", m.moe.layer_freq},   {"expert_bias", m.moe.expert_bias}};
  if (m.mla.active())
    j["mla"] = {{"q_lora_rank", m.mla.q_lora_rank},
                {"kv_lora_rank", m.mla.kv_lora_rank},
                {"qk_nope_head_dim", m.mla.qk_nope_head_dim},
                {"qk_rope_head_dim", m.mla.qk_rope_head_dim},
                {"v_head_dim", m.mla.v_head_dim}};
  return j;
}

namespace {

// The optional "moe" block: routed experts, top-k, widths and which layers are MoE.
void read_moe_block(const Json& json, ModelSpec& m, FieldReader& outer) {
  if (!json.contains("moe")) return;
  FieldReader r(json["moe"], "model JSON 'moe'");
  MoeSpec& e = m.moe;
  e.experts = static_cast<int>(r.integer("experts", std::nullopt, 1, 1 << 16));
  e.experts_per_token =
      static_cast<int>(r.integer("experts_per_token", std::nullopt, 1, e.experts > 0 ? e.experts : 1));
  e.expert_ffn = static_cast<int>(r.integer("expert_ffn", std::nullopt, 1, 64 * kMaxHidden));
  e.shared_ffn = static_cast<int>(r.integer("shared_ffn", 0, 0, 64 * kMaxHidden));
  e.shared_gate = r.boolean("shared_gate", false);
  e.first_dense_layers = static_cast<int>(r.integer("first_dense_layers", 0, 0, m.layers));
  e.layer_freq = static_cast<int>(r.integer("layer_freq", 1, 1, kMaxLayers));
  e.expert_bias = r.boolean("expert_bias", false);
  if (!r.ok()) outer.fail(r.error());
}

// The optional "mla" block (DeepSeek's latent attention).
void read_mla_block(const Json& json, ModelSpec& m, FieldReader& outer) {
  if (!json.contains("mla")) return;
  FieldReader r(json["mla"], "model JSON 'mla'");
  MlaSpec& a = m.mla;
  a.q_lora_rank = static_cast<int>(r.integer("q_lora_rank", 0, 0, kMaxHidden));
  a.kv_lora_rank = static_cast<int>(r.integer("kv_lora_rank", std::nullopt, 1, kMaxHidden));
  a.qk_nope_head_dim = static_cast<int>(r.integer("qk_nope_head_dim", std::nullopt, 1, kMaxHidden));
  a.qk_rope_head_dim = static_cast<int>(r.integer("qk_rope_head_dim", std::nullopt, 1, kMaxHidden));
  a.v_head_dim = static_cast<int>(r.integer("v_head_dim", std::nullopt, 1, kMaxHidden));
  if (!r.ok()) outer.fail(r.error());
}

}  // namespace

Result<ModelSpec> model_from_json(const Json& json) {
  FieldReader r(json, "model JSON");
  ModelSpec m;
  m.name = r.string("name", std::string("custom"));
  m.layers = static_cast<int>(r.integer("layers", std::nullopt, 1, kMaxLayers));
  m.hidden = static_cast<int>(r.integer("hidden", std::nullopt, 1, kMaxHidden));
  m.heads = static_cast<int>(r.integer("heads", std::nullopt, 1, kMaxHidden));
  m.kv_heads = static_cast<int>(r.integer("kv_heads", m.heads, 1, kMaxHidden));
  m.ffn_hidden = static_cast<int>(r.integer("ffn_hidden", 4LL * m.hidden, 1, 64 * kMaxHidden));
  // Optional: a head width other than hidden/heads (Qwen3, Gemma 2/3, Mistral-Nemo, gpt-oss).
  if (json.contains("head_dim")) m.explicit_head_dim = static_cast<int>(r.integer("head_dim", 0, 1, kMaxHidden));
  m.vocab = static_cast<int>(r.integer("vocab", std::nullopt, 1, kMaxVocab));
  m.seq_len = static_cast<int>(r.integer("seq_len", std::nullopt, 1, kMaxSeq));
  m.seq_len_source = "model JSON seq_len";
  const std::string act = r.string("activation", std::string(to_string(Activation::kGelu)));
  const std::string norm = r.string("norm", std::string(to_string(Norm::kLayerNorm)));
  m.tied_embeddings = r.boolean("tied_embeddings", true);
  m.qkv_bias = r.boolean("qkv_bias", false);
  m.attention_sinks = r.boolean("attention_sinks", false);
  // Optional: QK-norm (core/names.h QkNorm), none by default.
  const std::string qk_norm = r.string("qk_norm", std::string(to_string(QkNorm::kNone)));
  if (r.ok()) {
    if (const auto parsed = parse_qk_norm(qk_norm))
      m.qk_norm = *parsed;
    else
      r.fail(fmt::format("model JSON: 'qk_norm' must be {}, not '{}'", one_of<QkNorm>(), qk_norm));
  }
  // Optional: sliding-window attention, on every layer unless sliding_window_layers says how many.
  if (r.has("sliding_window")) {
    m.sliding_window = static_cast<int>(r.integer("sliding_window", std::nullopt, 1, kMaxSeq));
    m.sliding_layers = static_cast<int>(r.integer("sliding_window_layers", m.layers, 0, m.layers));
  } else if (r.has("sliding_window_layers")) {
    r.fail("model JSON: 'sliding_window_layers' needs 'sliding_window', the window's length in tokens");
  }
  // Optional: chunked attention, on every layer unless attention_chunk_layers says how many; a layer is
  // sliding or chunked, not both.
  if (r.has("attention_chunk")) {
    m.attention_chunk = static_cast<int>(r.integer("attention_chunk", std::nullopt, 1, kMaxSeq));
    m.chunked_layers = static_cast<int>(r.integer("attention_chunk_layers", m.layers - m.sliding_layers, 0, m.layers));
    if (r.ok() && m.sliding_layers + m.chunked_layers > m.layers)
      r.fail(fmt::format("model JSON: {} sliding-window and {} chunked layers are more than the {} layers",
                         m.sliding_layers, m.chunked_layers, m.layers));
  } else if (r.has("attention_chunk_layers")) {
    r.fail("model JSON: 'attention_chunk_layers' needs 'attention_chunk', the chunk's length in tokens");
  }
  // Optional: multi-token-prediction modules after the last layer (ModelSpec::mtp_layers).
  m.mtp_layers = static_cast<int>(r.integer("mtp_layers", 0, 0, kMaxMtpLayers));
  if (!r.ok()) return make_error(r.error());
  read_moe_block(json, m, r);
  read_mla_block(json, m, r);
  if (r.ok() && m.mla.active() && m.qk_norm != QkNorm::kNone)
    r.fail("model JSON: 'qk_norm' with latent attention ('mla') is not modelled");
  if (!r.ok()) return make_error(r.error());
  const auto activation = parse_activation(act);
  if (!activation)
    return make_error(fmt::format("model JSON: 'activation' must be {}, not '{}'", one_of<Activation>(), act));
  const auto norm_kind = parse_norm(norm);
  if (!norm_kind) return make_error(fmt::format("model JSON: 'norm' must be {}, not '{}'", one_of<Norm>(), norm));
  m.activation = *activation;
  m.norm = *norm_kind;
  // LLaMA-style models (RMSNorm) use rotary positions and no biases unless told otherwise.
  const bool llama_style = m.norm == Norm::kRMSNorm;
  const std::string pos =
      r.string("position_embedding",
               std::string(to_string(llama_style ? PositionEmbedding::kRotary : PositionEmbedding::kLearned)));
  m.linear_bias = r.boolean("linear_bias", !llama_style);
  m.dropout = r.boolean("dropout", !llama_style);
  if (!r.ok()) return make_error(r.error());
  const auto position = parse_position_embedding(pos);
  if (!position)
    return make_error(
        fmt::format("model JSON: 'position_embedding' must be {}, not '{}'", one_of<PositionEmbedding>(), pos));
  m.position = *position;
  if (m.explicit_head_dim == 0 && m.hidden % m.heads != 0)
    return make_error(
        fmt::format("model JSON: hidden {} is not divisible by heads {} (state 'head_dim' if the model's "
                    "heads are not hidden/heads wide)",
                    m.hidden, m.heads));
  if (m.heads % m.kv_heads != 0)
    return make_error(fmt::format("model JSON: heads {} is not divisible by kv_heads {}", m.heads, m.kv_heads));
  if (Status size = check_model_size(m, "model JSON"); !size) return size.error();
  return m;
}

Json to_json(const ParallelConfig& c) {
  Json j;
  j["tp"] = c.tp;
  j["pp"] = c.pp;
  j["dp"] = c.dp;
  j["zero"] = c.zero;
  j["shard_group"] = c.shard_group;
  j["micro_batch"] = c.micro_batch;
  j["vpp"] = c.vpp;
  j["recompute"] = to_string(c.recompute);
  j["sequence_parallel"] = c.sequence_parallel;
  j["schedule"] = to_string(c.schedule);
  j["first_stage_layers"] = c.split.first_stage_layers;
  j["last_stage_layers"] = c.split.last_stage_layers;
  j["account_for_embedding"] = c.split.account_for_embedding;
  j["account_for_loss"] = c.split.account_for_loss;
  j["cp"] = c.cp;
  j["cp_comm"] = to_string(c.cp_comm);
  j["ep"] = c.ep;
  if (c.expert_tp() != c.tp) j["etp"] = c.etp;  // absent: expert TP = TP
  if (c.split.listed()) j["stage_layers"] = c.split.stage_layers;
  return j;
}

namespace {

// "stage_layers": every pipeline stage's layers. Plans write them for every split; the first/last and
// embedding/loss settings, where given, must give the same counts. Without those settings a list
// other than the even split's is the split itself (a `--stage-layers` plan, or one edited by hand).
Status stage_layers_from_json(const Json& json, ParallelConfig& c) {
  if (!json.contains("stage_layers") || json["stage_layers"].is_null()) return {};
  const Json& v = json["stage_layers"];
  std::vector<int> list;
  bool ok = v.is_array() && !v.empty() && v.size() <= (1u << 20);
  for (std::size_t i = 0; ok && i < v.size(); ++i) {
    ok = v[i].is_number_integer() && v[i].get<long long>() >= 1 && v[i].get<long long>() <= (1 << 20);
    if (ok) list.push_back(v[i].get<int>());
  }
  if (!ok)
    return make_error("config: 'stage_layers' must be a list of layer counts, one per pipeline stage, each 1 or more");
  if (static_cast<int>(list.size()) != c.pp)
    return make_error(fmt::format("config: 'stage_layers' names {} stages but pp is {}", list.size(), c.pp));
  long long total = 0;
  for (int n : list) total += n;
  if (total > (1 << 20)) return make_error(fmt::format("config: 'stage_layers' add up to {} layers", total));
  // Every model chunk holds a layer; checked before the counts below are computed, chunk by chunk.
  if (static_cast<long long>(c.pp) * c.vpp > total)
    return make_error(
        fmt::format("config: 'stage_layers' add up to {} layers, fewer than the pp × vpp = {} model chunks", total,
                    static_cast<long long>(c.pp) * c.vpp));
  if (list == stage_layer_counts(static_cast<int>(total), c)) return {};
  if (!c.split.even())
    return make_error(fmt::format("config: 'stage_layers' {} disagree with the split's settings ({})",
                                  stage_layers_label(list), describe(c.split)));
  c.split.stage_layers = std::move(list);
  return {};
}

}  // namespace

Result<ParallelConfig> config_from_json(const Json& json) {
  FieldReader r(json, "config");
  ParallelConfig c;
  c.tp = static_cast<int>(r.integer("tp", 1, 1, 1 << 20));
  c.pp = static_cast<int>(r.integer("pp", 1, 1, 1 << 20));
  c.dp = static_cast<int>(r.integer("dp", 1, 1, 1 << 24));
  c.zero = static_cast<int>(r.integer("zero", 0, 0, 3));
  c.shard_group = static_cast<int>(r.integer("shard_group", 0, 0, 1 << 24));
  c.micro_batch = static_cast<int>(r.integer("micro_batch", 1, 1, 1 << 24));
  c.vpp = static_cast<int>(r.integer("vpp", 1, 1, 4096));
  const std::string rc = r.string("recompute", std::string("none"));
  c.sequence_parallel = r.boolean("sequence_parallel", false);
  const std::string sched = r.string("schedule", std::string("1f1b"));
  c.split.first_stage_layers = static_cast<int>(r.integer("first_stage_layers", 0, 0, 1 << 20));
  c.split.last_stage_layers = static_cast<int>(r.integer("last_stage_layers", 0, 0, 1 << 20));
  c.split.account_for_embedding = r.boolean("account_for_embedding", false);
  c.split.account_for_loss = r.boolean("account_for_loss", false);
  // Plans written before context parallelism have no cp: one rank per sequence.
  c.cp = static_cast<int>(r.integer("cp", 1, 1, 1 << 20));
  // Plans written before expert parallelism have no ep: every rank holds every expert.
  c.ep = static_cast<int>(r.integer("ep", 1, 1, 1 << 20));
  // Absent or 0: expert tensor parallelism equal to tp.
  c.etp = static_cast<int>(r.integer("etp", 0, 0, 1 << 20));
  const std::string cp_comm = r.string("cp_comm", std::string(to_string(CpComm::kP2P)));
  if (!r.ok()) return make_error(r.error());
  // Each degree is bounded on its own; their product, the world size, is an int.
  const long long world = static_cast<long long>(c.tp) * c.cp * c.pp * c.dp;
  if (world > kMaxGpus)
    return make_error(fmt::format("config: tp·cp·pp·dp = {} GPUs is more than Loom's limit of {} ({})", world, kMaxGpus,
                                  kMaxGpusReason));
  auto recompute = parse_recompute(rc);
  if (!recompute) return make_error(fmt::format("config: unknown recompute '{}' ({})", rc, recompute_names()));
  auto schedule = parse_schedule(sched);
  if (!schedule) return make_error(fmt::format("config: unknown schedule '{}' ({})", sched, schedule_names()));
  auto comm = parse_cp_comm(cp_comm);
  if (!comm) return make_error(fmt::format("config: unknown cp_comm '{}' ({})", cp_comm, cp_comm_names()));
  c.cp_comm = *comm;
  c.recompute = *recompute;
  c.schedule = *schedule;
  if (auto listed = stage_layers_from_json(json, c); !listed) return listed.error();
  return c;
}

Json to_json(const TrainingSpec& t) {
  Json j;
  j["gpus"] = t.gpus;
  j["global_batch"] = t.global_batch;
  j["seq_len"] = t.seq_len;
  j["tokens"] = t.tokens;
  j["param_bytes"] = t.param_bytes;
  j["grad_bytes"] = t.grad_bytes;
  j["optimizer_bytes"] = t.optimizer_bytes;
  j["activation_bytes"] = t.activation_bytes;
  j["attention"] = to_string(t.attention);
  j["elementwise"] = to_string(t.elementwise);
  if (t.flash_kernel != FlashKernel::kFused) j["flash_kernel"] = to_string(t.flash_kernel);
  if (t.cp_attention != CpAttention::kTe) j["cp_attention"] = to_string(t.cp_attention);
  j["precision"] = to_string(t.precision);
  if (t.precision == Precision::kFp8) j["fp8_recipe"] = to_string(t.fp8_recipe);
  j["allow_cross_node_tp"] = t.allow_cross_node_tp;
  j["overlap_grad_reduce"] = t.overlap_grad_reduce;
  j["pipeline_sends_block"] = t.pipeline_sends_block;
  j["tp_comm_overlap"] = t.tp_comm_overlap;
  j["zero3_unit"] = to_string(t.zero3_unit);
  if (t.zero3_pp_keep_gathered) j["zero3_pp_keep_gathered"] = true;
  if (t.zero3_fp32_shards) j["zero3_fp32_shards"] = true;
  if (t.zero3_collective_copies) j["zero3_collective_copies"] = true;
  if (t.zero3_prefetch_elements > 0) j["zero3_prefetch_elements"] = t.zero3_prefetch_elements;
  if (t.sp_collective_copies) j["sp_collective_copies"] = true;
  if (!t.framework.empty()) j["framework"] = t.framework;
  if (t.moe_imbalance != 1.0) j["moe_imbalance"] = t.moe_imbalance;
  if (t.moe_shared_expert_overlap) j["moe_shared_expert_overlap"] = true;
  if (t.kernel_cv != 0.0) j["kernel_cv"] = t.kernel_cv;
  if (t.gpu_cv != 0.0) j["gpu_cv"] = t.gpu_cv;
  if (t.host_op_s != 0.0) j["host_op_s"] = t.host_op_s;
  if (t.loss_bytes_per_logit != 4.0) j["loss_bytes_per_logit"] = t.loss_bytes_per_logit;
  if (!t.head_casts_logits_grad) j["head_casts_logits_grad"] = false;
  if (!t.softmax_bwd_applies_dropout) j["softmax_bwd_applies_dropout"] = false;
  if (t.embedding_grad_dense) j["embedding_grad_dense"] = true;
  if (t.loss_kernel != LossKernel::kExecutor) j["loss_kernel"] = to_string(t.loss_kernel);
  return j;
}

Result<TrainingSpec> training_from_json(const Json& json) {
  FieldReader r(json, "training");
  TrainingSpec t;
  t.gpus = static_cast<int>(r.integer("gpus", std::nullopt, 1, kMaxGpus));
  t.global_batch = r.integer("global_batch", std::nullopt, 1, 1LL << 40);
  t.seq_len = static_cast<int>(r.integer("seq_len", 0, 0, kMaxSeq));
  t.tokens = r.number("tokens", 0.0, 0.0, 1e18);
  t.param_bytes = static_cast<int>(r.integer("param_bytes", 2, 1, 8));
  t.grad_bytes = static_cast<int>(r.integer("grad_bytes", 2, 1, 8));
  t.optimizer_bytes = static_cast<int>(r.integer("optimizer_bytes", 12, 0, 64));
  t.activation_bytes = static_cast<int>(r.integer("activation_bytes", 2, 1, 8));
  const std::string attention = r.string("attention", std::string(to_string(AttentionKernel::kFlash)));
  const std::string elementwise = r.string("elementwise", std::string(to_string(Elementwise::kFused)));
  const std::string flash_kernel = r.string("flash_kernel", std::string(to_string(FlashKernel::kFused)));
  const std::string cp_attention = r.string("cp_attention", std::string(to_string(CpAttention::kTe)));
  const std::string loss_kernel = r.string("loss_kernel", std::string(to_string(LossKernel::kExecutor)));
  const std::string precision = r.string("precision", std::string(to_string(Precision::kBf16)));
  const std::string recipe = r.string("fp8_recipe", std::string(to_string(Fp8Recipe::kDelayed)));
  t.allow_cross_node_tp = r.boolean("allow_cross_node_tp", false);
  t.overlap_grad_reduce = r.boolean("overlap_grad_reduce", true);
  t.pipeline_sends_block = r.boolean("pipeline_sends_block", false);
  t.tp_comm_overlap = r.boolean("tp_comm_overlap", true);
  t.zero3_pp_keep_gathered = r.boolean("zero3_pp_keep_gathered", false);
  t.zero3_fp32_shards = r.boolean("zero3_fp32_shards", false);
  t.zero3_collective_copies = r.boolean("zero3_collective_copies", false);
  t.sp_collective_copies = r.boolean("sp_collective_copies", false);
  t.framework = r.string("framework", std::string());
  t.moe_imbalance = r.number("moe_imbalance", 1.0, 1.0, 1e3);
  t.moe_shared_expert_overlap = r.boolean("moe_shared_expert_overlap", false);
  t.kernel_cv = r.number("kernel_cv", 0.0, 0.0, 1.0);
  t.gpu_cv = r.number("gpu_cv", 0.0, 0.0, 1.0);
  t.host_op_s = r.number("host_op_s", 0.0, 0.0, 0.1);
  t.loss_bytes_per_logit = r.number("loss_bytes_per_logit", 4.0, 0.0, 64.0);
  t.head_casts_logits_grad = r.boolean("head_casts_logits_grad", true);
  t.softmax_bwd_applies_dropout = r.boolean("softmax_bwd_applies_dropout", true);
  t.embedding_grad_dense = r.boolean("embedding_grad_dense", false);
  t.zero3_prefetch_elements = r.number("zero3_prefetch_elements", 0.0, 0.0, 1e15);
  const std::string unit = r.string("zero3_unit", std::string(to_string(Zero3Unit::kLayer)));
  if (!r.ok()) return make_error(r.error());
  const auto zero3_unit = parse_zero3_unit(unit);
  if (!zero3_unit)
    return make_error(fmt::format("training: 'zero3_unit' must be {}, not '{}'", one_of<Zero3Unit>(), unit));
  t.zero3_unit = *zero3_unit;
  if (!t.framework.empty())
    if (auto preset = find_framework(t.framework); !preset)
      return make_error(fmt::format("training: 'framework' must be {}, not '{}'", framework_names(), t.framework));
  const auto kernel = parse_attention_kernel(attention);
  if (!kernel)
    return make_error(fmt::format("training: 'attention' must be {}, not '{}'", one_of<AttentionKernel>(), attention));
  t.attention = *kernel;
  const auto fusion = parse_elementwise(elementwise);
  if (!fusion)
    return make_error(fmt::format("training: 'elementwise' must be {}, not '{}'", one_of<Elementwise>(), elementwise));
  t.elementwise = *fusion;
  const auto flash = parse_flash_kernel(flash_kernel);
  if (!flash)
    return make_error(
        fmt::format("training: 'flash_kernel' must be {}, not '{}'", one_of<FlashKernel>(), flash_kernel));
  t.flash_kernel = *flash;
  const auto cp_library = parse_cp_attention(cp_attention);
  if (!cp_library)
    return make_error(
        fmt::format("training: 'cp_attention' must be {}, not '{}'", one_of<CpAttention>(), cp_attention));
  t.cp_attention = *cp_library;
  const auto loss = parse_loss_kernel(loss_kernel);
  if (!loss)
    return make_error(fmt::format("training: 'loss_kernel' must be {}, not '{}'", one_of<LossKernel>(), loss_kernel));
  t.loss_kernel = *loss;
  const auto p = parse_precision(precision);
  if (!p) return make_error(fmt::format("training: 'precision' must be {}, not '{}'", one_of<Precision>(), precision));
  t.precision = *p;
  const auto fp8 = parse_fp8_recipe(recipe);
  if (!fp8) return make_error(fmt::format("training: 'fp8_recipe' must be {}, not '{}'", one_of<Fp8Recipe>(), recipe));
  t.fp8_recipe = *fp8;
  return t;
}

Json to_json(const MemoryBreakdownGiB& m) {
  Json j;
  j["params"] = m.params;
  j["grads"] = m.grads;
  j["optimizer"] = m.optimizer;
  j["activations"] = m.activations;
  j["buffers"] = m.buffers;
  j["total"] = m.total;
  return j;
}

Json to_json(const PlanMetrics& p) {
  Json j;
  j["step_time_s"] = p.step_time_s;
  j["tokens_per_s"] = p.tokens_per_s;
  j["tflops_per_gpu"] = p.tflops_per_gpu;
  j["hw_tflops_per_gpu"] = p.hw_tflops_per_gpu;
  j["mfu"] = p.mfu;
  j["bubble_fraction"] = p.bubble_fraction;
  j["exposed_comm_s"] = p.exposed_comm_s;
  j["fits"] = p.fits;
  j["memory_gib"] = to_json(p.memory_gib);
  return j;
}

Result<PlanMetrics> metrics_from_json(const Json& json) {
  FieldReader r(json, "predicted");
  PlanMetrics p;
  p.step_time_s = r.number("step_time_s", 0.0);
  p.tokens_per_s = r.number("tokens_per_s", 0.0);
  p.tflops_per_gpu = r.number("tflops_per_gpu", 0.0);
  p.hw_tflops_per_gpu = r.number("hw_tflops_per_gpu", 0.0);
  p.mfu = r.number("mfu", 0.0);
  p.bubble_fraction = r.number("bubble_fraction", 0.0);
  p.exposed_comm_s = r.number("exposed_comm_s", 0.0);
  p.fits = r.boolean("fits", false);
  if (!r.ok()) return make_error(r.error());
  if (json.contains("memory_gib")) {
    FieldReader m(json["memory_gib"], "predicted.memory_gib");
    p.memory_gib.params = m.number("params", 0.0);
    p.memory_gib.grads = m.number("grads", 0.0);
    p.memory_gib.optimizer = m.number("optimizer", 0.0);
    p.memory_gib.activations = m.number("activations", 0.0);
    p.memory_gib.buffers = m.number("buffers", 0.0);
    p.memory_gib.total = m.number("total", 0.0);
    if (!m.ok()) return make_error(m.error());
  }
  return p;
}

Json to_json(const Plan& plan) {
  Json j;
  j["format"] = kPlanFormat;
  j["model"] = to_json(plan.model);
  j["cluster"] = plan.cluster;
  j["training"] = to_json(plan.training);
  j["config"] = to_json(plan.config);
  j["config"]["stage_layers"] = stage_layer_counts(plan.model.layers, plan.config);
  if (plan.predicted) j["predicted"] = to_json(*plan.predicted);
  return j;
}

Result<Plan> plan_from_json(const Json& json) {
  if (!json.is_object()) return make_error("plan: expected a JSON object");
  if (auto tag = check_format_tag(json, "format", kPlanFormat, "plan"); !tag) return tag.error();
  for (const char* key : {"model", "training", "config"})
    if (!json.contains(key)) return make_error(fmt::format("plan: missing field '{}'", key));
  Plan plan;
  auto model = model_from_json(json["model"]);
  if (!model) return model.error();
  auto training = training_from_json(json["training"]);
  if (!training) return training.error();
  auto config = config_from_json(json["config"]);
  if (!config) return config.error();
  plan.model = std::move(*model);
  plan.training = *training;
  plan.config = *config;
  if (json.contains("cluster") && !json["cluster"].is_string())
    return make_error("plan: 'cluster' must be a cluster preset name or cost file path (a string)");
  plan.cluster = json.value("cluster", std::string("local-cpu"));
  if (json.contains("predicted")) {
    auto metrics = metrics_from_json(json["predicted"]);
    if (!metrics) return metrics.error();
    plan.predicted = *metrics;
  }
  if (plan.config.world_size() != plan.training.gpus)
    return make_error(
        fmt::format("plan: tp·cp·pp·dp = {} but training.gpus = {}", plan.config.world_size(), plan.training.gpus));
  return plan;
}

Status check_format_tag(const Json& json, const char* key, const char* expected, const std::string& what) {
  if (!json.is_object() || !json.contains(key)) return {};
  const Json& tag = json[key];
  if (!tag.is_string())
    return make_error(fmt::format("{}: '{}' must be a format name such as '{}'", what, key, expected));
  if (tag.get<std::string>() != expected)
    return make_error(
        fmt::format("{}: format '{}' is not one this Loom reads ({})", what, tag.get<std::string>(), expected));
  return {};
}

Result<Json> parse_json(const std::string& text, const std::string& what) {
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    // Re-parse with exceptions only to say what is wrong and where.
    try {
      const Json reparsed = Json::parse(text);
      (void)reparsed;
    } catch (const Json::parse_error& e) {
      return make_error(fmt::format("{}: malformed JSON at byte {}", what, e.byte));
    } catch (const Json::out_of_range& e) {
      // A number past double's range ("1e505"), found by the fuzzers of tests/fuzz: it threw out
      // of here before.
      return make_error(fmt::format("{}: a number is out of range ({})", what, e.what()));
    }
    return make_error(fmt::format("{}: malformed JSON", what));
  }
  return json;
}

Result<std::string> read_text_file(const std::string& path, std::size_t max_bytes) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return make_error(fmt::format("{}: is a directory, not a file", path));
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(fmt::format("{}: cannot open file", path));
  // Read in blocks, so that a device or a pipe that never ends stops at the limit.
  std::string text;
  std::array<char, 1 << 16> block{};
  while (in.read(block.data(), block.size()) || in.gcount() > 0) {
    const auto got = static_cast<std::size_t>(in.gcount());
    if (text.size() + got > max_bytes)
      return make_error(fmt::format("{}: over {} MiB, more than Loom reads for this input", path, max_bytes >> 20));
    text.append(block.data(), got);
  }
  if (in.bad()) return make_error(fmt::format("{}: read failed", path));
  return text;
}

Result<Json> read_json_file(const std::string& path) {
  auto text = read_text_file(path);
  if (!text) return text.error();
  return parse_json(*text, path);
}

Status write_text_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return make_error(fmt::format("{}: cannot write file", path));
    out << text;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return make_error(fmt::format("{}: write failed", path));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    return make_error(fmt::format("{}: cannot write file ({})", path, ec.message()));
  }
  return {};
}

}  // namespace loom
