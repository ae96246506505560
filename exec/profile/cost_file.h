// The measured half of a loom-cost/1 file, as `loom profile` assembles it on rank 0: the device
// (on a CPU the fastest GEMM as its peak and STREAM bandwidth; on a GPU its preset's datasheet figures),
// the GEMM, memory-bound-op and collective
// tables tagged with how many ranks ran at once, and the raw measurements. Fitting the cost
// model's parameters to these tables is the planner's (planner/calibrate.h: fit_measured_tables).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/cluster_spec.h"
#include "core/json_io.h"
#include "core/model_spec.h"
#include "exec/profile/collective_profile.h"
#include "exec/profile/kernel_profile.h"

namespace loom::exec::profile {

// Kernel timings taken by one set of ranks at once.
struct KernelResults {
  std::vector<GemmTiming> gemms;
  std::vector<MemoryOpTiming> memory_ops;
  double stream_bytes_per_s = 0;
  double optimizer_s = 0;
  std::int64_t optimizer_params = 0;
  std::vector<FlashTiming> flash;  // the fused attention, per model and micro-batch
};

// The softmax of unfused attention, as its own points: the whole attention core minus its
// per-head matmuls (which `k` timed as GEMMs). `activation_bytes`: the dtype's size the cores were
// timed in (time_memory_ops charges the backend's compute dtype).
void add_softmax_points(KernelResults& k, const ModelSpec& model, double activation_bytes);

struct MeasuredMachine {
  const KernelResults* kernels = nullptr;  // every rank at once
  const KernelResults* alone = nullptr;    // rank 0 with the others idle; null for one rank
  const std::vector<CollectiveTiming>* collectives = nullptr;
  int ranks = 1;        // launched
  int local_ranks = 1;  // on this host
  int threads_per_rank = 1;
  double optimizer_bytes_per_param = 0;  // as the simulator charges the executor's optimizer step
  // The memory-bound ops the cost model charges by name (each layer's, the embedding's and the loss's): only
  // these go into the table.
  std::vector<std::string> named_ops{};
  // On a GPU of a cluster preset's kind (exec/device_peak.h: "dgx-h100", ...): the file starts from that
  // preset, keeps its datasheet device figures (peak, bandwidth), node, links and collectives (one GPU
  // measures none of them), and takes its compute figures from these measurements. Empty: a CPU's file, every figure
  // measured.
  std::string gpu_preset{};
  std::string gpu_name{};       // as CUDA names the device
  double gpu_memory_bytes = 0;  // as CUDA reports it
  // Burst over sustained GEMM rate (time_sustained_gemm) where above 1: the GEMM table's short-burst
  // timings are lengthened by it, to the rate a training step sustains.
  double sustained_slowdown = 1;
};

// Name, device and tables of the cost file (schema defaults from the local-cpu preset elsewhere);
// the fitted parameters are left for fit_measured_tables, except the fused attention's ceiling and
// half-saturation point, fitted here to the flash timings (fit_flash_attention).
ClusterSpec measured_cost_file(const MeasuredMachine& machine);

// The fused attention's efficiency curve from its timings: each point's forward + backward FLOPs
// w = 3.5·forward_flops over (seconds × slowdown × peak) is an efficiency e = E·w / (w + H)
// (sim::CostModel::flash_efficiency), so 1/e = 1/E + (H/E)·(1/w): a least-squares line through
// (1/w, 1/e). A fit that leaves E above 1 or H below 0 (timings that do not saturate, or noise) keeps the
// best point's efficiency with H = 0. Returns a line for the provenance; "" without points.
std::string fit_flash_attention(ComputeEfficiency& compute, const std::vector<FlashTiming>& points, double peak_flops,
                                double slowdown);

// Every kernel timing as measured (the file's "measurements"), for plots and re-fits.
Json measurements_json(const KernelResults& k, double optimizer_bytes_per_param);

}  // namespace loom::exec::profile
