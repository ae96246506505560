#include "planner/public_runs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string_view>

#include "core/config_rules.h"
#include "core/framework.h"
#include "core/json_fields.h"
#include "core/json_io.h"
#include "core/presets.h"
#include "planner/memory_model.h"
#include "sim/simulator.h"

namespace loom {

namespace {

bool contains(std::string_view text, std::string_view word) { return text.find(word) != std::string_view::npos; }

// The row's architecture. The file states shapes, activation, norm and tied embeddings; the rest
// follows the family: GPT-3 as NeMo trains it has biases and learned positions, the LLaMA and
// Nemotron families neither (rotary positions, no biases). Nemotron's squared-ReLU MLP is a
// non-gated two-matrix MLP, costed as the GELU one (the file's activation_flop_class says the same).
// None of these published performance runs uses dropout.
Result<ModelSpec> row_model(const Json& m) {
  if (!m.is_object()) return make_error("'model' must be an object");
  // The shape as a model JSON is read (types, ranges, divisibility, Loom's size limit): the file is the
  // user's --validation-dir. Nemotron's squared ReLU is read as the non-gated MLP it is costed as.
  Json shape = m;
  if (shape.value("activation", Json()) == "squared_relu") shape["activation"] = "gelu";
  auto checked = model_from_json(shape);
  if (!checked) return checked.error();
  ModelSpec s;
  s.name = checked->name;
  s.layers = checked->layers;
  s.hidden = checked->hidden;
  s.heads = checked->heads;
  s.kv_heads = checked->kv_heads;
  s.ffn_hidden = checked->ffn_hidden;
  s.vocab = checked->vocab;
  s.seq_len = checked->seq_len;
  s.tied_embeddings = m.value("tied_embeddings", false);
  s.activation = checked->activation;
  s.norm = checked->norm;
  const bool gpt3 = contains(s.name, "GPT3");
  s.linear_bias = gpt3;
  s.position = gpt3 ? PositionEmbedding::kLearned : PositionEmbedding::kRotary;
  s.dropout = false;
  return s;
}

std::string cluster_of(std::string_view gpu) {
  if (contains(gpu, "B200")) return "dgx-b200";
  if (contains(gpu, "H200")) return "dgx-h200";
  if (contains(gpu, "H100")) return "dgx-h100";
  return "";
}

bool torchtitan(std::string_view source) { return contains(source, "torchtitan"); }

// The row's metric_secondary object (techniques, local batch, peak memory, ...), or null.
const Json* secondary_of(const Json& r) {
  return r.contains("metric_secondary") && r["metric_secondary"].is_object() ? &r["metric_secondary"] : nullptr;
}

// The row's fields as their types (numbers as whole numbers in range, or positive where they are
// measurements): `express` and the summary read them after this, as a malformed file is the user's.
Status check_row_fields(const Json& r, const std::string& where) {
  FieldReader f(r, where);
  for (const char* key : {"id", "gpu", "precision", "metric_name", "recompute"}) f.string(key, std::string());
  for (const char* key : {"fsdp", "config_inconsistent"}) f.boolean(key, false);
  f.integer("gpus", std::nullopt, 1, 1 << 24);
  f.integer("global_batch", std::nullopt, 1, 1LL << 40);
  for (const char* key : {"tp", "cp", "pp", "vp", "ep"}) f.integer(key, 1, 1, 1 << 20);
  f.integer("dp", 1, 1, 1 << 24);
  f.integer("micro_batch", 1, 1, 1 << 24);
  if (f.has("step_time_s")) f.number("step_time_s", std::nullopt, 1e-9);
  if (f.has("metric_value")) f.number("metric_value", std::nullopt, 0);
  if (f.has("source")) {
    FieldReader source(r["source"], where + " source");
    source.string("name", std::string());
    if (!source.ok()) return make_error(source.error());
  }
  if (!f.ok()) return make_error(f.error());
  // The model's sizes as whole numbers (row_model reads them against Loom's limits, refusing the row).
  if (r.contains("model") && r["model"].is_object()) {
    FieldReader m(r["model"], where + " model");
    for (const char* key : {"layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len"})
      if (m.has(key)) m.integer(key, std::nullopt, 1, std::numeric_limits<int>::max());
    if (!m.ok()) return make_error(m.error());
  }
  if (const Json* secondary = secondary_of(r)) {
    FieldReader g(*secondary, where + " metric_secondary");
    g.string("techniques", std::string());
    g.integer("dp_as_printed", 1, 1, 1 << 24);
    if (g.has("peak_memory_GiB")) g.number("peak_memory_GiB", std::nullopt, 0);
    if (!g.ok()) return make_error(g.error());
  }
  return {};
}

// Fills training and config from the row; returns why the row cannot be expressed (empty: it can).
std::string express(const Json& r, PublicRun& run) {
  const std::string precision = r.value("precision", "");
  const std::string source = run.source;
  TrainingSpec& t = run.training;
  ParallelConfig& c = run.config;
  t.gpus = r.value("gpus", 0);
  t.global_batch = r.value("global_batch", 0LL);
  t.seq_len = run.model.seq_len;
  // Each row under the stack that produced it (core/framework.h): Megatron-core for NeMo and
  // Megatron-Bridge, torchtitan for torchtitan's benchmarks, whose async-TP rows turn its
  // asynchronous tensor parallelism on. NeMo AutoModel's own FSDP2 backend has no preset.
  if (torchtitan(source)) {
    const FrameworkPreset* titan = find_framework("torchtitan").value();
    apply_framework(*titan, t);
    const Json* secondary = secondary_of(r);
    const std::string techniques = secondary ? secondary->value("techniques", std::string()) : std::string();
    // Asynchronous TP, as the rows' techniques name it ("AsyncTP" in the 2024-12 tables, "async TP" in
    // 2025-06's): the fused all-gather-matmul and matmul-reduce-scatter replace DTensor's collectives and
    // their copies (core/framework.cc, torchtitan's sp_collective_copies).
    if (contains(techniques, "AsyncTP") || contains(techniques, "async TP")) {
      t.tp_comm_overlap = true;
      t.sp_collective_copies = false;
    }
    // torchtitan runs eager unless --training.compile, which the rows' techniques name ("torch.compile",
    // "compile"): then each TransformerBlock is compiled and its element-wise ops fused.
    if (contains(techniques, "compile")) {
      t.elementwise = Elementwise::kFused;
      t.loss_bytes_per_logit = titan->compiled_loss_bytes_per_logit.value;
      // The December 2024 runs (torchtitan 9dec370): training.compile compiled each TransformerBlock
      // (parallelize_llama.py apply_compile) and left train.py's loss_fn eager.
      if (contains(run.source, "202412")) t.loss_bytes_per_logit = titan->loss_bytes_per_logit.value;
    }
  } else if (!contains(source, "AutoModel")) {
    apply_framework(*find_framework("megatron-core").value(), t);
  }
  t.attention = AttentionKernel::kFlash;  // TransformerEngine's fused attention, PyTorch SDPA (flash/cuDNN)
  if (contains(precision, "BF16")) {
    t.precision = Precision::kBf16;
  } else if (contains(precision, "FP8")) {
    t.precision = Precision::kFp8;
    // "FP8-CS", torchao "tensorwise": scales from each tensor's own amax (current scaling); torchao
    // "rowwise": a scale per row (its rowwise recipe); plain "FP8" in NeMo and Megatron-Bridge:
    // Megatron's default recipe, delayed scaling.
    const bool current = contains(precision, "CS") || contains(precision, "tensorwise");
    t.fp8_recipe = contains(precision, "rowwise") ? Fp8Recipe::kRowwise
                   : current                      ? Fp8Recipe::kTensorwise
                                                  : Fp8Recipe::kDelayed;
  } else {
    return fmt::format("precision '{}' is not modelled", precision);
  }
  if (r.value("ep", 1) > 1) return "expert parallelism";
  c.tp = r.value("tp", 1);
  // Context parallelism: Megatron-core's default exchange is the KV ring (cp_comm_type "p2p");
  // torchtitan's is PyTorch's ring attention, whose default rotate method gathers K and V
  // (_ContextParallelOptions.rotate_method = ALL_GATHER). The rows' dp excludes cp.
  c.cp = r["cp"].is_null() ? 1 : r["cp"].get<int>();
  c.cp_comm = torchtitan(source) ? CpComm::kAllGather : CpComm::kP2P;
  c.pp = r.value("pp", 1);
  c.dp = r.value("dp", 0);
  // A row whose printed configuration is inconsistent (the long-sequence table: its DP column is a quarter
  // of GPUs/(TP·PP·CP) throughout, the row's notes say): where the global batch does not split over the
  // DP the GPU count implies but does over the printed DP, the run is read as the printed one, on
  // TP·PP·CP·DP GPUs. What those rows publish, TFLOP/s per GPU, does not scale with the count.
  if (r.value("config_inconsistent", false) && c.dp > 0 && t.global_batch % c.dp != 0 && secondary_of(r)) {
    const int printed = secondary_of(r)->value("dp_as_printed", 0);
    if (printed > 0 && t.global_batch % printed == 0) {
      run.config_note = fmt::format(
          "global batch {} does not split over dp {} = GPUs/(tp·pp·cp): read with the printed dp {} on {} GPUs",
          t.global_batch, c.dp, printed, c.tp * c.pp * c.cp * printed);
      c.dp = printed;
      t.gpus = c.tp * c.pp * c.cp * printed;
    }
  }
  const int vp = r["vp"].is_null() ? 1 : r["vp"].get<int>();
  c.vpp = vp;
  c.sequence_parallel = c.tp > 1;  // NeMo/Megatron-Bridge performance recipes and torchtitan's TP both use it
  const bool fsdp = r.value("fsdp", false) || torchtitan(source) || contains(source, "AutoModel");
  // Megatron-core runs the distributed optimizer (ZeRO-1); FSDP rows shard everything (ZeRO-3).
  c.zero = fsdp ? 3 : 1;
  if (c.pp > 1) c.schedule = c.vpp > 1 ? Schedule::kInterleaved : Schedule::k1F1B;
  // 126 layers over pp·vp chunks: Megatron-Bridge's Llama 3.1 405B recipes count the embedding and
  // the loss as one layer each (account_for_embedding/loss_in_pipeline_split), 128 = 8·8·2.
  if (c.pp > 1 && run.model.layers % (c.pp * c.vpp) != 0 && (run.model.layers + 2) % (c.pp * c.vpp) == 0)
    c.split.account_for_embedding = c.split.account_for_loss = true;
  run.recompute_published = !r["recompute"].is_null();
  const std::string recompute = r["recompute"].is_null() ? "" : r["recompute"].get<std::string>();
  // torchtitan's "selective (op-level SAC)" / "(per-op SAC)" rows: its op-level policy (core/op_recompute.h).
  const bool op_sac = contains(recompute, "SAC") && contains(recompute, "op");
  c.recompute = contains(recompute, "full")        ? Recompute::kFull
                : op_sac                           ? Recompute::kOp
                : contains(recompute, "selective") ? Recompute::kSelective
                                                   : Recompute::kNone;
  // The micro-batch: stated by NeMo/Megatron-Bridge; torchtitan states the local batch per DP rank and
  // runs it as one micro-batch without a pipeline (no gradient accumulation in these benchmarks), and
  // with one as pp micro-batches (its default pipeline_parallel_microbatches is the PP degree at the
  // benchmarked commit, as the rows' notes record).
  const int pipeline_micro_batches = c.pp > 1 ? c.pp : 1;
  if (!r["micro_batch"].is_null()) {
    c.micro_batch = r["micro_batch"].get<int>();
  } else if (c.dp > 0 && t.global_batch % (c.dp * pipeline_micro_batches) == 0 && torchtitan(source)) {
    c.micro_batch = static_cast<int>(t.global_batch / (c.dp * pipeline_micro_batches));
  } else {
    c.micro_batch = 0;  // not published: reproduce_public_runs takes the planner's choice
  }
  return "";
}

// The micro-batches a row that does not publish one could have run: powers of two up to 16 that
// divide the per-replica batch and make a legal configuration.
std::vector<ParallelConfig> micro_batch_candidates(const PublicRun& run) {
  std::vector<ParallelConfig> out;
  for (int mb = 1; mb <= 16; mb *= 2) {
    ParallelConfig c = run.config;
    c.micro_batch = mb;
    if (c.dp > 0 && run.training.global_batch % (static_cast<long long>(c.dp) * mb) == 0 &&
        check_config(run.model, run.training, c).ok())
      out.push_back(c);
  }
  return out;
}

// For a row that names no recompute and did not fit without one: the candidates with selective, then
// full recompute added to each (none stays first, so it wins wherever it fits).
std::vector<ParallelConfig> with_recompute_candidates(const PublicRun& run, std::vector<ParallelConfig> candidates) {
  const std::size_t n = candidates.size();
  for (Recompute mode : {Recompute::kSelective, Recompute::kFull})
    for (std::size_t i = 0; i < n; ++i) {
      ParallelConfig c = candidates[i];
      c.recompute = mode;
      if (check_config(run.model, run.training, c).ok()) candidates.push_back(c);
    }
  return candidates;
}

// Simulates the row; without a published micro-batch (or, with `infer_recompute`, recompute), every
// candidate, keeping the fastest that fits in memory (the one `loom plan` would rank first among them),
// else the one needing the least memory.
void simulate_run(PublicRun& run, const ClusterSpec& cluster, bool infer_recompute = false) {
  std::vector<ParallelConfig> candidates = {run.config};
  if (run.config.micro_batch == 0) {
    candidates = micro_batch_candidates(run);
    run.micro_batch_note = "micro-batch not published: the fastest that fits";
    if (candidates.empty()) {
      run.refused =
          run.training.global_batch % run.config.dp != 0
              ? fmt::format("global batch {} does not split over dp {} = GPUs/(tp·pp·cp) (see the row's notes)",
                            run.training.global_batch, run.config.dp)
              : "no micro-batch up to 16 divides the per-replica batch";
      return;
    }
  }
  if (infer_recompute) candidates = with_recompute_candidates(run, std::move(candidates));
  bool found = false, found_fits = false;
  for (const ParallelConfig& c : candidates) {
    const MemoryReport memory = estimate_memory(run.model, run.training, c, cluster);
    auto sim = sim::simulate(run.model, run.training, c, cluster);
    if (!sim) {
      if (candidates.size() == 1) run.refused = sim.error().message;
      continue;
    }
    const double gib = memory.most_loaded_gib().total;
    const bool better = !found || (memory.fits && !found_fits) ||
                        (memory.fits == found_fits &&
                         (memory.fits ? sim->step_time_s < run.predicted_s : gib < run.predicted_peak_gib));
    if (!better) continue;
    found = true;
    found_fits = memory.fits;
    run.config = c;
    run.predicted_s = sim->step_time_s;
    run.predicted_tflops = sim->tflops_per_gpu;
    run.predicted_peak_gib = gib;
  }
  if (!found && run.refused.empty()) run.refused = "no micro-batch could be simulated";
  if (found && infer_recompute && run.config.recompute != Recompute::kNone)
    run.recompute_note =
        found_fits
            ? fmt::format("recompute not published: none does not fit in {:.0f} GiB, {} is the fastest that fits",
                          cluster.gpu_memory_gib(), to_string(run.config.recompute))
            : fmt::format("recompute not published: nothing fits in {:.0f} GiB, {} needs the least memory",
                          cluster.gpu_memory_gib(), to_string(run.config.recompute));
  if (found && !found_fits && candidates.size() > 1)
    run.micro_batch_note = "micro-batch not published: none fits, the one needing the least memory";
}

}  // namespace

Result<std::vector<PublicRun>> reproduce_public_runs(const std::string& json_path) {
  auto json = read_json_file(json_path);
  if (!json) return json.error();
  const Json& j = *json;
  if (!j.contains("rows") || !j["rows"].is_array())
    return make_error(fmt::format("{}: not the published-runs validation file (no 'rows')", json_path));
  std::map<std::string, ClusterSpec> clusters;
  std::vector<PublicRun> runs;
  for (const Json& r : j["rows"]) {
    if (!r.is_object()) return make_error(fmt::format("{}: a row that is not an object", json_path));
    PublicRun run;
    run.id = r.value("id", Json()).is_string() ? r["id"].get<std::string>() : "";
    if (Status fields = check_row_fields(r, fmt::format("{}: row '{}'", json_path, run.id)); !fields)
      return fields.error();
    run.source = r.contains("source") ? r["source"].value("name", "") : "";
    run.cluster = cluster_of(r.value("gpu", ""));
    if (r.contains("step_time_s") && r["step_time_s"].is_number()) run.published_s = r["step_time_s"].get<double>();
    auto model = row_model(r.value("model", Json()));
    if (!model) {
      run.refused = model.error().message;
    } else {
      run.model = *model;
      run.refused = run.cluster.empty() ? "GPU without a cluster preset" : express(r, run);
    }
    if (const Json* secondary = secondary_of(r);
        secondary && secondary->contains("peak_memory_GiB") && (*secondary)["peak_memory_GiB"].is_number())
      run.published_peak_gib = (*secondary)["peak_memory_GiB"].get<double>();
    if (r.value("metric_name", "") == "model_tflops_per_gpu" && r["metric_value"].is_number())
      run.published_tflops = r["metric_value"].get<double>();
    if (run.simulated()) {
      if (!clusters.contains(run.cluster)) {
        auto cluster = cluster_preset(run.cluster);
        if (!cluster) return cluster.error();
        clusters.emplace(run.cluster, *cluster);
      }
      const ClusterSpec& cluster = clusters.at(run.cluster);
      if (run.training.precision == Precision::kFp8 && run.training.fp8_recipe == Fp8Recipe::kRowwise &&
          cluster.compute.gemm_fp8_rowwise_max_efficiency <= 0)
        run.refused = fmt::format(
            "rowwise-scaled FP8 GEMMs (torchao float8 rowwise): {} has no measured rowwise "
            "GEMM figure (bench/gpu/fp8_gemm.py)",
            run.cluster);
      else
        simulate_run(run, cluster);
    }
    runs.push_back(std::move(run));
  }
  // A row that names no recompute (null) is simulated without one. But every row ran, so it fit: where
  // Loom's memory for it exceeds the GPU by more than Loom's largest memory error on the rows that
  // publish their peak, the run must have recomputed, and the row takes the fastest recompute that fits.
  // Within that error, the memory model cannot tell, and the row stays without.
  double memory_tolerance = 0;
  for (const PublicRun& run : runs)
    if (run.memory_scored()) memory_tolerance = std::max(memory_tolerance, std::abs(run.memory_error()));
  for (PublicRun& run : runs) {
    if (!run.simulated() || run.recompute_published) continue;
    const ClusterSpec& cluster = clusters.at(run.cluster);
    if (run.predicted_peak_gib <= cluster.gpu_memory_gib() * (1 + memory_tolerance)) continue;
    if (!run.micro_batch_note.empty()) run.config.micro_batch = 0;  // chosen again, with the recompute
    simulate_run(run, cluster, true);
  }
  return runs;
}

std::vector<PublicRunsSummary> summarize(const std::vector<PublicRun>& runs) {
  std::vector<PublicRunsSummary> out;
  auto add = [](PublicRunsSummary& s, const PublicRun& r) {
    ++s.rows;
    if (r.simulated()) ++s.simulated;
    if (!r.scored()) return;
    ++s.scored;
    s.mean_abs_error += std::abs(r.error());
    s.mean_error += r.error();
    s.max_abs_error = std::max(s.max_abs_error, std::abs(r.error()));
  };
  PublicRunsSummary all;
  for (const PublicRun& r : runs) {
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& s) { return s.source == r.source; });
    if (it == out.end()) {
      out.push_back({.source = r.source});
      it = out.end() - 1;
    }
    add(*it, r);
    add(all, r);
  }
  out.push_back(all);
  for (auto& s : out) {
    if (s.scored == 0) continue;
    s.mean_abs_error /= s.scored;
    s.mean_error /= s.scored;
  }
  return out;
}

}  // namespace loom
