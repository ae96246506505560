#include "planner/calibrate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include <fmt/format.h>

#include "core/json_io.h"
#include "core/parallel_for.h"
#include "core/stats.h"
#include "sim/simulator.h"

namespace loom {

namespace {

// One cell as a finite number; the whole cell must be the number (std::stod alone takes "12abc").
Result<double> csv_number(const std::string& cell, const std::string& where) {
  std::size_t used = 0;
  double x = 0;
  try {
    x = std::stod(cell, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  while (used < cell.size() && (cell[used] == ' ' || cell[used] == '\r')) ++used;
  if (used == 0 || used != cell.size() || !std::isfinite(x))
    return make_error(fmt::format("{}: '{}' is not a number", where, cell));
  return x;
}

// The vTrain columns 0–9 are whole numbers; the limits are the model and cluster readers' own.
struct VtrainColumn {
  const char* name;
  double max;
};
constexpr VtrainColumn kVtrainColumns[10] = {{"GPUs", 1 << 24},
                                             {"global batch", 1LL << 40},
                                             {"micro batch", 1 << 24},
                                             {"hidden size", 1 << 20},
                                             {"attention heads", 1 << 20},
                                             {"layers", 4096},
                                             {"sequence length", 1 << 24},
                                             {"tensor parallelism", 1 << 20},
                                             {"data parallelism", 1 << 24},
                                             {"pipeline parallelism", 1 << 20}};

Result<MeasuredRun> vtrain_run(const std::vector<double>& v, const std::string& where) {
  for (int i = 0; i < 10; ++i)
    if (v[i] < 1 || v[i] > kVtrainColumns[i].max || std::floor(v[i]) != v[i])
      return make_error(fmt::format("{}: {} {} is not a whole number in [1, {}]", where, kVtrainColumns[i].name, v[i],
                                    kVtrainColumns[i].max));
  if (!(v[10] > 0)) return make_error(fmt::format("{}: iteration time {} ms is not positive", where, v[10]));
  MeasuredRun r;
  r.model.name = fmt::format("gpt-h{}-l{}", v[3], v[5]);
  r.model.hidden = static_cast<int>(v[3]);
  r.model.heads = static_cast<int>(v[4]);
  r.model.kv_heads = r.model.heads;
  r.model.layers = static_cast<int>(v[5]);
  r.model.ffn_hidden = 4 * r.model.hidden;
  r.model.seq_len = static_cast<int>(v[6]);
  r.model.vocab = 50257;  // GPT-2 tokenizer, padded per TP rank as Megatron does
  r.training.gpus = static_cast<int>(v[0]);
  r.training.global_batch = static_cast<long long>(v[1]);
  r.training.seq_len = r.model.seq_len;
  r.training.grad_bytes = 4;  // fp32 gradient accumulation
  r.training.attention = AttentionKernel::kUnfused;
  r.training.overlap_grad_reduce = false;
  r.training.pipeline_sends_block = true;          // Megatron-DeepSpeed's synchronous p2p
  r.training.loss_kernel = LossKernel::kMegatron;  // Megatron-LM's cross-entropy (core/framework.cc, deepspeed)
  r.training.embedding_grad_dense = true;          // Megatron-LM's embedding, dense gradient (same)
  r.training.softmax_bwd_applies_dropout = false;  // torch's dropout after the fused softmax (published.cc)
  r.config.micro_batch = static_cast<int>(v[2]);
  r.config.tp = static_cast<int>(v[7]);
  r.config.dp = static_cast<int>(v[8]);
  r.config.pp = static_cast<int>(v[9]);
  r.config.recompute = Recompute::kFull;
  r.config.schedule = Schedule::k1F1B;
  r.measured_s = v[10] / 1000.0;
  if (r.model.hidden % r.model.heads != 0)
    return make_error(fmt::format("{}: hidden size {} is not divisible by {} heads", where, v[3], v[4]));
  if (v[7] * v[8] * v[9] != v[0])
    return make_error(fmt::format("{}: tp·dp·pp = {} but the run has {} GPUs", where, v[7] * v[8] * v[9], v[0]));
  if (Status size = check_model_size(r.model, where); !size) return size.error();
  return r;
}

}  // namespace

Result<std::vector<MeasuredRun>> read_vtrain_csv(const std::string& path) {
  // Read whole and bounded: a line that never ends (`--vtrain /dev/zero`) is refused, not read on.
  auto text = read_text_file(path);
  if (!text) return text.error();
  std::istringstream in(*text);
  std::vector<MeasuredRun> runs;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const std::string where = fmt::format("{}:{}", path, line_no);
    std::vector<double> v;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) {
      auto x = csv_number(cell, where);
      if (!x) return x.error();
      v.push_back(*x);
    }
    if (v.size() != 11) return make_error(fmt::format("{}: expected 11 columns, found {}", where, v.size()));
    auto run = vtrain_run(v, where);
    if (!run) return run.error();
    runs.push_back(std::move(*run));
  }
  if (runs.empty()) return make_error(fmt::format("{}: no measurements", path));
  return runs;
}

FitQuality evaluate_fit(const std::vector<MeasuredRun>& runs, const ClusterSpec& cluster, int threads,
                        std::vector<double>* predicted_s) {
  std::vector<double> log_error(runs.size(), 0.0);
  if (predicted_s) predicted_s->assign(runs.size(), 0.0);
  std::vector<char> valid(runs.size(), 0);
  const sim::CollectiveModel collectives(cluster);
  parallel_for(runs.size(), threads, [&](std::size_t i) {
    auto sim = sim::simulate(runs[i].model, runs[i].training, runs[i].config, cluster, collectives);
    if (!sim) return;
    log_error[i] = std::log(sim->step_time_s / runs[i].measured_s);
    if (predicted_s) (*predicted_s)[i] = sim->step_time_s;
    valid[i] = 1;
  });
  FitQuality q;
  double sum_sq = 0, sum_abs = 0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (!valid[i]) continue;
    const double rel = std::abs(std::exp(log_error[i]) - 1.0);
    sum_sq += log_error[i] * log_error[i];
    sum_abs += rel;
    q.max_abs_error = std::max(q.max_abs_error, rel);
    ++q.runs;
  }
  if (q.runs > 0) {
    q.rms_log_error = std::sqrt(sum_sq / q.runs);
    q.mean_abs_error = sum_abs / q.runs;
  }
  return q;
}

Result<ComputeFit> fit_compute_efficiency(const std::vector<MeasuredRun>& runs, const ClusterSpec& base, int threads,
                                          bool fit_ceiling) {
  ComputeFit best;
  best.quality.rms_log_error = 1e30;
  double eff_lo = fit_ceiling ? 0.2 : base.compute.gemm_max_efficiency;
  double eff_hi = fit_ceiling ? 1.0 : base.compute.gemm_max_efficiency;
  double log_half_lo = std::log(1e6), log_half_hi = std::log(1e13);
  // Each round halves the grid step: after 8 rounds the ceiling is resolved to 0.0008 (0.1 %
  // of GEMM time), finer than the spread of the runs it is fitted to.
  constexpr int kSteps = 9;
  for (int round = 0; round < 8; ++round) {
    for (int i = 0; i < (fit_ceiling ? kSteps : 1); ++i) {
      for (int j = 0; j < kSteps; ++j) {
        ClusterSpec c = base;
        c.compute.gemm_max_efficiency = eff_lo + (eff_hi - eff_lo) * i / (kSteps - 1);
        c.compute.gemm_half_saturation_flops = std::exp(log_half_lo + (log_half_hi - log_half_lo) * j / (kSteps - 1));
        const FitQuality q = evaluate_fit(runs, c, threads);
        if (q.runs == runs.size() && q.rms_log_error < best.quality.rms_log_error) {
          best.gemm_max_efficiency = c.compute.gemm_max_efficiency;
          best.gemm_half_saturation_flops = c.compute.gemm_half_saturation_flops;
          best.quality = q;
        }
      }
    }
    // Zoom in around the best point: two grid cells each way.
    const double eff_step = (eff_hi - eff_lo) / (kSteps - 1);
    const double half_step = (log_half_hi - log_half_lo) / (kSteps - 1);
    if (fit_ceiling) {
      eff_lo = std::max(0.05, best.gemm_max_efficiency - 2 * eff_step);
      eff_hi = std::min(1.0, best.gemm_max_efficiency + 2 * eff_step);
    }
    const double center = std::log(std::max(1.0, best.gemm_half_saturation_flops));
    log_half_lo = center - 2 * half_step;
    log_half_hi = center + 2 * half_step;
  }
  if (best.quality.runs == 0) return make_error("calibration: no run could be simulated");
  return best;
}

LineFit fit_relative_line(const std::vector<std::pair<double, double>>& x_seconds) {
  // Minimise Σ((a + b·x − t)/t)²: the 2×2 normal equations of rows [1/t, x/t] against 1.
  double s00 = 0, s01 = 0, s11 = 0, r0 = 0, r1 = 0;
  for (const auto& [x, t] : x_seconds) {
    const double u = 1.0 / t, v = x / t;
    s00 += u * u, s01 += u * v, s11 += v * v, r0 += u, r1 += v;
  }
  LineFit fit;
  const double det = s00 * s11 - s01 * s01;
  if (x_seconds.size() < 2 || std::abs(det) < 1e-300) return fit;
  fit.intercept = (r0 * s11 - r1 * s01) / det;
  fit.slope = (s00 * r1 - s01 * r0) / det;
  std::vector<double> measured, fitted;
  for (const auto& [x, t] : x_seconds) {
    measured.push_back(t);
    fitted.push_back(fit.intercept + fit.slope * x);
  }
  fit.r2 = r_squared(measured, fitted);
  return fit;
}

MemoryBoundFit fit_memory_bound(const std::vector<MemoryOpPoint>& points, double bandwidth_bytes_per_s) {
  MemoryBoundFit fit;
  double weighted_bytes = 0, weighted_seconds = 0;
  for (const auto& p : points) {
    weighted_bytes += p.weight * p.bytes;
    weighted_seconds += p.weight * p.seconds;
  }
  if (weighted_seconds <= 0 || bandwidth_bytes_per_s <= 0) return fit;
  // CPU "kernels" are function calls: no launch latency to fit (OpenMP start-up is inside the op times).
  fit.kernel_launch_s = 0;
  fit.memory_bound_efficiency = weighted_bytes / (bandwidth_bytes_per_s * weighted_seconds);
  std::vector<double> measured, fitted;
  for (const auto& p : points) {
    measured.push_back(p.seconds);
    fitted.push_back(p.bytes / (bandwidth_bytes_per_s * fit.memory_bound_efficiency));
  }
  fit.r2 = r_squared(measured, fitted);
  return fit;
}

GemmCurveFit fit_gemm_curve(const std::vector<GemmPoint>& table, double peak_flops) {
  // 1/rate = A + B/w with A = 1/(peak·e_max) and B = H·A; fitted on relative residuals of 1/rate.
  std::vector<std::pair<double, double>> points;
  for (const auto& p : table) {
    const double w = 2.0 * p.m * p.n * p.k;
    points.emplace_back(1.0 / w, p.seconds / w);
  }
  const LineFit line = fit_relative_line(points);
  GemmCurveFit fit;
  if (line.intercept <= 0) return fit;
  fit.gemm_max_efficiency = 1.0 / (line.intercept * peak_flops);
  fit.gemm_half_saturation_flops = std::max(0.0, line.slope / line.intercept);
  return fit;
}

namespace {

// Predicted passes of a traced run, in the order rows are compared: forward and backward of every
// traced chunk, then the optimizer.
std::vector<double> predicted_passes(const TraceRun& r, const ClusterSpec& cluster) {
  const sim::CollectiveModel collectives(cluster);
  sim::CostModel cost(r.model, r.training, r.config, cluster, collectives);
  cost.set_record_segments(false);
  std::vector<double> out;
  for (const auto& [chunk, seconds] : r.measured.forward_s) {
    const sim::ChunkCost c = cost.chunk(r.stage, chunk, false);
    out.push_back(c.forward.seconds);
    if (r.measured.backward_s.count(chunk)) out.push_back(c.backward.seconds);
  }
  // ZeRO ≥ 1 steps only the rank's 1/dp shard of the optimizer states.
  const double shard = r.config.zero >= 1 ? 1.0 / r.config.dp : 1.0;
  if (r.measured.optimizer_s > 0) out.push_back(cost.optimizer_s(cost.stage_params(r.stage) * shard));
  return out;
}

std::vector<std::string> pass_names(const TraceRun& r) {
  std::vector<std::string> out;
  for (const auto& [chunk, seconds] : r.measured.forward_s) {
    out.push_back(fmt::format("F{}", chunk));
    if (r.measured.backward_s.count(chunk)) out.push_back(fmt::format("B{}", chunk));
  }
  if (r.measured.optimizer_s > 0) out.push_back("optimizer");
  return out;
}

std::vector<double> measured_passes(const TraceRun& r) {
  std::vector<double> out;
  for (const auto& [chunk, seconds] : r.measured.forward_s) {
    out.push_back(seconds);
    if (r.measured.backward_s.count(chunk)) out.push_back(r.measured.backward_s.at(chunk));
  }
  if (r.measured.optimizer_s > 0) out.push_back(r.measured.optimizer_s);
  return out;
}

double mean_abs_error(const std::vector<TraceRun>& runs, const ClusterSpec& cluster) {
  double sum = 0;
  std::size_t n = 0;
  for (const auto& r : runs) {
    const auto p = predicted_passes(r, cluster), m = measured_passes(r);
    for (std::size_t i = 0; i < p.size(); ++i, ++n) sum += std::abs(p[i] / m[i] - 1.0);
  }
  return n ? sum / static_cast<double>(n) : 0.0;
}

}  // namespace

Result<CostCorrection> fit_trace_corrections(const std::vector<TraceRun>& runs, const ClusterSpec& cluster) {
  if (runs.empty()) return make_error("calibrate: no traced runs");
  if (cluster.gemm_table.empty() || cluster.compute.memory_bound_efficiency <= 0)
    return make_error(
        fmt::format("calibrate: cost file '{}' has no measured GEMM table (run `loom profile` first)", cluster.name));
  // The two directions the correction moves along, taken from the cost model itself: every GEMM
  // twice as slow, and memory-bound ops at half the efficiency.
  ClusterSpec slow_gemm = cluster, slow_memory = cluster;
  for (auto& p : slow_gemm.gemm_table) p.seconds *= 2.0;
  slow_memory.compute.memory_bound_efficiency *= 0.5;
  for (auto& [op, efficiency] : slow_memory.compute.memory_op_efficiency) efficiency *= 0.5;
  for (auto& op : slow_memory.memory_op_table) op.seconds *= 2.0;
  // One fit per concurrency of the timings the runs read.
  std::map<int, std::vector<const TraceRun*>> by_ranks;
  for (const auto& r : runs) by_ranks[sim::table_concurrency(cluster, r.config.world_size())].push_back(&r);
  CostCorrection c;
  for (const auto& [ranks, group] : by_ranks) {
    // Rows: (G_i, M_i) · (a, b) = measured_i − P₀_i, each divided by measured_i.
    double s00 = 0, s01 = 0, s11 = 0, r0 = 0, r1 = 0;
    std::size_t rows = 0;
    for (const TraceRun* r : group) {
      const auto p0 = predicted_passes(*r, cluster), pg = predicted_passes(*r, slow_gemm),
                 pm = predicted_passes(*r, slow_memory), m = measured_passes(*r);
      for (std::size_t i = 0; i < m.size(); ++i, ++rows) {
        const double g = (pg[i] - p0[i]) / m[i], mem = (pm[i] - p0[i]) / m[i], y = (m[i] - p0[i]) / m[i];
        s00 += g * g, s01 += g * mem, s11 += mem * mem, r0 += g * y, r1 += mem * y;
      }
    }
    const double det = s00 * s11 - s01 * s01;
    const std::string which = ranks > 0 ? fmt::format(" of the runs with {} rank(s) per node", ranks) : "";
    if (rows < 2 || std::abs(det) < 1e-18)
      return make_error(fmt::format("calibrate: the traces{} do not separate GEMM from memory-bound time", which));
    const double a = (r0 * s11 - r1 * s01) / det, b = (s00 * r1 - s01 * r0) / det;
    CostCorrection::Group g;
    g.ranks = ranks;
    g.gemm_scale = 1.0 + a;
    // b = e₀/e − 1 (halving e adds M): e = e₀ / (1 + b).
    g.memory_bound_efficiency = cluster.compute.memory_bound_efficiency / (1.0 + b);
    g.passes = rows;
    if (g.gemm_scale <= 0 || g.memory_bound_efficiency <= 0)
      return make_error(fmt::format("calibrate: the fit{} is unphysical (GEMM ×{:.3f}, memory efficiency {:.3f})",
                                    which, g.gemm_scale, g.memory_bound_efficiency));
    c.groups.push_back(g);
    c.passes += rows;
  }
  const auto primary = std::max_element(c.groups.begin(), c.groups.end(),
                                        [](const auto& x, const auto& y) { return x.passes < y.passes; });
  c.gemm_scale = primary->gemm_scale;
  c.memory_bound_efficiency = primary->memory_bound_efficiency;
  c.mean_abs_error_before = mean_abs_error(runs, cluster);
  const ClusterSpec corrected = apply_correction(cluster, c);
  c.mean_abs_error_after = mean_abs_error(runs, corrected);
  for (std::size_t k = 0; k < runs.size(); ++k) {
    const TraceRun& r = runs[k];
    const auto names = pass_names(r);
    const auto m = measured_passes(r), before = predicted_passes(r, cluster), after = predicted_passes(r, corrected);
    for (std::size_t i = 0; i < m.size(); ++i)
      c.rows.push_back({fmt::format("stage {} {}", r.stage, names[i]), m[i], before[i], after[i], k});
  }
  return c;
}

ClusterSpec apply_correction(const ClusterSpec& cluster, const CostCorrection& correction) {
  // The group that corrects timings of `ranks` concurrency: its own, else the nearest (the
  // primary one for untagged timings, which every plan reads).
  auto group_for = [&](int ranks) -> CostCorrection::Group {
    CostCorrection::Group primary{0, correction.gemm_scale, correction.memory_bound_efficiency, 0};
    if (ranks <= 0 || correction.groups.empty()) return primary;
    const CostCorrection::Group* best = nullptr;
    for (const auto& g : correction.groups)
      if (!best || std::abs(g.ranks - ranks) < std::abs(best->ranks - ranks)) best = &g;
    return *best;
  };
  ClusterSpec c = cluster;
  for (auto& p : c.gemm_table) p.seconds *= group_for(p.ranks).gemm_scale;
  // Measured memory-bound ops move with the efficiency: time ∝ 1 / efficiency.
  for (auto& op : c.memory_op_table)
    op.seconds *= cluster.compute.memory_bound_efficiency / group_for(op.ranks).memory_bound_efficiency;
  // Ops with their own efficiency move by the same factor as the plain ones.
  for (auto& [op, efficiency] : c.compute.memory_op_efficiency)
    efficiency =
        std::min(1.0, efficiency * correction.memory_bound_efficiency / cluster.compute.memory_bound_efficiency);
  // A fraction of the stated bandwidth: a fit above 1 (a run whose small working sets stayed in
  // cache, against a profile taken while the host was busy) still moves the measured ops by all
  // of it, but the file states at most the full bandwidth, as a cost file must.
  c.compute.memory_bound_efficiency = std::min(1.0, correction.memory_bound_efficiency);
  c.provenance["calibration_gemm_scale"] = fmt::format("{:.4f}", correction.gemm_scale);
  c.provenance["calibration_memory_bound_efficiency"] = fmt::format("{:.4f}", correction.memory_bound_efficiency);
  for (const auto& g : correction.groups) {
    if (g.ranks <= 0 || correction.groups.size() < 2) continue;
    c.provenance[fmt::format("calibration_gemm_scale_ranks{}", g.ranks)] = fmt::format("{:.4f}", g.gemm_scale);
    c.provenance[fmt::format("calibration_memory_bound_efficiency_ranks{}", g.ranks)] =
        fmt::format("{:.4f}", g.memory_bound_efficiency);
  }
  return c;
}

}  // namespace loom
