// The executor's traces as calibration input: each `loom run --trace` file read into the median
// duration of its passes, paired with the run it traced (from the trace's own description, or the
// flags' fallback), and repeated traces of one run reduced to the fastest.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>

#include <fmt/format.h>

#include "core/presets.h"
#include "core/stats.h"
#include "planner/calibrate.h"
#include "planner/search_space.h"

namespace loom {

Result<TracePassTimes> read_executor_trace(const std::string& path) {
  auto json = read_json_file(path);
  if (!json) return json.error();
  return read_executor_trace(*json, path);
}

Result<TracePassTimes> read_executor_trace(const Json& trace, const std::string& path) {
  const Json* json = &trace;
  if (!json->contains("traceEvents") || !(*json)["traceEvents"].is_array())
    return make_error(fmt::format("{}: not a Chrome trace (no traceEvents array)", path));
  std::map<int, std::vector<double>> forward, backward;
  std::vector<double> optimizer;
  TracePassTimes t;
  for (const auto& e : (*json)["traceEvents"]) {
    // Events Loom does not read (metadata, counters, other tools' slices) may have any shape.
    if (!e.is_object() || !e.contains("ph") || e["ph"] != "X" || !e.contains("dur") || !e.contains("name") ||
        !e["name"].is_string())
      continue;
    const std::string name = e["name"].get<std::string>();
    int chunk = 0;
    long long mb = 0;
    std::map<int, std::vector<double>>* passes = nullptr;
    if (std::sscanf(name.c_str(), "F%d mb%lld", &chunk, &mb) == 2)
      passes = &forward;
    else if (std::sscanf(name.c_str(), "B%d mb%lld", &chunk, &mb) == 2)
      passes = &backward;
    else if (name != "optimizer")
      continue;
    const Json& dur = e["dur"];
    if (!dur.is_number() || !std::isfinite(dur.get<double>()) || dur.get<double>() < 0)
      return make_error(fmt::format("{}: slice '{}' has a 'dur' that is not a duration in microseconds", path, name));
    const double seconds = dur.get<double>() * 1e-6;  // Chrome traces count microseconds
    (passes ? (*passes)[chunk] : optimizer).push_back(seconds);
    ++t.slices;
  }
  if (forward.empty()) return make_error(fmt::format("{}: no forward slices ('F<chunk> mb<i>')", path));
  for (auto& [chunk, v] : forward) t.forward_s[chunk] = median(v);
  for (auto& [chunk, v] : backward) t.backward_s[chunk] = median(v);
  t.optimizer_s = median(optimizer);
  return t;
}

namespace {

// Rank of a per-rank trace file ("trace.rank3.json"); a single-rank run writes no suffix.
// strtoll saturates: a rank too long for an int reads as one no layout has.
long long trace_rank(const std::string& path) {
  std::smatch m;
  static const std::regex rank_suffix(R"(\.rank([0-9]+)(\.[^./]*)?$)");
  return std::regex_search(path, m, rank_suffix) ? std::strtoll(m[1].str().c_str(), nullptr, 10) : 0;
}

// A whole number in [min, max] under `key` of the run description; absent: `fallback`.
Result<double> whole_number(const Json& run, const char* key, double fallback, double min, double max,
                            const std::string& path) {
  if (!run.contains(key)) return fallback;
  const Json& v = run[key];
  if (!v.is_number() || std::floor(v.get<double>()) != v.get<double>() || v.get<double>() < min ||
      v.get<double>() > max)
    return make_error(
        fmt::format("{}: run description: '{}' = {} is not a whole number in [{}, {}]", path, key, v.dump(), min, max));
  return v.get<double>();
}

// The run as the trace describes it (`loom run --trace` keeps model, layout and batch in
// "otherData"); nothing when it does not.
Result<std::optional<TraceRun>> described_run(const Json& trace, const std::string& path) {
  if (!trace.contains("otherData") || !trace["otherData"].contains("loom_run")) return std::optional<TraceRun>{};
  const Json& run = trace["otherData"]["loom_run"];
  if (!run.is_object()) return make_error(path + ": run description: 'otherData.loom_run' must be an object");
  auto model = model_from_json(run.value("model", Json::object()));
  if (!model) return prefix_error(path + ": run description: ", model.error());
  auto config = config_from_json(run.value("config", Json::object()));
  if (!config) return prefix_error(path + ": run description: ", config.error());
  TraceRun r;
  r.model = *model;
  r.config = *config;
  // Absent: one micro-batch per DP rank, and the model's context.
  auto global_batch = whole_number(run, "global_batch", static_cast<double>(r.config.dp) * r.config.micro_batch, 1.0,
                                   1099511627776.0 /* 2^40, the plan reader's limit */, path);
  if (!global_batch) return global_batch.error();
  auto seq_len = whole_number(run, "seq_len", 0, 0, 1 << 24, path);
  if (!seq_len) return seq_len.error();
  r.training.global_batch = static_cast<long long>(*global_batch);
  r.training.seq_len = *seq_len > 0 ? static_cast<int>(*seq_len) : r.model.seq_len;
  return std::optional<TraceRun>(std::move(r));
}

Result<TraceRun> fallback_run(const TraceFallback& f) {
  TraceRun r;
  auto model = load_model(f.model);
  if (!model) return model.error();
  r.model = *model;
  auto config = parse_parallel_config(f.config, f.gpus);
  if (!config) return config.error();
  r.config = *config;
  r.training.global_batch =
      f.global_batch > 0 ? f.global_batch : static_cast<long long>(r.config.dp) * r.config.micro_batch;
  r.training.seq_len = r.model.seq_len;
  return r;
}

Result<TraceRun> read_trace_run(const std::string& path, const TraceFallback& fallback) {
  auto trace = read_json_file(path);
  if (!trace) return trace.error();
  auto times = read_executor_trace(*trace, path);
  if (!times) return times.error();
  auto described = described_run(*trace, path);
  if (!described) return described.error();
  auto run = *described ? Result<TraceRun>(**described) : fallback_run(fallback);
  if (!run) return run;
  TraceRun& r = *run;
  // The executor's precision: fp32 weights, gradients, activations; Adam m and v; unfused attention.
  r.training.gpus = r.config.world_size();
  use_fp32_precision(r.training);
  r.training.attention = AttentionKernel::kUnfused;
  const long long rank = trace_rank(path);
  if (rank >= r.config.world_size())
    return make_error(fmt::format("{}: rank {} is outside the layout's {} ranks", path, rank, r.config.world_size()));
  r.rank = static_cast<int>(rank);
  r.stage = rank_coords(r.config, r.rank).pp_rank;
  // The executor names a pass by its virtual stage (exec/parallel/pipeline.cc), below pp·vpp.
  const int chunks = r.config.pp * r.config.vpp;
  for (const auto* passes : {&times->forward_s, &times->backward_s})
    for (const auto& [chunk, seconds] : *passes)
      if (chunk < 0 || chunk >= chunks)
        return make_error(fmt::format("{}: pass of chunk {} but the layout {} has {} chunks", path, chunk,
                                      describe(r.config), chunks));
  r.measured = *times;
  r.label = std::filesystem::path(path).filename().string();
  return run;
}

double total_traced_s(const TraceRun& r) {
  double t = r.measured.optimizer_s;
  for (const auto& [chunk, s] : r.measured.forward_s) t += s;
  for (const auto& [chunk, s] : r.measured.backward_s) t += s;
  return t;
}

}  // namespace

Result<std::vector<TraceRun>> read_trace_runs(const std::vector<std::string>& paths, const TraceFallback& fallback) {
  std::vector<TraceRun> runs;
  for (const std::string& path : paths) {
    auto run = read_trace_run(path, fallback);
    if (!run) return run.error();
    runs.push_back(std::move(*run));
  }
  return runs;
}

std::vector<TraceRun> keep_fastest_repeats(const std::vector<TraceRun>& runs) {
  std::map<std::string, std::size_t> fastest;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const std::string key = fmt::format("{} {} {} {} rank {}", to_json(runs[i].model).dump(), describe(runs[i].config),
                                        runs[i].training.global_batch, runs[i].training.seq_len, runs[i].rank);
    auto [it, fresh] = fastest.emplace(key, i);
    if (!fresh && total_traced_s(runs[i]) < total_traced_s(runs[it->second])) it->second = i;
  }
  std::vector<TraceRun> kept;
  for (std::size_t i = 0; i < runs.size(); ++i)
    for (const auto& [key, index] : fastest)
      if (index == i) kept.push_back(runs[i]);
  return kept;
}

}  // namespace loom
