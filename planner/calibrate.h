// Calibration of a cost file's compute-efficiency curve against measured step times: the GEMM
// efficiency ceiling and half-saturation size that minimise the squared log error of the
// simulator over a set of measured runs. Fed by published measurements (vTrain's 1,440 Megatron
// runs on A100) or by `loom run` measurements on this machine.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/cluster_spec.h"
#include "core/json_io.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/result.h"
#include "core/training_spec.h"
#include "planner/search_space.h"

namespace loom {

struct MeasuredRun {
  ModelSpec model;
  TrainingSpec training;
  ParallelConfig config;
  double measured_s = 0;
};

// vtrain_single_node.csv: GPT models on 2–8 A100 in one node, Megatron-DeepSpeed with activation
// checkpointing, 1F1B, no gradient bucketing (the authors' statement of their setup).
Result<std::vector<MeasuredRun>> read_vtrain_csv(const std::string& path);

struct FitQuality {
  double mean_abs_error = 0;  // mean |predicted − measured| / measured
  double max_abs_error = 0;
  double rms_log_error = 0;
  std::size_t runs = 0;
};

// `predicted_s`, when given, receives each run's simulated step time (0 where it cannot run).
FitQuality evaluate_fit(const std::vector<MeasuredRun>& runs, const ClusterSpec& cluster, int threads = 0,
                        std::vector<double>* predicted_s = nullptr);

struct ComputeFit {
  double gemm_max_efficiency = 0;
  double gemm_half_saturation_flops = 0;
  FitQuality quality;
};

// Coarse-to-fine grid search minimising the rms log error: over the half-saturation size (log
// space) with the cost file's ceiling kept, or over both when `fit_ceiling`. Runs of small models
// constrain the ceiling poorly — their GEMMs sit on the rising part of the curve, where a higher
// ceiling with a larger half-saturation size fits as well (vTrain: 0.859/2.37e10 and 0.904/2.65e10
// within 0.2 % mean error) — so by default the ceiling stays the hardware figure the file cites.
Result<ComputeFit> fit_compute_efficiency(const std::vector<MeasuredRun>& runs, const ClusterSpec& cluster,
                                          int threads = 0, bool fit_ceiling = false);

// seconds ≈ intercept + slope·x by least squares on relative residuals (small points count as
// much as large ones); r2 of the fitted seconds against the measured ones.
struct LineFit {
  double intercept = 0, slope = 0, r2 = 0;
};
LineFit fit_relative_line(const std::vector<std::pair<double, double>>& x_seconds);

// Memory-bound kernels measured as (bytes the cost model charges, seconds, times the op runs per
// layer): the cost model's memory_s = kernel_launch_s + bytes / (bandwidth · memory_bound_efficiency)
// has one efficiency for every op, so it is chosen to make the weighted total time right (what a
// step adds up); r2 says how well that one figure describes the ops one by one.
struct MemoryOpPoint {
  double bytes = 0, seconds = 0, weight = 1;
};
struct MemoryBoundFit {
  double memory_bound_efficiency = 0;
  double kernel_launch_s = 0;
  double r2 = 0;
};
MemoryBoundFit fit_memory_bound(const std::vector<MemoryOpPoint>& points, double bandwidth_bytes_per_s);

// A measured GEMM table against the cost model's curve 1/rate = (1 + H/w) / (peak · e_max)
// (w = 2mnk FLOPs): linear in 1/w, so fitted as a line; for cost files whose table misses a shape.
struct GemmCurveFit {
  double gemm_max_efficiency = 0;
  double gemm_half_saturation_flops = 0;
};
GemmCurveFit fit_gemm_curve(const std::vector<GemmPoint>& table, double peak_flops);

// The memory-bound ops the cost model charges per transformer layer (forward and backward), with
// how often each runs: the ops `loom profile` keeps in a cost file, and their weights in its fit.
const std::map<std::string, double>& layer_memory_op_weights();

// A measured cost file's parameters fitted to its own tables (`loom profile`): the GEMM curve and
// the memory-bound efficiency from the timings with the most ranks at once (the device's bandwidth
// raised when the layer's ops beat STREAM), α–β lines per collective, level and group size, the
// links from the send/recv lines; the fits' R² go into the provenance.
void fit_measured_tables(ClusterSpec& cluster);

// One rank's Chrome trace from `loom run --trace` (slice names of core/trace_names.h): the median
// duration of its forward and backward passes per model chunk, and of its optimizer step, over
// every step and micro-batch in the trace (the median drops the first, warming-up step).
struct TracePassTimes {
  std::map<int, double> forward_s, backward_s;  // by chunk
  double optimizer_s = 0;
  std::size_t slices = 0;
};
Result<TracePassTimes> read_executor_trace(const std::string& path);
// The same from a trace already read (`path` names it in errors).
Result<TracePassTimes> read_executor_trace(const Json& trace, const std::string& path);

struct TraceRun {
  ModelSpec model;
  TrainingSpec training;
  ParallelConfig config;
  int stage = 0;  // pipeline stage of the traced rank
  TracePassTimes measured;
  int rank = 0;       // the traced rank (from the file name's ".rankR")
  std::string label;  // the trace's file name
};

// The run of traces that do not describe it themselves (older traces): `loom calibrate`'s
// --model, --gpus, --global-batch and config flags.
struct TraceFallback {
  std::string model = "gpt-tiny";
  ConfigText config;
  int gpus = 1;
  long long global_batch = 0;  // 0: dp × micro-batch
};

// Every trace read and paired with its run, in the executor's precision (fp32, unfused attention).
Result<std::vector<TraceRun>> read_trace_runs(const std::vector<std::string>& paths, const TraceFallback& fallback);

// Several traces of one run (same model, layout, batch and rank), e.g. repeated minutes apart on a
// shared host: the fastest of each kept, in order — as the profile keeps its fastest timings and
// validate its fastest round; a slow spell would otherwise scale every corrected time.
std::vector<TraceRun> keep_fastest_repeats(const std::vector<TraceRun>& runs);

// The corrections a cost file can carry, fitted to traced passes by least squares on relative
// residuals: a factor on every GEMM-table time (the table was timed hot and alone; inside a layer
// operands come from DRAM) and the memory-bound efficiency. Each pass is linear in both:
// pass = P₀ + (gemm_scale − 1)·G + (e₀/e − 1)·M, with G and M from the cost model itself.
// Kernel timings taken with different numbers of ranks sharing a node (`ranks` tags) are
// corrected separately, each by the traced runs that read them: a single-rank run says nothing of
// how two ranks slow each other. Timings no traced run reads take the nearest concurrency's fit.
struct CostCorrection {
  struct Group {
    int ranks = 0;  // the concurrency of the timings it corrects (0: untagged, every timing)
    double gemm_scale = 1;
    double memory_bound_efficiency = 0;
    std::size_t passes = 0;
  };
  std::vector<Group> groups;  // by ranks, ascending
  // The group with the most traced passes: its efficiency becomes the file's fallback for ops
  // without measurements of their own, and its figures are the ones printed first.
  double gemm_scale = 1;
  double memory_bound_efficiency = 0;
  double mean_abs_error_before = 0, mean_abs_error_after = 0;  // over the traced passes
  std::size_t passes = 0;
  struct Pass {
    std::string name;  // "F0", "B0", "optimizer"
    double measured_s = 0, before_s = 0, after_s = 0;
    std::size_t run = 0;  // index of its traced run
  };
  std::vector<Pass> rows;
};
Result<CostCorrection> fit_trace_corrections(const std::vector<TraceRun>& runs, const ClusterSpec& cluster);
// `cluster` with the correction applied (GEMM table scaled, efficiency replaced, provenance noted).
ClusterSpec apply_correction(const ClusterSpec& cluster, const CostCorrection& correction);

}  // namespace loom
