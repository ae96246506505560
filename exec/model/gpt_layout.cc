#include "exec/model/gpt_layout.h"

#include <cmath>

#include <fmt/format.h>

#include "core/pipeline_split.h"

namespace loom::exec {

namespace {

constexpr std::uint64_t kWordEmbeddingId = 1, kPositionId = 2, kHeadId = 3, kFinalNormWeightId = 4,
                        kFinalNormBiasId = 5;
std::uint64_t layer_param_id(int layer, int kind) { return 1000 + static_cast<std::uint64_t>(layer) * 32 + kind; }
// Routed expert e's two matrices: an id space of their own, far above every layer's.
std::uint64_t expert_param_id(int layer, int expert, int kind) {
  return (1ULL << 40) + (static_cast<std::uint64_t>(layer) << 20) + static_cast<std::uint64_t>(expert) * 2 + kind;
}

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

class UnitBuilder {
 public:
  explicit UnitBuilder(Unit& unit) : unit_(unit) {}
  // A parameter whose local rows are full rows through `blocks` and columns [col_offset, +cols).
  ParamSlot& add(std::string name, std::uint64_t id, std::int64_t rows, std::int64_t cols, ParamInit init,
                 float init_std, std::int64_t full_cols, std::int64_t col_offset, std::vector<RowBlock> blocks) {
    ParamSlot s;
    s.name = std::move(name);
    s.id = id;
    s.offset = unit_.size;
    s.rows = rows;
    s.cols = cols;
    s.init = init;
    s.init_std = init_std;
    s.full_cols = full_cols;
    s.col_offset = col_offset;
    s.row_blocks = std::move(blocks);
    s.weight_decay = init == ParamInit::kNormal;
    unit_.size += rows * cols;
    unit_.params.push_back(std::move(s));
    return unit_.params.back();
  }
  // A vector replicated on every TP rank (norm gain/bias, row-parallel bias).
  ParamSlot& replicated(std::string name, std::uint64_t id, std::int64_t n, ParamInit init) {
    ParamSlot& s = add(std::move(name), id, n, 1, init, 0, 1, 0, {{0, 0, n}});
    s.tp_replicated = true;
    s.sequence_partial = true;
    return s;
  }

 private:
  Unit& unit_;
};

void add_norm(UnitBuilder& b, const ModelSpec& m, const std::string& prefix, std::uint64_t weight_id,
              std::uint64_t bias_id) {
  b.replicated(prefix + ".weight", weight_id, m.hidden, ParamInit::kOnes);
  if (m.norm == Norm::kLayerNorm) b.replicated(prefix + ".bias", bias_id, m.hidden, ParamInit::kZeros);
}

// QK-norm's gains (ModelSpec::qk_norm): per head, one head_dim vector for Q's heads and one for K's,
// replicated over TP, whose ranks each normalise their own heads (so the gradient is a partial sum at
// any TP size; Qwen3Attention's q_norm/k_norm); over the full width, as wide as Q and as K, split over
// TP with the heads (Olmo2Attention's q_norm/k_norm; the executor runs it at tp 1, check_runnable).
void add_qk_norm(UnitBuilder& b, const ModelSpec& m, const LocalDims& d, const std::string& p, int layer) {
  if (m.qk_norm == QkNorm::kNone) return;
  const std::int64_t hd = d.head_dim, r = d.tp_rank;
  if (m.qk_norm == QkNorm::kPerHead) {
    for (const auto& [name, kind] : {std::pair{"attn.q_norm.weight", 16}, std::pair{"attn.k_norm.weight", 17}}) {
      b.replicated(p + name, layer_param_id(layer, kind), hd, ParamInit::kOnes).tp_partial = true;
    }
    return;
  }
  const std::int64_t q = static_cast<std::int64_t>(d.heads) * hd, kv = static_cast<std::int64_t>(d.kv_heads) * hd;
  b.add(p + "attn.q_norm.weight", layer_param_id(layer, 16), q, 1, ParamInit::kOnes, 0, 1, 0, {{0, r * q, q}});
  b.add(p + "attn.k_norm.weight", layer_param_id(layer, 17), kv, 1, ParamInit::kOnes, 0, 1, 0, {{0, r * kv, kv}});
}

// Rows of a column-parallel MLP input matrix held by TP rank r: [r·f, (r+1)·f) of the full `full`
// rows, and for a gated activation the same rows of the up half too (full rows [full, 2·full)).
std::vector<RowBlock> mlp_in_blocks(const ModelSpec& m, std::int64_t f, std::int64_t full, std::int64_t r) {
  std::vector<RowBlock> blocks = {{0, r * f, f}};
  if (m.activation == Activation::kSwiGLU) blocks.push_back({f, full + r * f, f});
  return blocks;
}

Unit make_layer_unit(const ModelSpec& m, const LocalDims& d, int layer) {
  Unit u;
  u.name = fmt::format("layers.{}", layer);
  u.kind = UnitKind::kLayer;
  u.layer = layer;
  UnitBuilder b(u);
  const std::string p = u.name + ".";
  const float std_in = 0.02f;
  const float std_out = 0.02f / std::sqrt(2.0f * static_cast<float>(m.layers));
  const std::int64_t hd = d.head_dim, r = d.tp_rank;
  const std::int64_t q_rows = static_cast<std::int64_t>(d.heads) * hd,
                     kv_rows = static_cast<std::int64_t>(d.kv_heads) * hd;
  const std::int64_t q_full = static_cast<std::int64_t>(m.heads) * hd, kv_full = m.kv_dim();
  const std::vector<RowBlock> qkv_blocks = {{0, r * q_rows, q_rows},
                                            {q_rows, q_full + r * kv_rows, kv_rows},
                                            {q_rows + kv_rows, q_full + kv_full + r * kv_rows, kv_rows}};

  add_norm(b, m, p + "ln1", layer_param_id(layer, 0), layer_param_id(layer, 1));
  b.add(p + "attn.qkv.weight", layer_param_id(layer, 2), d.qkv_cols, m.hidden, ParamInit::kNormal, std_in, m.hidden, 0,
        qkv_blocks);
  if (m.linear_bias || m.qkv_bias)
    b.add(p + "attn.qkv.bias", layer_param_id(layer, 3), d.qkv_cols, 1, ParamInit::kZeros, 0, 1, 0, qkv_blocks);
  add_qk_norm(b, m, d, p, layer);
  b.add(p + "attn.proj.weight", layer_param_id(layer, 4), m.hidden, q_rows, ParamInit::kNormal, std_out, q_full,
        r * q_rows, {{0, 0, m.hidden}});
  if (m.linear_bias) b.replicated(p + "attn.proj.bias", layer_param_id(layer, 5), m.hidden, ParamInit::kZeros);
  add_norm(b, m, p + "ln2", layer_param_id(layer, 6), layer_param_id(layer, 7));
  if (m.is_moe_layer(layer)) {
    // The router: replicated on every TP rank (its gradient a partial sum under SP, as a norm's).
    ParamSlot& router = b.add(p + "mlp.router.weight", layer_param_id(layer, 12), d.experts, m.hidden,
                              ParamInit::kNormal, std_in, m.hidden, 0, {{0, 0, d.experts}});
    router.tp_replicated = true;
    router.sequence_partial = true;
    if (d.shared_ffn > 0) {  // the shared expert: a dense MLP beside the routed ones, split over TP alike
      b.add(p + "mlp.shared.fc.weight", layer_param_id(layer, 13), d.shared_ffn_in, m.hidden, ParamInit::kNormal,
            std_in, m.hidden, 0, mlp_in_blocks(m, d.shared_ffn, m.moe.shared_ffn, r));
      b.add(p + "mlp.shared.proj.weight", layer_param_id(layer, 14), m.hidden, d.shared_ffn, ParamInit::kNormal,
            std_out, m.moe.shared_ffn, r * d.shared_ffn, {{0, 0, m.hidden}});
      if (m.moe.shared_gate) {  // Qwen2-MoE: sigmoid(x·w) scales the shared expert's output, replicated
        ParamSlot& gate = b.add(p + "mlp.shared.gate.weight", layer_param_id(layer, 15), 1, m.hidden,
                                ParamInit::kNormal, std_in, m.hidden, 0, {{0, 0, 1}});
        gate.tp_replicated = true;
        gate.sequence_partial = true;
      }
    }
    return u;
  }
  const std::vector<RowBlock> fc_blocks = mlp_in_blocks(m, d.ffn, m.ffn_hidden, r);
  b.add(p + "mlp.fc.weight", layer_param_id(layer, 8), d.ffn_in, m.hidden, ParamInit::kNormal, std_in, m.hidden, 0,
        fc_blocks);
  if (m.linear_bias)
    b.add(p + "mlp.fc.bias", layer_param_id(layer, 9), d.ffn_in, 1, ParamInit::kZeros, 0, 1, 0, fc_blocks);
  b.add(p + "mlp.proj.weight", layer_param_id(layer, 10), m.hidden, d.ffn, ParamInit::kNormal, std_out, m.ffn_hidden,
        r * d.ffn, {{0, 0, m.hidden}});
  if (m.linear_bias) b.replicated(p + "mlp.proj.bias", layer_param_id(layer, 11), m.hidden, ParamInit::kZeros);
  return u;
}

// An MoE layer's routed experts held by this rank, each split over TP as a dense MLP is.
Unit make_experts_unit(const ModelSpec& m, const LocalDims& d, int layer) {
  Unit u;
  u.name = fmt::format("layers.{}.experts.{}-{}", layer, d.first_expert, d.first_expert + d.local_experts - 1);
  u.kind = UnitKind::kExperts;
  u.layer = layer;
  UnitBuilder b(u);
  const float std_in = 0.02f;
  const float std_out = 0.02f / std::sqrt(2.0f * static_cast<float>(m.layers));
  const std::int64_t r = d.experts_whole ? 0 : d.tp_rank;  // this rank's slice of each expert's width
  for (int e = d.first_expert; e < d.first_expert + d.local_experts; ++e) {
    const std::string p = fmt::format("layers.{}.mlp.experts.{}.", layer, e);
    b.add(p + "fc.weight", expert_param_id(layer, e, 0), d.expert_ffn_in, m.hidden, ParamInit::kNormal, std_in,
          m.hidden, 0, mlp_in_blocks(m, d.expert_ffn, m.moe.expert_ffn, r));
    b.add(p + "proj.weight", expert_param_id(layer, e, 1), m.hidden, d.expert_ffn, ParamInit::kNormal, std_out,
          m.moe.expert_ffn, r * d.expert_ffn, {{0, 0, m.hidden}});
  }
  return u;
}

Unit make_vocab_unit(const std::string& name, UnitKind kind, std::uint64_t id, const ModelSpec& m, const LocalDims& d,
                     bool tied_copy) {
  Unit u;
  u.name = name;
  u.kind = kind;
  UnitBuilder b(u);
  ParamSlot& s = b.add(name + ".weight", id, d.vocab_local, m.hidden, ParamInit::kNormal, 0.02f, m.hidden, 0,
                       {{0, d.vocab_start, d.vocab_local}});
  s.zero_from_full_row = m.vocab;
  s.tied_copy = tied_copy;
  return u;
}

}  // namespace

const ParamSlot* Unit::find(const std::string& suffix) const {
  for (const auto& p : params)
    if (p.name.size() >= suffix.size() && p.name.compare(p.name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return &p;
  return nullptr;
}

const ParamSlot& Unit::param(const std::string& suffix) const { return *find(suffix); }

std::int64_t StageLayout::total_padded() const {
  std::int64_t n = 0;
  for (const auto& u : units) n += u.padded;
  return n;
}

std::int64_t StageLayout::total_params() const {
  std::int64_t n = 0;
  for (const auto& u : units) n += u.size;
  return n;
}

ShardPlace shard_place(const Unit& u, const ParallelConfig& c, int world_rank) {
  if (u.experts() && (c.ep > 1 || c.expert_tp() != c.tp))
    return {c.expert_grad_ranks(), expert_coords(c, world_rank).edp_rank, true};
  const RankCoords rc = rank_coords(c, world_rank);
  return {c.zero_shards(), (rc.cp_rank + c.cp * rc.dp_rank) % c.zero_shards(), false};
}

std::pair<int, int> stage_layers(const ModelSpec& m, const ParallelConfig& c, int virtual_stage) {
  const int first = first_layer_of(m.layers, c, virtual_stage);
  return {first, first + virtual_stage_layer_count(m.layers, c, virtual_stage)};
}

namespace {

RuleViolation executor_limit(std::string_view rule, std::string message) {
  return {std::string(rule), std::move(message)};
}

// What the model and the sequence must be for the executor to build its tables.
RuleStatus check_model_inputs(const ModelSpec& m, int seq_len) {
  if (m.heads < 1 || (m.explicit_head_dim == 0 && m.hidden % m.heads != 0))
    return executor_limit(rule::kModelShape, fmt::format("hidden {} is not a multiple of heads {}", m.hidden, m.heads));
  // Planned and simulated, not yet run: expert and router biases (gpt-oss), latent attention, softmax sinks,
  // sliding windows, attention chunks, multi-token prediction (QK-norm over the full width: at tp 1).
  if (m.moe.active() && m.moe.expert_bias)
    return executor_limit(rule::kModelShape, "the executor does not run expert and router biases (gpt-oss) yet");
  if (m.mla.active())
    return executor_limit(rule::kModelShape, "the executor does not run multi-head latent attention (MLA) yet");
  if (m.attention_sinks) return executor_limit(rule::kModelShape, "the executor does not run attention sinks yet");
  if (m.windowed_at(seq_len))
    return executor_limit(rule::kModelShape, "the executor does not run sliding-window attention yet");
  if (m.chunked_at(seq_len))
    return executor_limit(rule::kModelShape, "the executor does not run chunked attention (Llama 4) yet");
  if (m.mtp_layers > 0)
    return executor_limit(rule::kModelShape, "the executor does not run multi-token prediction (mtp_layers) yet");
  if (m.position == PositionEmbedding::kRotary && m.head_dim() % 2 != 0)
    return executor_limit(rule::kModelShape, "rotary embedding needs an even head_dim");
  // Learned positions have seq_len rows; rotary tables are built for the same length.
  if (seq_len < 1 || seq_len > m.seq_len)
    return executor_limit(rule::kSeqLen,
                          fmt::format("sequence length {} must be between 1 and the model's {}", seq_len, m.seq_len));
  return {};
}

}  // namespace

RuleStatus check_runnable(const ModelSpec& m, const TrainingSpec& t, const ParallelConfig& c) {
  if (auto s = check_model_inputs(m, t.seq_len > 0 ? t.seq_len : m.seq_len); !s) return s;
  if (auto s = check_config(m, t, c, StageSplit::kUneven); !s) return s;
  if (m.moe.active() && (m.moe.expert_ffn % c.expert_tp() != 0 || m.moe.shared_ffn % c.tp != 0))
    return executor_limit(rule::kModelShape,
                          fmt::format("expert ffn {} must be a multiple of etp {} and shared expert ffn {} of tp {}",
                                      m.moe.expert_ffn, c.expert_tp(), m.moe.shared_ffn, c.tp));
  // Over the full width the norm's mean square spans every head, which TP splits: a TP all-reduce per
  // token (the simulator costs it) that the executor does not run yet.
  if (m.qk_norm == QkNorm::kFullWidth && c.tp > 1)
    return executor_limit(rule::kModelShape, "the executor runs full-width QK-norm (OLMo 2) at tp 1 only");
  if (t.precision != Precision::kBf16)
    return executor_limit(rule::kExecutorPrecision,
                          "the executor does not run --precision fp8 yet (it is planned and simulated)");
  return {};
}

StageLayout make_stage_layout(const ModelSpec& m, const ParallelConfig& c, int tp_rank, int pp_rank, int ep_rank) {
  StageLayout s;
  LocalDims& d = s.dims;
  d.tp = c.tp;
  d.tp_rank = tp_rank;
  d.hidden = m.hidden;
  d.head_dim = m.head_dim();
  d.heads = m.heads / c.tp;
  d.kv_heads = m.kv_heads / c.tp;
  d.ffn = m.ffn_hidden / c.tp;
  d.ffn_in = m.activation == Activation::kSwiGLU ? 2 * d.ffn : d.ffn;
  d.qkv_cols = static_cast<std::int64_t>(d.heads + 2 * d.kv_heads) * d.head_dim;
  d.vocab = m.vocab;
  d.vocab_padded = padded_vocab(m.vocab, c.tp);
  d.vocab_local = d.vocab_padded / c.tp;
  d.vocab_start = tp_rank * d.vocab_local;
  d.vocab_valid_local = std::max(0, std::min(d.vocab_local, m.vocab - d.vocab_start));
  if (m.moe.active()) {
    const int gated = m.activation == Activation::kSwiGLU ? 2 : 1;
    d.experts = m.moe.experts;
    d.experts_per_token = m.moe.experts_per_token;
    d.local_experts = m.moe.experts / c.ep;
    d.first_expert = ep_rank * d.local_experts;
    d.experts_whole = c.expert_tp() != c.tp;
    d.expert_ffn = m.moe.expert_ffn / c.expert_tp();
    d.expert_ffn_in = gated * d.expert_ffn;
    d.shared_ffn = m.moe.shared_ffn / c.tp;
    d.shared_ffn_in = gated * d.shared_ffn;
  }
  std::tie(s.first_layer, s.end_layer) = stage_layers(m, c, pp_rank);

  const bool first = pp_rank == 0, last = pp_rank == c.pp * c.vpp - 1;
  if (first) {
    s.word_embedding_unit = static_cast<int>(s.units.size());
    s.units.push_back(make_vocab_unit("wte", UnitKind::kWordEmbedding, kWordEmbeddingId, m, d, false));
    if (m.position == PositionEmbedding::kLearned) {
      s.position_unit = static_cast<int>(s.units.size());
      Unit u;
      u.name = "wpe";
      u.kind = UnitKind::kPositionEmbedding;
      UnitBuilder b(u);
      ParamSlot& p = b.replicated("wpe.weight", kPositionId, m.seq_len, ParamInit::kNormal);
      p.cols = m.hidden;
      p.full_cols = m.hidden;
      p.init_std = 0.02f;
      p.weight_decay = true;
      u.size = p.numel();
      s.units.push_back(std::move(u));
    }
  }
  for (int l = s.first_layer; l < s.end_layer; ++l) {
    s.layer_units.push_back(static_cast<int>(s.units.size()));
    s.units.push_back(make_layer_unit(m, d, l));
    s.expert_units.push_back(m.is_moe_layer(l) ? static_cast<int>(s.units.size()) : -1);
    if (m.is_moe_layer(l)) s.units.push_back(make_experts_unit(m, d, l));
  }
  if (last) {
    s.final_unit = static_cast<int>(s.units.size());
    Unit u;
    u.name = "final";
    u.kind = UnitKind::kFinal;
    UnitBuilder b(u);
    add_norm(b, m, "lnf", kFinalNormWeightId, kFinalNormBiasId);
    s.units.push_back(std::move(u));
    if (!m.tied_embeddings) {
      Unit& f = s.units.back();
      Unit head = make_vocab_unit("head", UnitKind::kFinal, kHeadId, m, d, false);
      ParamSlot slot = head.params.front();
      slot.offset = f.size;
      f.size += slot.numel();
      f.params.push_back(slot);
    } else if (c.pp > 1) {
      s.tied_head_unit = static_cast<int>(s.units.size());
      s.units.push_back(make_vocab_unit("wte", UnitKind::kTiedHead, kWordEmbeddingId, m, d, true));
    }
  }
  // Padded to a multiple of the ranks sharing it (ZeRO's shards: the dp·cp ranks, or the
  // expert-data-parallel ones for routed experts).
  for (auto& u : s.units) {
    const int shards = u.experts() ? c.expert_grad_ranks() : c.grad_ranks();
    u.padded = (u.size + shards - 1) / shards * shards;
  }
  return s;
}

RankLayout make_rank_layout(const ModelSpec& m, const ParallelConfig& c, int tp_rank, int pp_rank, int ep_rank) {
  RankLayout r;
  for (int chunk = 0; chunk < c.vpp; ++chunk)
    r.chunks.push_back(make_stage_layout(m, c, tp_rank, virtual_stage(chunk, pp_rank, c.pp), ep_rank));
  StageLayout& all = r.combined;
  all.dims = r.chunks.front().dims;
  all.first_layer = r.chunks.front().first_layer;
  all.end_layer = r.chunks.back().end_layer;
  auto shifted = [](int index, int offset) { return index >= 0 ? index + offset : -1; };
  for (const StageLayout& chunk : r.chunks) {
    const int offset = static_cast<int>(all.units.size());
    r.unit_offset.push_back(offset);
    for (int u : chunk.layer_units) all.layer_units.push_back(u + offset);
    for (int u : chunk.expert_units) all.expert_units.push_back(shifted(u, offset));
    if (chunk.word_embedding_unit >= 0) all.word_embedding_unit = chunk.word_embedding_unit + offset;
    if (chunk.position_unit >= 0) all.position_unit = chunk.position_unit + offset;
    if (chunk.final_unit >= 0) all.final_unit = shifted(chunk.final_unit, offset);
    if (chunk.tied_head_unit >= 0) all.tied_head_unit = shifted(chunk.tied_head_unit, offset);
    all.units.insert(all.units.end(), chunk.units.begin(), chunk.units.end());
  }
  return r;
}

float initial_value(std::uint64_t seed, std::uint64_t param_id, std::uint64_t full_index) {
  const std::uint64_t x = splitmix64(seed * 0x9E3779B97F4A7C15ULL + param_id * 0xBF58476D1CE4E5B9ULL + full_index);
  const std::uint64_t y = splitmix64(x);
  const double u1 = (static_cast<double>(x >> 11) + 0.5) * 0x1.0p-53;
  const double u2 = (static_cast<double>(y >> 11) + 0.5) * 0x1.0p-53;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

void initialize_slot(float* data, const ParamSlot& slot, std::uint64_t seed) {
  // Each value is a function of its index alone, so rows split over the thread team give the same values:
  // on one thread a 1.3B GPT took about a minute to start (bench/exec/init_bench.cc).
  for (const RowBlock& block : slot.row_blocks)
#pragma omp parallel for schedule(static) if (block.count * slot.cols >= (std::int64_t{1} << 16))
    for (std::int64_t i = 0; i < block.count; ++i) {
      const std::int64_t full_row = block.full_row + i;
      float* row = data + (block.local_row + i) * slot.cols;
      for (std::int64_t c = 0; c < slot.cols; ++c) {
        float v = 0;
        if (slot.zero_from_full_row >= 0 && full_row >= slot.zero_from_full_row)
          v = 0;
        else if (slot.init == ParamInit::kOnes)
          v = 1;
        else if (slot.init == ParamInit::kNormal)
          v = slot.init_std *
              initial_value(seed, slot.id, static_cast<std::uint64_t>(full_row * slot.full_cols + slot.col_offset + c));
        row[c] = v;
      }
    }
}

}  // namespace loom::exec
