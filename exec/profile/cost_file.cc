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
    if (std::find(m.layer_ops.begin(), m.layer_ops.end(), op.op) != m.layer_ops.end())
      c.memory_op_table.push_back({op.op, op.bytes, op.seconds, ranks_together});
  c.memory_op_table.push_back({"optimizer", m.optimizer_bytes_per_param * static_cast<double>(k.optimizer_params),
                               k.optimizer_s, ranks_together});
}

}  // namespace

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
      "framework_reserve_bytes, flash_attention_* (the executor has no fused attention to time), "
      "gemm_fp8_max_efficiency",
      preset);
}

ClusterSpec measured_cost_file(const MeasuredMachine& m) {
  const bool gpu = !m.gpu_preset.empty();
  // Schema defaults (or the GPU's preset); every measured field is replaced.
  ClusterSpec c = *cluster_preset(gpu ? m.gpu_preset : "local-cpu");
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
  // The CPU executor allocates nothing outside its tracked tensors; a GPU has its CUDA context and libraries.
  c.framework_reserve_bytes = gpu ? reserve : 0;
  c.collective_points.clear();
  c.collective_fits.clear();
  for (const auto& t : *m.collectives)
    c.collective_points.push_back({t.collective, t.level, t.group_size, t.bytes, t.seconds});
  return c;
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
  return extra;
}

}  // namespace loom::exec::profile
