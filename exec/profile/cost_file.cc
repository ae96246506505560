#include "exec/profile/cost_file.h"

#include <unistd.h>

#include <algorithm>
#include <thread>

#include <fmt/format.h>

#include "core/presets.h"

namespace loom::exec::profile {

void add_softmax_points(KernelResults& k, const ModelSpec& model, double activation_bytes) {
  std::vector<MemoryOpTiming> softmax;
  for (const auto& op : k.memory_ops) {
    if (op.op != "attention_core" && op.op != "attention_core_bwd") continue;
    const bool bwd = op.op == "attention_core_bwd";
    const double tokens = op.bytes / ((bwd ? 3.0 : 2.0) * activation_bytes * model.heads * model.seq_len);
    double matmuls = 0;
    for (const auto& g : k.gemms)
      if ((g.shape.op == "attention_qk" || g.shape.op == "attention_av") && g.shape.m == tokens &&
          (g.shape.n == model.q_dim() || g.shape.k == model.q_dim()))  // the attention output's width
        matmuls += (bwd ? 2.0 : 1.0) * g.seconds;  // the simulator charges 2 of each in the backward
    if (matmuls > 0 && op.seconds > matmuls)
      softmax.push_back({bwd ? "softmax_bwd" : "softmax", op.bytes, op.seconds - matmuls});
  }
  k.memory_ops.insert(k.memory_ops.end(), softmax.begin(), softmax.end());
}

namespace {

// The fastest GEMM measured is the device's peak; one rank is one device on its share of the host.
void describe_device(ClusterSpec& c, const MeasuredMachine& m) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  c.name = fmt::format("measured-{}", host);
  c.description = fmt::format("measured by loom profile: {} rank(s) × {} thread(s), one rank = one device", m.ranks,
                              m.threads_per_rank);
  c.gpus_per_node = static_cast<int>(std::max<unsigned>(cores, static_cast<unsigned>(m.local_ranks)));
  c.max_nodes = m.ranks / std::max(1, m.local_ranks);
  // A GPU no preset describes is measured as a CPU is: its fastest GEMM and copy are its peaks.
  c.device.name = m.gpu_name.empty() ? fmt::format("cpu-rank ({} thread(s))", m.threads_per_rank) : m.gpu_name;
  c.device.memory_bytes = m.gpu_memory_bytes > 0
                              ? m.gpu_memory_bytes
                              : static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE) / cores;
  double best = 0;
  for (const auto& g : m.kernels->gemms) best = std::max(best, g.flops_per_s());
  c.device.peak_flops = best;
  c.device.memory_bandwidth_bytes_per_s = m.kernels->stream_bytes_per_s;
}

// One set of kernel timings into the tables, tagged with the ranks that ran at once.
void add_kernel_tables(ClusterSpec& c, const MeasuredMachine& m, const KernelResults& k, int ranks_together) {
  const double slowdown = std::max(1.0, m.sustained_slowdown);
  for (const auto& g : k.gemms)
    c.gemm_table.push_back({g.shape.m, g.shape.n, g.shape.k, g.seconds * slowdown, ranks_together});
  for (const auto& op : k.memory_ops)
    if (std::find(m.named_ops.begin(), m.named_ops.end(), op.op) != m.named_ops.end())
      c.memory_op_table.push_back({op.op, op.bytes, op.seconds, ranks_together});
  c.memory_op_table.push_back({"optimizer", m.optimizer_bytes_per_param * static_cast<double>(k.optimizer_params),
                               k.optimizer_s, ranks_together});
}

// A GPU of a preset's kind: the preset's datasheet figures, node, links and collectives stay; what one GPU
// measures replaces the compute figures (fitted later from the tables) and the device's name and memory.
void describe_gpu(ClusterSpec& c, const MeasuredMachine& m) {
  const std::string preset = c.name;
  c.name = fmt::format("measured-{}", preset);
  c.description = fmt::format(
      "{}: kernels measured by loom profile on one {} ({} rank(s)); node, links and collectives are the {} "
      "preset's",
      preset, m.gpu_name, m.ranks, preset);
  c.device.name = m.gpu_name;
  if (m.gpu_memory_bytes > 0) c.device.memory_bytes = m.gpu_memory_bytes;
  // Ops the tables lack fall back to the fitted memory_bound_efficiency, not to the preset's per-op
  // figures, which came from another measurement.
  c.compute.memory_op_efficiency.clear();
  c.provenance["kept_from_preset"] = fmt::format(
      "{}: device peak_flops, peak_fp8_flops and memory bandwidth (datasheet), node, links, collectives, "
      "framework_reserve_bytes, gemm_fp8_max_efficiency",
      preset);
}

}  // namespace

ClusterSpec measured_cost_file(const MeasuredMachine& m) {
  const bool gpu = !m.gpu_preset.empty();
  // Schema defaults (or the GPU's preset); every measured field is replaced.
  ClusterSpec c = *cluster_preset(gpu ? m.gpu_preset : "local-cpu");
  // The preset's sources describe its own figures, most of which the measurements replace: the file says
  // what it kept and from where (kept_from_preset) instead.
  c.provenance.clear();
  const double reserve = c.framework_reserve_bytes;
  if (gpu)
    describe_gpu(c, m);
  else
    describe_device(c, m);
  c.gemm_table.clear();
  c.memory_op_table.clear();
  // Ranks share a host's caches and memory bandwidth: a plan with one rank per node runs its
  // element-wise ops and optimizer 1.2-1.7x faster than the all-ranks timings say (GEMMs barely
  // change), so those plans read the timings of rank 0 alone.
  add_kernel_tables(c, m, *m.kernels, m.alone != nullptr ? std::max(2, m.local_ranks) : 0);
  if (m.alone != nullptr) add_kernel_tables(c, m, *m.alone, 1);
  const std::string flash =
      fit_flash_attention(c.compute, m.kernels->flash, c.device.peak_flops, std::max(1.0, m.sustained_slowdown));
  if (!flash.empty()) c.provenance["flash_attention_fit"] = flash;
  // The CPU executor allocates nothing outside its tracked tensors; a GPU has its CUDA context and libraries.
  c.framework_reserve_bytes = gpu ? reserve : 0;
  c.collective_points.clear();
  c.collective_fits.clear();
  for (const auto& t : *m.collectives)
    c.collective_points.push_back({t.collective, t.level, t.group_size, t.bytes, t.seconds});
  return c;
}

std::string fit_flash_attention(ComputeEfficiency& compute, const std::vector<FlashTiming>& points, double peak_flops,
                                double slowdown) {
  if (points.empty() || peak_flops <= 0) return "";
  std::vector<std::pair<double, double>> xy;  // (1/w, 1/e)
  double best = 0, worst = 1e300;
  for (const FlashTiming& p : points) {
    const double w = 3.5 * p.forward_flops, e = w / ((p.forward_s + p.backward_s) * slowdown * peak_flops);
    xy.emplace_back(1.0 / w, 1.0 / e);
    best = std::max(best, e);
    worst = std::min(worst, e);
  }
  double mx = 0, my = 0;
  for (const auto& [x, y] : xy) mx += x / static_cast<double>(xy.size()), my += y / static_cast<double>(xy.size());
  double sxx = 0, sxy = 0;
  for (const auto& [x, y] : xy) sxx += (x - mx) * (x - mx), sxy += (x - mx) * (y - my);
  const double slope = sxx > 0 ? sxy / sxx : -1.0, intercept = my - slope * mx;
  const bool fits = slope >= 0 && intercept >= 1.0;  // E = 1/intercept ≤ 1, H = slope/intercept ≥ 0
  compute.flash_attention_efficiency = fits ? 1.0 / intercept : std::min(1.0, best);
  compute.flash_attention_half_saturation_flops = fits ? slope / intercept : 0.0;
  return fmt::format(
      "{} point(s) of the executor's fused attention (forward + backward, x {:.4f} sustained/burst): efficiency "
      "{:.3f}..{:.3f} of peak; {}",
      points.size(), slowdown, worst, best,
      fits ? fmt::format("ceiling {:.3f}, half saturation at {:.3g} FLOP", compute.flash_attention_efficiency,
                         compute.flash_attention_half_saturation_flops)
           : "no saturation curve fits them: the best point's efficiency, flat");
}

Json measurements_json(const KernelResults& k, double optimizer_bytes_per_param) {
  Json extra = Json::object();
  Json ops = Json::array();
  for (const auto& op : k.memory_ops) ops.push_back({{"op", op.op}, {"bytes", op.bytes}, {"seconds", op.seconds}});
  ops.push_back({{"op", "optimizer"},
                 {"bytes", optimizer_bytes_per_param * static_cast<double>(k.optimizer_params)},
                 {"seconds", k.optimizer_s},
                 {"params", k.optimizer_params}});
  extra["memory_bound_ops"] = ops;
  Json gemms = Json::array();
  for (const auto& g : k.gemms)
    gemms.push_back({{"op", g.shape.op},
                     {"m", g.shape.m},
                     {"n", g.shape.n},
                     {"k", g.shape.k},
                     {"calls", g.shape.calls},
                     {"trans_a", g.shape.trans_a},
                     {"trans_b", g.shape.trans_b},
                     {"seconds", g.seconds}});
  extra["gemms"] = gemms;
  extra["stream_bandwidth_bytes_per_s"] = k.stream_bytes_per_s;
  Json flash = Json::array();
  for (const FlashTiming& f : k.flash)
    flash.push_back({{"model", f.model},
                     {"seq", f.seq},
                     {"micro_batch", f.micro_batch},
                     {"forward_flops", f.forward_flops},
                     {"forward_seconds", f.forward_s},
                     {"backward_seconds", f.backward_s}});
  extra["flash_attention"] = flash;
  return extra;
}

}  // namespace loom::exec::profile
