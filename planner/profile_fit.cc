// The cost model's parameters fitted to the tables `loom profile` measured: the GEMM efficiency
// curve and the memory-bound efficiency from the timings every rank took at once, and α–β lines
// per collective, link level and group size (one per size regime).
#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "planner/calibrate.h"
#include "sim/collectives.h"

namespace loom {

const std::map<std::string, double>& layer_memory_op_weights() {
  // sim/cost_model.cc: two norms and two residual adds, one GELU, one softmax per pass; four linear
  // layers' biases per forward pass where the executor adds them in a pass of their own.
  static const std::map<std::string, double> weights = {{"norm", 2},         {"norm_bwd", 2},    {"residual", 2},
                                                        {"residual_bwd", 2}, {"gelu", 1},        {"gelu_bwd", 1},
                                                        {"softmax", 1},      {"softmax_bwd", 1}, {"bias", 4}};
  return weights;
}

namespace {

// The timings taken with the most ranks at once: what a plan filling the host runs at.
int most_ranks_together(const ClusterSpec& c) {
  int most = 0;
  for (const auto& g : c.gemm_table) most = std::max(most, g.ranks);
  return most;
}

void fit_kernels(ClusterSpec& c) {
  const int together = most_ranks_together(c);
  std::vector<GemmPoint> gemms;
  for (const auto& g : c.gemm_table)
    if (g.ranks == together) gemms.push_back(g);
  const GemmCurveFit curve = fit_gemm_curve(gemms, c.device.peak_flops);
  c.compute.gemm_max_efficiency = curve.gemm_max_efficiency;
  c.compute.gemm_half_saturation_flops = curve.gemm_half_saturation_flops;
  std::vector<MemoryOpPoint> mem;
  for (const auto& op : c.memory_op_table)
    if (op.ranks == together && layer_memory_op_weights().count(op.op))
      mem.push_back({op.bytes, op.seconds, layer_memory_op_weights().at(op.op)});
  const MemoryBoundFit mb = fit_memory_bound(mem, c.device.memory_bandwidth_bytes_per_s);
  c.compute.memory_bound_efficiency = mb.memory_bound_efficiency;
  if (mb.memory_bound_efficiency > 1.0) {
    // The layer's ops moved their bytes faster than the STREAM sweep (caches hold activations of
    // this size): the fastest traffic measured is this device's bandwidth, as the fastest GEMM is its peak.
    c.device.memory_bandwidth_bytes_per_s *= mb.memory_bound_efficiency;
    c.compute.memory_bound_efficiency = 1.0;
  }
  c.compute.kernel_launch_s = mb.kernel_launch_s;
  c.provenance["memory_bound_fit_r2"] = fmt::format("{:.4f}", mb.r2);
}

void fit_collectives(ClusterSpec& c) {
  std::map<std::tuple<std::string, std::string, int>, std::vector<std::pair<double, double>>> grouped;
  for (const auto& t : c.collective_points)
    grouped[{t.collective, t.level, t.group_size}].emplace_back(t.bytes, t.seconds);
  c.collective_fits.clear();
  for (const auto& [key, points] : grouped) {
    const auto& [name, level, n] = key;
    const sim::RegimeFit regimes = sim::fit_alpha_beta_regimes(collective_named(name), n, points);
    for (const auto& r : regimes.regimes)
      c.collective_fits.push_back(
          {name, level, n, r.ab.alpha_s, r.ab.bus_bandwidth_bytes_per_s, r.ab.r2, r.min_bytes, r.max_bytes});
    const sim::AlphaBeta one_line = sim::fit_alpha_beta(collective_named(name), n, points);
    c.provenance[fmt::format("alpha_beta_r2_{}_{}_{}", name, level, n)] = fmt::format("{:.5f}", regimes.r2);
    c.provenance[fmt::format("alpha_beta_r2_one_line_{}_{}_{}", name, level, n)] = fmt::format("{:.5f}", one_line.r2);
    if (collective_named(name) == Collective::kSendRecv) {
      // Pipeline sends without measured points fall back to the link figures: one line for all sizes.
      LinkSpec link{one_line.bus_bandwidth_bytes_per_s, one_line.alpha_s};
      (level == to_string(LinkLevel::kIntraNode) ? c.intra_node : c.inter_node) = link;
      if (level == to_string(LinkLevel::kIntraNode) && c.max_nodes <= 1)
        c.inter_node = link;  // one host: no other link exists
    }
  }
}

}  // namespace

void fit_measured_tables(ClusterSpec& cluster) {
  fit_kernels(cluster);
  fit_collectives(cluster);
}

}  // namespace loom
