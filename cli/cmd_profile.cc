// `loom profile --backend cpu --out FILE`, launched as `mpirun -np N loom profile ...`: measures
// GEMMs, memory-bound kernels, the optimizer step and collectives on this machine, fits the cost
// model's parameters, prints nccl-tests-style tables and writes a loom-cost/1 file with provenance.
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "cli/command.h"
#include "cli/output.h"
#include "cli/validate_matrix.h"
#include "cli/version.h"
#include "core/json_io.h"
#include "core/presets.h"
#include "exec/cpu/cpu_backend.h"
#include "exec/process_groups.h"
#include "exec/profile/collective_profile.h"
#include "exec/profile/kernel_profile.h"
#include "sim/cost_model.h"
#include "planner/calibrate.h"
#include "sim/collectives.h"
#ifdef LOOM_EXEC_MPI
#include <mpi.h>
#endif

namespace loom::cli {
namespace {

struct ProfileFlags {
  std::string backend = "cpu";
  std::string out;
  std::string format = "table";
  std::int64_t min_bytes = 1 << 10;    // 1 KiB: latency-bound
  std::int64_t max_bytes = 256 << 20;  // 256 MiB: bandwidth-bound, as nccl-tests' usual sweep ends
  int factor = 2;
  double collective_time_s = 0.05;     // per point: enough iterations that timer and jitter average out
  int threads = 1;                     // per rank: the cost file's device is one rank on one core
  bool quick = false;
};

std::string first_line_of(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  return "unknown";
}

std::map<std::string, std::string> provenance(const ProfileFlags& f, int ranks) {
  std::map<std::string, std::string> p;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  utsname u{};
  uname(&u);
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  p["kind"] = "measured";
  p["host"] = host;
  p["date"] = date;
  p["os"] = fmt::format("{} {}", u.sysname, u.release);
  p["cpu"] = first_line_of("/proc/cpuinfo", "model name");
  p["loom_version"] = LOOM_VERSION;
  p["loom"] = version_string();
  p["compiler"] = __VERSION__;
  p["gemm_library"] = exec::cpu_gemm_library();
  p["fmt_version"] = std::to_string(FMT_VERSION);
#ifdef LOOM_EXEC_MPI
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(mpi, &len);
  std::string mpi_version(mpi, static_cast<std::size_t>(len));
  p["mpi_library"] = mpi_version.substr(0, mpi_version.find_first_of("\n,"));
#endif
  p["backend"] = f.backend;
  p["ranks"] = std::to_string(ranks);
  p["threads_per_rank"] = std::to_string(f.threads);
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) == 3) p["load_average_1min"] = fmt::format("{:.2f}", load[0]);
  p["command"] = fmt::format("mpirun -np {} loom profile --backend {} --out {}{}", ranks, f.backend, f.out,
                             f.quick ? " --quick" : "");
  return p;
}

// Every GEMM shape the validation model and gpt-tiny run at TP 1 and 2 and micro-batches 1-8,
// plus a grid; duplicates dropped.
std::vector<exec::profile::GemmCase> gemm_cases(bool quick) {
  std::vector<exec::profile::GemmCase> cases;
  std::vector<ModelSpec> models = {validation_model()};
  if (auto tiny = model_preset("gpt-tiny")) models.push_back(*tiny);
  for (const ModelSpec& m : models)
    for (int tp : {1, 2})
      for (int b : quick ? std::vector<int>{1} : std::vector<int>{1, 2, 4, 8})
        for (auto& c : exec::profile::transformer_gemm_cases(m, m.seq_len, b, tp)) cases.push_back(c);
  // Grid: 64 (a head) to 1024 (above every dimension the CPU models use) in ×4 steps.
  for (auto& c : exec::profile::grid_gemm_cases(64, quick ? 256 : 1024)) cases.push_back(c);
  std::vector<exec::profile::GemmCase> unique;
  for (const auto& c : cases)
    if (std::none_of(unique.begin(), unique.end(), [&](const auto& u) { return u.m == c.m && u.n == c.n && u.k == c.k; }))
      unique.push_back(c);
  return unique;
}

struct KernelResults {
  std::vector<exec::profile::GemmTiming> gemms;
  std::vector<exec::profile::MemoryOpTiming> memory_ops;
  double stream_bytes_per_s = 0;
  double optimizer_s = 0;
  std::int64_t optimizer_params = 0;
};

// The optimizer step's bytes as sim::CostModel::optimizer_s charges them for the executor's fp32
// training.
double optimizer_bytes(const KernelResults& k) {
  TrainingSpec fp32;
  use_fp32_precision(fp32);
  return sim::CostModel::optimizer_bytes_per_param(fp32) * static_cast<double>(k.optimizer_params);
}

// Every rank times the same kernels at once, so each sees the share of memory bandwidth and
// caches it has in a run with that many ranks; rank 0's figures go into the cost file.
KernelResults measure_kernels(exec::Backend& backend, const ProfileFlags& f, bool show_progress) {
  KernelResults k;
  exec::profile::TimingBudget budget;
  if (f.quick) budget = {5e-4, 3, 1};  // CI: a few ms per point
  {
    std::unique_ptr<ProgressBar> bar = show_progress ? std::make_unique<ProgressBar>("GEMM") : nullptr;
    k.gemms = exec::profile::time_gemms(backend, gemm_cases(f.quick), budget,
                                        [&](std::size_t d, std::size_t t) { if (bar) bar->update(d, t); });
  }
  const ModelSpec model = validation_model();
  k.memory_ops = exec::profile::time_memory_ops(backend, model, model.seq_len,
                                                f.quick ? std::vector<int>{1, 8} : std::vector<int>{1, 2, 4, 8}, budget);
  // 64 MiB per array: far past any cache of a CPU of today, so DRAM is measured.
  k.stream_bytes_per_s = exec::profile::stream_bandwidth_bytes_per_s(backend, f.quick ? 16 << 20 : 64 << 20, budget);
  // The validation model's parameters: the size the optimizer steps in the matrix.
  k.optimizer_params = f.quick ? 1 << 18 : 2 << 20;
  k.optimizer_s = exec::profile::time_optimizer_step(backend, k.optimizer_params, budget);
  return k;
}

// The softmax of unfused attention: the whole attention core minus its per-head matmuls.
void add_softmax_points(KernelResults& k, const ModelSpec& model) {
  std::vector<exec::profile::MemoryOpTiming> softmax;
  for (const auto& op : k.memory_ops) {
    if (op.op != "attention_core" && op.op != "attention_core_bwd") continue;
    const bool bwd = op.op == "attention_core_bwd";
    const double tokens = op.bytes / ((bwd ? 3.0 : 2.0) * 4.0 * model.heads * model.seq_len);
    double matmuls = 0;
    for (const auto& g : k.gemms)
      if ((g.shape.op == "attention_qk" || g.shape.op == "attention_av") && g.shape.m == tokens &&
          (g.shape.n == model.hidden || g.shape.k == model.hidden))
        matmuls += (bwd ? 2.0 : 1.0) * g.seconds;  // the simulator charges 2 of each in the backward
    if (matmuls > 0 && op.seconds > matmuls) softmax.push_back({bwd ? "softmax_bwd" : "softmax", op.bytes, op.seconds - matmuls});
  }
  k.memory_ops.insert(k.memory_ops.end(), softmax.begin(), softmax.end());
}

// `alone`: the same kernels timed on rank 0 with the other ranks idle (null for one rank). Both sets
// go into the tables, tagged with how many ranks ran at once; the fits use the all-ranks set.
ClusterSpec build_cost_file(const KernelResults& k, const KernelResults* alone,
                            const std::vector<exec::profile::CollectiveTiming>& coll, const ProfileFlags& f, int ranks,
                            int local_ranks, Json& extra) {
  ClusterSpec c = *cluster_preset("local-cpu");  // schema defaults; every measured field is replaced below
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  c.name = fmt::format("measured-{}", host);
  c.description = fmt::format("measured by loom profile: {} rank(s) × {} thread(s), one rank = one device", ranks, f.threads);
  c.gpus_per_node = static_cast<int>(std::max<unsigned>(cores, static_cast<unsigned>(local_ranks)));
  c.max_nodes = ranks / std::max(1, local_ranks);
  c.device.name = fmt::format("cpu-rank ({} thread(s))", f.threads);
  c.device.memory_bytes = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE) / cores;
  double best = 0;
  for (const auto& g : k.gemms) best = std::max(best, g.flops_per_s());
  c.device.peak_flops = best;  // the fastest GEMM measured: what this device reaches
  c.device.memory_bandwidth_bytes_per_s = k.stream_bytes_per_s;
  const int together = alone != nullptr ? std::max(2, local_ranks) : 0;
  c.gemm_table.clear();
  for (const auto& g : k.gemms) c.gemm_table.push_back({g.shape.m, g.shape.n, g.shape.k, g.seconds, together});
  const GemmCurveFit curve = fit_gemm_curve(c.gemm_table, best);
  c.compute.gemm_max_efficiency = curve.gemm_max_efficiency;
  c.compute.gemm_half_saturation_flops = curve.gemm_half_saturation_flops;
  // Weighted by how often a transformer layer runs each op in its forward and backward
  // (sim/cost_model.cc: two norms and two residual adds, one GELU, one softmax per pass).
  const std::map<std::string, double> per_layer = {{"norm", 2}, {"norm_bwd", 2}, {"residual", 2}, {"residual_bwd", 2},
                                                   {"gelu", 1}, {"gelu_bwd", 1}, {"softmax", 1}, {"softmax_bwd", 1}};
  std::vector<MemoryOpPoint> mem;
  for (const auto& op : k.memory_ops)
    if (per_layer.count(op.op)) mem.push_back({op.bytes, op.seconds, per_layer.at(op.op)});
  const MemoryBoundFit mb = fit_memory_bound(mem, k.stream_bytes_per_s);
  c.compute.memory_bound_efficiency = mb.memory_bound_efficiency;
  if (mb.memory_bound_efficiency > 1.0) {
    // The layer's ops moved their bytes faster than the STREAM sweep (caches hold activations of
    // this size): the fastest traffic measured is this device's bandwidth, as the fastest GEMM is its peak.
    c.device.memory_bandwidth_bytes_per_s *= mb.memory_bound_efficiency;
    c.compute.memory_bound_efficiency = 1.0;
  }
  c.compute.kernel_launch_s = mb.kernel_launch_s;
  // Each op measured is also kept by name: the cost model interpolates these before it falls
  // back to the one efficiency above (which ops it has no measurement of still use).
  c.memory_op_table.clear();
  for (const auto& op : k.memory_ops)
    if (per_layer.count(op.op)) c.memory_op_table.push_back({op.op, op.bytes, op.seconds, together});
  c.memory_op_table.push_back({"optimizer", optimizer_bytes(k), k.optimizer_s, together});
  if (alone != nullptr) {
    // Ranks share a host's caches and memory bandwidth: a plan with one rank per node runs its
    // element-wise ops and optimizer 1.2-1.7x faster than the all-ranks timings say (GEMMs barely
    // change), so those plans read these.
    for (const auto& g : alone->gemms) c.gemm_table.push_back({g.shape.m, g.shape.n, g.shape.k, g.seconds, 1});
    for (const auto& op : alone->memory_ops)
      if (per_layer.count(op.op)) c.memory_op_table.push_back({op.op, op.bytes, op.seconds, 1});
    c.memory_op_table.push_back({"optimizer", optimizer_bytes(*alone), alone->optimizer_s, 1});
  }
  c.framework_reserve_bytes = 0;  // the CPU executor allocates nothing outside its tracked tensors

  c.collective_points.clear();
  c.collective_fits.clear();
  std::map<std::tuple<std::string, std::string, int>, std::vector<std::pair<double, double>>> grouped;
  for (const auto& t : coll) {
    c.collective_points.push_back({t.collective, t.level, t.group_size, t.bytes, t.seconds});
    grouped[{t.collective, t.level, t.group_size}].emplace_back(t.bytes, t.seconds);
  }
  const std::map<std::string, sim::Collective> kinds = {{"all_reduce", sim::Collective::kAllReduce},
                                                        {"reduce_scatter", sim::Collective::kReduceScatter},
                                                        {"all_gather", sim::Collective::kAllGather},
                                                        {"send_recv", sim::Collective::kSendRecv}};
  c.provenance = provenance(f, ranks);
  for (const auto& [key, points] : grouped) {
    const auto& [name, level, n] = key;
    const sim::RegimeFit regimes = sim::fit_alpha_beta_regimes(kinds.at(name), n, points);
    for (const auto& r : regimes.regimes)
      c.collective_fits.push_back({name, level, n, r.ab.alpha_s, r.ab.bus_bandwidth_bytes_per_s, r.ab.r2, r.min_bytes, r.max_bytes});
    const sim::AlphaBeta one_line = sim::fit_alpha_beta(kinds.at(name), n, points);
    c.provenance[fmt::format("alpha_beta_r2_{}_{}_{}", name, level, n)] = fmt::format("{:.5f}", regimes.r2);
    c.provenance[fmt::format("alpha_beta_r2_one_line_{}_{}_{}", name, level, n)] = fmt::format("{:.5f}", one_line.r2);
    if (name == "send_recv") {
      // Pipeline sends without measured points fall back to the link figures: one line for all sizes.
      LinkSpec link{one_line.bus_bandwidth_bytes_per_s, one_line.alpha_s};
      (level == "intra_node" ? c.intra_node : c.inter_node) = link;
      if (level == "intra_node" && c.max_nodes <= 1) c.inter_node = link;  // one host: no other link exists
    }
  }
  c.provenance["memory_bound_fit_r2"] = fmt::format("{:.4f}", mb.r2);

  extra = Json::object();
  Json ops = Json::array();
  for (const auto& op : k.memory_ops) ops.push_back({{"op", op.op}, {"bytes", op.bytes}, {"seconds", op.seconds}});
  ops.push_back({{"op", "optimizer"}, {"bytes", optimizer_bytes(k)}, {"seconds", k.optimizer_s}, {"params", k.optimizer_params}});
  extra["memory_bound_ops"] = ops;
  Json gemms = Json::array();
  for (const auto& g : k.gemms)
    gemms.push_back({{"op", g.shape.op}, {"m", g.shape.m}, {"n", g.shape.n}, {"k", g.shape.k}, {"calls", g.shape.calls},
                     {"trans_a", g.shape.trans_a}, {"trans_b", g.shape.trans_b}, {"seconds", g.seconds}});
  extra["gemms"] = gemms;
  extra["stream_bandwidth_bytes_per_s"] = k.stream_bytes_per_s;
  return c;
}

std::string tables(const ClusterSpec& c, const KernelResults& k, const std::vector<exec::profile::CollectiveTiming>& coll) {
  std::string t = fmt::format("# loom profile: {}\n# {}\n", c.description, c.provenance.at("cpu"));
  if (std::stod(c.provenance.at("cpu_share_rank0")) < 0.9)
    t += fmt::format("# warning: rank 0 ran {:.0f} % of the time (load average {}): other work shares this host, so the "
                     "timings below are inflated and noisy\n", 100 * std::stod(c.provenance.at("cpu_share_rank0")),
                     c.provenance.count("load_average_1min") ? c.provenance.at("load_average_1min") : "unknown");
  t += fmt::format("# device peak (best GEMM) {:.2f} GFLOP/s, STREAM bandwidth {:.2f} GB/s\n", c.device.peak_flops / 1e9,
                   c.device.memory_bandwidth_bytes_per_s / 1e9);
  t += "#\n# GEMM (fp32), as the simulator asks for it (m, n, k) and as the executor runs it (calls, transposes)\n";
  t += fmt::format("{:>16} {:>6} {:>6} {:>6} {:>5} {:>3} {:>11} {:>9}\n", "op", "m", "n", "k", "calls", "op", "time", "rate");
  t += fmt::format("{:>16} {:>6} {:>6} {:>6} {:>5} {:>3} {:>11} {:>9}\n", "", "", "", "", "", "", "(us)", "(GFLOP/s)");
  for (const auto& g : k.gemms)
    t += fmt::format("{:>16} {:>6} {:>6} {:>6} {:>5} {:>3} {:>11.2f} {:>9.2f}\n", g.shape.op, g.shape.m, g.shape.n, g.shape.k,
                     g.shape.calls, fmt::format("{}{}", g.shape.trans_a ? 'T' : 'N', g.shape.trans_b ? 'T' : 'N'),
                     g.seconds * 1e6, g.flops_per_s() / 1e9);
  t += "#\n# memory-bound ops (bytes as the cost model charges them)\n";
  t += fmt::format("{:>20} {:>12} {:>11} {:>8}\n{:>20} {:>12} {:>11} {:>8}\n", "op", "size", "time", "bw", "", "(B)", "(us)", "(GB/s)");
  for (const auto& op : k.memory_ops)
    t += fmt::format("{:>20} {:>12.0f} {:>11.2f} {:>8.2f}\n", op.op, op.bytes, op.seconds * 1e6, op.bytes / op.seconds / 1e9);
  t += fmt::format("{:>20} {:>12.0f} {:>11.2f} {:>8.2f}\n", "optimizer", optimizer_bytes(k), k.optimizer_s * 1e6,
                   optimizer_bytes(k) / k.optimizer_s / 1e9);
  t += fmt::format("# fit: memory_bound_efficiency {:.3f}, kernel_launch_s {:.3g}, R² {}\n", c.compute.memory_bound_efficiency,
                   c.compute.kernel_launch_s, c.provenance.at("memory_bound_fit_r2"));
  if (!coll.empty()) {
    t += "#\n# collectives (slowest rank of the group; busbw as nccl-tests: ×2(n−1)/n all-reduce, ×(n−1)/n RS/AG)\n";
    t += fmt::format("{:>14} {:>5} {:>10} {:>12} {:>11} {:>11} {:>8} {:>8}\n", "collective", "group", "level", "size", "count",
                     "time", "algbw", "busbw");
    t += fmt::format("{:>14} {:>5} {:>10} {:>12} {:>11} {:>11} {:>8} {:>8}\n", "", "", "", "(B)", "(elements)", "(us)", "(GB/s)",
                     "(GB/s)");
    const std::map<std::string, sim::Collective> kinds = {{"all_reduce", sim::Collective::kAllReduce},
                                                          {"reduce_scatter", sim::Collective::kReduceScatter},
                                                          {"all_gather", sim::Collective::kAllGather},
                                                          {"send_recv", sim::Collective::kSendRecv}};
    for (const auto& x : coll) {
      const double algbw = x.bytes / x.seconds / 1e9;
      t += fmt::format("{:>14} {:>5} {:>10} {:>12.0f} {:>11.0f} {:>11.2f} {:>8.3f} {:>8.3f}\n", x.collective, x.group_size,
                       x.level, x.bytes, x.bytes / 4, x.seconds * 1e6, algbw,
                       algbw * sim::bus_factor(kinds.at(x.collective), x.group_size));
    }
    t += "#\n# α–β fits (least squares on relative residuals), one line per size regime (protocol, cache or DRAM):\n"
         "#   t = steps(n)·α + bus_factor(n)·S / busbw\n";
    t += fmt::format("{:>14} {:>5} {:>10} {:>21} {:>10} {:>8} {:>8}\n{:>14} {:>5} {:>10} {:>21} {:>10} {:>8} {:>8}\n", "collective",
                     "group", "level", "sizes", "alpha", "busbw", "R2", "", "", "", "(B)", "(us)", "(GB/s)", "");
    for (const auto& fit : c.collective_fits)
      t += fmt::format("{:>14} {:>5} {:>10} {:>10.0f}-{:<10.0f} {:>10.3f} {:>8.3f} {:>8.5f}\n", fit.collective, fit.group_size,
                       fit.level, fit.min_bytes, fit.max_bytes, fit.alpha_s * 1e6, fit.bus_bandwidth_bytes_per_s / 1e9, fit.r2);
    for (const auto& [key, value] : c.provenance) {
      const std::string prefix = "alpha_beta_r2_all_reduce_";
      if (key.rfind(prefix, 0) != 0) continue;
      const double r2 = std::stod(value);
      const std::string group = key.substr(prefix.size());
      t += fmt::format("# all_reduce ({}): R² {:.4f} over every size with its regimes' lines ({} the 0.99 bar); one line for "
                       "all sizes: R² {}\n",
                       group, r2, r2 >= 0.99 ? "meets" : "misses", c.provenance.at("alpha_beta_r2_one_line_all_reduce_" + group));
    }
  } else {
    t += "# collectives: not measured (one rank; launch with mpirun -np N to measure groups of 2..N)\n";
  }
  return t;
}

int run_profile(const ProfileFlags& f) {
  exec::Runtime runtime;
  const int rank = runtime.world_rank();
  std::string problem;
  if (f.backend != "cpu") problem = fmt::format("--backend: '{}' is not built into this binary (cpu)", f.backend);
  else if (f.format != "table" && f.format != "json") problem = fmt::format("--format: unknown format '{}' (table, json)", f.format);
  else if (f.min_bytes < 4 || f.max_bytes < f.min_bytes) problem = "--min-bytes/--max-bytes: need 4 <= min <= max";
  else if (f.out.empty()) problem = "--out: give the cost file to write";
  else if (rank == 0) {
    // Checked before minutes of measuring: the file must be creatable (written atomically at the end).
    const std::string probe = f.out + ".probe";
    std::FILE* file = std::fopen(probe.c_str(), "w");
    if (file == nullptr) problem = fmt::format("--out: cannot write '{}'", f.out);
    else std::fclose(file), std::remove(probe.c_str());
  }
  const auto [failed, rank0_failed] = runtime.agree_on_failure(!problem.empty());
  if (failed > 0) {
    if (rank == 0) std::fprintf(stderr, "loom: %s\n", rank0_failed ? problem.c_str() : "a rank could not start profiling");
    return kExitBadInput;
  }
  exec::set_cpu_threads(f.threads);
  const auto wall_start = std::chrono::steady_clock::now();
  std::string error;
  auto backend = exec::make_backend(f.backend, &error);
  KernelResults kernels = measure_kernels(*backend, f, rank == 0);
  // Then rank 0 alone, the other ranks sleeping (an MPI wait would spin on their cores).
  std::optional<KernelResults> alone;
  if (runtime.world_size() > 1) {
    ParallelConfig everyone;
    everyone.dp = runtime.world_size();
    exec::ProcessGroups groups = exec::make_process_groups(runtime, everyone, false);
    float done = 0;
    if (rank == 0) {
      alone = measure_kernels(*backend, f, true);
      for (int r = 1; r < runtime.world_size(); ++r) groups.world->isend(&done, 1, r, 0)->wait();
    } else {
      auto request = groups.world->irecv(&done, 1, 0, 0);
      while (!request->test()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  std::vector<exec::profile::CollectiveTiming> coll;
  if (runtime.world_size() > 1) {
    std::unique_ptr<ProgressBar> bar = rank == 0 ? std::make_unique<ProgressBar>("collectives") : nullptr;
    const std::int64_t max_bytes = f.quick ? std::min<std::int64_t>(f.max_bytes, 1 << 20) : f.max_bytes;
    coll = exec::profile::time_collectives(runtime, *backend, exec::profile::message_sizes(f.min_bytes, max_bytes, f.factor),
                                           f.quick ? 0.005 : f.collective_time_s,
                                           [&](std::size_t d, std::size_t t) { if (bar) bar->update(d, t); });
  }
  // Rank 0's CPU time over its wall time: below 1 when other work on the host took its core.
  rusage self{};
  getrusage(RUSAGE_SELF, &self);
  const double cpu_s = self.ru_utime.tv_sec + self.ru_stime.tv_sec + 1e-6 * (self.ru_utime.tv_usec + self.ru_stime.tv_usec);
  const double cpu_share = cpu_s / (f.threads * std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count());
  if (rank != 0) return kExitOk;
  add_softmax_points(kernels, validation_model());
  if (alone) add_softmax_points(*alone, validation_model());
  Json extra;
  ClusterSpec cluster =
      build_cost_file(kernels, alone ? &*alone : nullptr, coll, f, runtime.world_size(), runtime.local_size(), extra);
  cluster.provenance["cpu_share_rank0"] = fmt::format("{:.2f}", cpu_share);
  Json file = to_json(cluster);
  file["measurements"] = extra;
  write_output(f.out, file.dump(2) + "\n");
  write_output("", f.format == "json" ? file.dump(2) + "\n" : tables(cluster, kernels, coll));
  return kExitOk;
}

std::function<int()> add_profile(CLI::App& root) {
  auto flags = std::make_shared<ProfileFlags>();
  CLI::App* app = root.add_subcommand("profile", "measure this machine's kernels and collectives into a cost file");
  app->add_option("--backend", flags->backend, "cpu or cuda")->capture_default_str();
  app->add_option("--out", flags->out, "cost file to write (loom-cost/1 JSON)");
  app->add_option("--format", flags->format, "printed output: table or json")->capture_default_str();
  app->add_option("--min-bytes", flags->min_bytes, "smallest collective message")->capture_default_str();
  app->add_option("--max-bytes", flags->max_bytes, "largest collective message")->capture_default_str();
  app->add_option("--factor", flags->factor, "message size step")->capture_default_str();
  app->add_option("--threads", flags->threads, "threads per rank")->capture_default_str();
  app->add_flag("--quick", flags->quick, "seconds instead of minutes: fewer shapes, messages up to 1 MiB (CI)");
  return [flags] { return run_profile(*flags); };
}

}  // namespace

LOOM_REGISTER_COMMAND("profile", add_profile);

}  // namespace loom::cli
