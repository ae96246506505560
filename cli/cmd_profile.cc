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
#include <fmt/ranges.h>

#include "cli/command.h"
#include "cli/output.h"
#include "cli/validate_matrix.h"
#include "cli/version.h"
#include "core/json_io.h"
#include "core/presets.h"
#include "exec/cpu/cpu_backend.h"
#include "exec/device_peak.h"
#include "exec/process_groups.h"
#include "exec/profile/collective_profile.h"
#include "exec/profile/cost_file.h"
#include "exec/profile/kernel_profile.h"
#include "planner/calibrate.h"
#include "sim/collectives.h"
#include "sim/cost_model.h"
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
  double collective_time_s = 0.05;  // per point: enough iterations that timer and jitter average out
  int threads = 1;                  // per rank: the cost file's device is one rank on one core
  bool quick = false;
  std::string model;  // a model whose layers' shapes are timed too (the planner's, for a GPU's cost file)
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
  p["command"] = fmt::format("mpirun -np {} loom profile --backend {} --out {}{}{}", ranks, f.backend, f.out,
                             f.model.empty() ? "" : " --model " + f.model, f.quick ? " --quick" : "");
  return p;
}

// TP degrees up to 8 (a node) that split the model's heads, key/value heads and FFN evenly.
std::vector<int> tensor_parallel_degrees(const ModelSpec& m, int most) {
  std::vector<int> tps;
  for (int tp = 1; tp <= most; tp *= 2)
    if (m.heads % tp == 0 && m.kv_heads % tp == 0 && m.ffn_hidden % tp == 0) tps.push_back(tp);
  return tps;
}

// The models whose memory-bound ops are timed, each at its own sequence length and two micro-batches
// (the ops' time is linear in their bytes): the CPU matrix's model, or on a GPU the smallest and the
// largest GPT of the GPU matrix, at micro-batches that matrix runs (so their attention GEMMs are in
// the table too, and the softmax can be told apart from them).
struct MemoryOpWorkload {
  ModelSpec model;
  std::vector<int> micro_batches;
};
std::vector<MemoryOpWorkload> memory_op_workloads(bool gpu, bool quick) {
  if (!gpu) return {{validation_model(), quick ? std::vector<int>{1, 8} : std::vector<int>{1, 2, 4, 8}}};
  return {{matrix_model(MatrixBackend::kCuda, "gpt2-small"), quick ? std::vector<int>{2} : std::vector<int>{2, 8}},
          {matrix_model(MatrixBackend::kCuda, "gpt-1.3b"), quick ? std::vector<int>{1} : std::vector<int>{1, 2}}};
}

// The GEMM shapes of the on-machine validation matrix: on the CPU those the validation model and
// gpt-tiny run at TP 1 and 2 and micro-batches 1-8; on a GPU those of every configuration of the GPU
// matrix (model, sequence length, micro-batch, TP degree; --quick: micro-batch 1 only). Then those of
// `extra` (--model) at TP 1-8 and micro-batches 1-8 (1 and 2 with --quick) at its sequence length, those
// of the memory-op workloads, and a grid (64 to 1024 in ×4 steps on a CPU, 256 to 4096 on a GPU);
// duplicates dropped.
std::vector<exec::profile::GemmCase> gemm_cases(bool quick, const std::optional<ModelSpec>& extra, bool gpu) {
  std::vector<exec::profile::GemmCase> cases;
  auto add = [&](const ModelSpec& m, int seq, int b, int tp) {
    for (auto& c : exec::profile::transformer_gemm_cases(m, seq, b, tp)) cases.push_back(c);
  };
  if (gpu) {
    for (const MatrixConfig& c : validation_matrix(MatrixBackend::kCuda)) {
      const ModelSpec m = matrix_model(MatrixBackend::kCuda, c.model);
      add(m, c.seq_len, quick ? 1 : c.config.micro_batch, c.config.tp);
    }
  } else {
    std::vector<ModelSpec> models = {validation_model()};
    if (auto tiny = model_preset("gpt-tiny")) models.push_back(*tiny);
    for (const ModelSpec& m : models)
      for (int tp : {1, 2})
        for (int b : quick ? std::vector<int>{1} : std::vector<int>{1, 2, 4, 8}) add(m, m.seq_len, b, tp);
  }
  if (extra)
    for (int tp : tensor_parallel_degrees(*extra, 8))
      for (int b : quick ? std::vector<int>{1, 2} : std::vector<int>{1, 2, 4, 8}) add(*extra, extra->seq_len, b, tp);
  if (gpu)
    for (const MemoryOpWorkload& w : memory_op_workloads(gpu, quick))
      for (int b : w.micro_batches) add(w.model, w.model.seq_len, b, 1);
  for (auto& c :
       gpu ? exec::profile::grid_gemm_cases(256, 4096) : exec::profile::grid_gemm_cases(64, quick ? 256 : 1024))
    cases.push_back(c);
  std::vector<exec::profile::GemmCase> unique;
  for (const auto& c : cases)
    if (std::none_of(unique.begin(), unique.end(),
                     [&](const auto& u) { return u.m == c.m && u.n == c.n && u.k == c.k; }))
      unique.push_back(c);
  return unique;
}

using exec::profile::KernelResults;

// The optimizer step's bytes per parameter as sim::CostModel::optimizer_s charges them for the
// executor's training in `compute` (fp32 on the CPU; bf16 mixed precision, the TrainingSpec default, on a GPU).
double optimizer_bytes_per_param(exec::DType compute) {
  TrainingSpec training;
  if (compute == exec::DType::kF32) use_fp32_precision(training);
  return sim::CostModel::optimizer_bytes_per_param(training);
}

// Every rank times the same kernels at once, so each sees the share of memory bandwidth and
// caches it has in a run with that many ranks; rank 0's figures go into the cost file.
KernelResults measure_kernels(exec::Backend& backend, const ProfileFlags& f, const std::optional<ModelSpec>& extra,
                              bool show_progress) {
  KernelResults k;
  const bool gpu = f.backend == "cuda";
  exec::profile::TimingBudget budget;
  if (f.quick) budget = {5e-4, 3, 1};  // CI: a few ms per point
  {
    ProgressBar bar("GEMM", show_progress);
    k.gemms = exec::profile::time_gemms(backend, gemm_cases(f.quick, extra, gpu), budget,
                                        [&](std::size_t d, std::size_t t) { bar.update(d, t); });
  }
  for (const MemoryOpWorkload& w : memory_op_workloads(gpu, f.quick)) {
    auto ops = exec::profile::time_memory_ops(backend, w.model, w.model.seq_len, w.micro_batches, budget);
    k.memory_ops.insert(k.memory_ops.end(), ops.begin(), ops.end());
  }
  if (extra) {  // its activations at two sizes: the ops' time is linear in their bytes
    auto more = exec::profile::time_memory_ops(backend, *extra, extra->seq_len, {1, 2}, budget);
    k.memory_ops.insert(k.memory_ops.end(), more.begin(), more.end());
  }
  // The fused attention at the same models and micro-batches: points along its efficiency curve.
  for (const MemoryOpWorkload& w : memory_op_workloads(gpu, f.quick)) {
    auto flash = exec::profile::time_flash_attention(backend, w.model, w.model.seq_len, w.micro_batches, budget);
    k.flash.insert(k.flash.end(), flash.begin(), flash.end());
  }
  if (extra) {
    auto flash = exec::profile::time_flash_attention(backend, *extra, extra->seq_len, {1, 2}, budget);
    k.flash.insert(k.flash.end(), flash.begin(), flash.end());
  }
  // 64 MiB per array: far past any cache of a CPU of today, so DRAM is measured; 256 MiB on a GPU, five
  // times the 50 MB L2 of an H100 or H200 (NVIDIA H100 Tensor Core GPU Architecture whitepaper).
  const std::int64_t stream_bytes = gpu ? std::int64_t{256} << 20 : f.quick ? 16 << 20 : 64 << 20;
  k.stream_bytes_per_s = exec::profile::stream_bandwidth_bytes_per_s(backend, stream_bytes, budget);
  // The CPU matrix's model has 2 M parameters: the size its optimizer steps. On a GPU the matrix steps
  // 124 M to 1.3 B; 64 M (1.2 GB of states and gradients) is well past the caches, as those are.
  k.optimizer_params = gpu ? (f.quick ? 1 << 22 : 1 << 26) : (f.quick ? 1 << 18 : 2 << 20);
  k.optimizer_s = exec::profile::time_optimizer_step(backend, k.optimizer_params, budget);
  return k;
}

// The cost file: measured tables (exec/profile), provenance, then the cost model fitted to them (planner).
Json cost_file(const exec::profile::MeasuredMachine& machine, const ProfileFlags& f, double cpu_share,
               const exec::Backend& backend, const std::map<std::string, std::string>& device,
               const std::optional<exec::profile::SustainedRate>& sustained, ClusterSpec& c) {
  c = exec::profile::measured_cost_file(machine);
  // Added to what measuring wrote there (what was kept from a preset, the fused attention's fit).
  for (auto& [key, value] : provenance(f, machine.ranks)) c.provenance[key] = value;
  for (const auto& [key, value] : device) c.provenance[key] = value;
  c.provenance["compute_dtype"] = exec::to_string(backend.compute_dtype());
  if (sustained) {
    c.provenance["gemm_8192_burst_tflops"] = fmt::format("{:.1f}", sustained->burst_flops_per_s / 1e12);
    c.provenance["gemm_8192_sustained_tflops"] = fmt::format("{:.1f}", sustained->sustained_flops_per_s / 1e12);
    c.provenance["gemm_table_sustained_slowdown"] =
        fmt::format("{:.4f} (the GEMM table's burst timings lengthened by it where above 1; measurements are raw)",
                    std::max(1.0, machine.sustained_slowdown));
  }
  fit_measured_tables(c);
  c.provenance["cpu_share_rank0"] = fmt::format("{:.2f}", cpu_share);
  Json file = to_json(c);
  file["measurements"] = exec::profile::measurements_json(*machine.kernels, machine.optimizer_bytes_per_param);
  return file;
}

// Why the collectives cannot be measured in this launch, or "" when they can: collective over the world.
// A GPU's buffers travel over NCCL, one rank per GPU (exec/comm_path.h); MPI cannot read them.
std::string why_collectives_are_not_measured(const ProfileFlags& f, const exec::Runtime& runtime,
                                             exec::Backend& backend) {
  if (f.backend != "cuda")
    return runtime.world_size() > 1 ? "" : "one rank; launch with mpirun -np N to measure groups of 2..N";
  if (runtime.world_size() == 1)
    return "one rank: NCCL's collectives need several GPUs, one rank on each (mpirun -np N on N GPUs); the link "
           "figures in this file are not measured";
  const int sharing = runtime.ranks_sharing_a_device(backend.device_uuid());  // collective
  if (!exec::has_nccl()) return "this build has no NCCL, which carries a GPU's buffers";
  if (sharing > 1)
    return fmt::format("{} ranks share a GPU, and NCCL needs one GPU per rank: launch one rank per GPU", sharing);
  return "";
}

std::string tables(const ClusterSpec& c, const KernelResults& k, double optimizer_bytes_per_param,
                   const std::vector<exec::profile::CollectiveTiming>& coll, const std::string& not_measured) {
  const double optimizer_bytes = optimizer_bytes_per_param * static_cast<double>(k.optimizer_params);
  std::string t =
      fmt::format("# loom profile: {}\n# {}\n", c.description,
                  c.provenance.count("gpu") != 0
                      ? fmt::format("{} (compute capability {}, {} multiprocessors, driver API {}, "
                                    "runtime {}), host CPU {}",
                                    c.provenance.at("gpu"), c.provenance.at("gpu_compute_capability"),
                                    c.provenance.at("gpu_multiprocessors"), c.provenance.at("cuda_driver_api"),
                                    c.provenance.at("cuda_runtime"), c.provenance.at("cpu"))
                      : c.provenance.at("cpu"));
  if (std::stod(c.provenance.at("cpu_share_rank0")) < 0.9)
    t += fmt::format(
        "# warning: rank 0 ran {:.0f} % of the time (load average {}): other work shares this host, so the "
        "timings below are inflated and noisy\n",
        100 * std::stod(c.provenance.at("cpu_share_rank0")),
        c.provenance.count("load_average_1min") ? c.provenance.at("load_average_1min") : "unknown");
  const bool datasheet = c.provenance.count("kept_from_preset") != 0;  // a GPU of a preset's kind
  if (datasheet)
    t +=
        fmt::format("# device peak (datasheet) {:.2f} GFLOP/s, bandwidth {:.2f} GB/s; measured: copy {:.2f} GB/s\n",
                    c.device.peak_flops / 1e9, c.device.memory_bandwidth_bytes_per_s / 1e9, k.stream_bytes_per_s / 1e9);
  else
    t += fmt::format("# device peak (best GEMM) {:.2f} GFLOP/s, STREAM bandwidth {:.2f} GB/s\n",
                     c.device.peak_flops / 1e9, c.device.memory_bandwidth_bytes_per_s / 1e9);
  if (c.provenance.count("gemm_8192_burst_tflops") != 0)
    t += fmt::format("# GEMM 8192³ back to back: {} TFLOP/s in its first 50 ms, {} sustained; table x {}\n",
                     c.provenance.at("gemm_8192_burst_tflops"), c.provenance.at("gemm_8192_sustained_tflops"),
                     c.provenance.at("gemm_table_sustained_slowdown").substr(0, 6));
  t += fmt::format(
      "#\n# GEMM ({} operands), as the simulator asks for it (m, n, k) and as the executor runs it (calls, "
      "transposes)\n",
      c.provenance.count("compute_dtype") != 0 ? c.provenance.at("compute_dtype") : "fp32");
  t += fmt::format("{:>16} {:>6} {:>6} {:>6} {:>5} {:>3} {:>11} {:>9}\n", "op", "m", "n", "k", "calls", "op", "time",
                   "rate");
  t += fmt::format("{:>16} {:>6} {:>6} {:>6} {:>5} {:>3} {:>11} {:>9}\n", "", "", "", "", "", "", "(us)", "(GFLOP/s)");
  for (const auto& g : k.gemms)
    t += fmt::format("{:>16} {:>6} {:>6} {:>6} {:>5} {:>3} {:>11.2f} {:>9.2f}\n", g.shape.op, g.shape.m, g.shape.n,
                     g.shape.k, g.shape.calls,
                     fmt::format("{}{}", g.shape.trans_a ? 'T' : 'N', g.shape.trans_b ? 'T' : 'N'), g.seconds * 1e6,
                     g.flops_per_s() / 1e9);
  if (!k.flash.empty()) {
    t += "#\n# fused (flash) attention, one layer on one rank, causal (FLOPs as the simulator counts them)\n";
    t += fmt::format("{:>16} {:>6} {:>3} {:>11} {:>11} {:>9}\n", "model", "seq", "mb", "forward", "backward", "rate");
    t += fmt::format("{:>16} {:>6} {:>3} {:>11} {:>11} {:>9}\n", "", "", "", "(us)", "(us)", "(GFLOP/s)");
    for (const auto& f : k.flash)
      t += fmt::format("{:>16} {:>6} {:>3} {:>11.2f} {:>11.2f} {:>9.2f}\n", f.model, f.seq, f.micro_batch,
                       1e6 * f.forward_s, 1e6 * f.backward_s,
                       3.5 * f.forward_flops / (f.forward_s + f.backward_s) / 1e9);
    if (c.provenance.count("flash_attention_fit") != 0)
      t += fmt::format("# fit: {}\n", c.provenance.at("flash_attention_fit"));
  }
  t += "#\n# memory-bound ops (bytes as the cost model charges them)\n";
  t += fmt::format("{:>20} {:>12} {:>11} {:>8}\n{:>20} {:>12} {:>11} {:>8}\n", "op", "size", "time", "bw", "", "(B)",
                   "(us)", "(GB/s)");
  for (const auto& op : k.memory_ops)
    t += fmt::format("{:>20} {:>12.0f} {:>11.2f} {:>8.2f}\n", op.op, op.bytes, op.seconds * 1e6,
                     op.bytes / op.seconds / 1e9);
  t += fmt::format("{:>20} {:>12.0f} {:>11.2f} {:>8.2f}\n", "optimizer", optimizer_bytes, k.optimizer_s * 1e6,
                   optimizer_bytes / k.optimizer_s / 1e9);
  t +=
      fmt::format("# fit: memory_bound_efficiency {:.3f}, kernel_launch_s {:.3g}, R² {}\n",
                  c.compute.memory_bound_efficiency, c.compute.kernel_launch_s, c.provenance.at("memory_bound_fit_r2"));
  if (!coll.empty()) {
    t += "#\n# collectives (slowest rank of the group; busbw as nccl-tests: ×2(n−1)/n all-reduce, ×(n−1)/n RS/AG)\n";
    t += fmt::format("{:>14} {:>5} {:>10} {:>12} {:>11} {:>11} {:>8} {:>8}\n", "collective", "group", "level", "size",
                     "count", "time", "algbw", "busbw");
    t += fmt::format("{:>14} {:>5} {:>10} {:>12} {:>11} {:>11} {:>8} {:>8}\n", "", "", "", "(B)", "(elements)", "(us)",
                     "(GB/s)", "(GB/s)");
    for (const auto& x : coll) {
      const double algbw = x.bytes / x.seconds / 1e9;
      t += fmt::format("{:>14} {:>5} {:>10} {:>12.0f} {:>11.0f} {:>11.2f} {:>8.3f} {:>8.3f}\n", x.collective,
                       x.group_size, x.level, x.bytes, x.bytes / 4, x.seconds * 1e6, algbw,
                       algbw * sim::bus_factor(collective_named(x.collective), x.group_size));
    }
    t += "#\n# α–β fits (least squares on relative residuals), one line per size regime (protocol, cache or DRAM):\n"
         "#   t = steps(n)·α + bus_factor(n)·S / busbw\n";
    t += fmt::format("{:>14} {:>5} {:>10} {:>21} {:>10} {:>8} {:>8}\n{:>14} {:>5} {:>10} {:>21} {:>10} {:>8} {:>8}\n",
                     "collective", "group", "level", "sizes", "alpha", "busbw", "R2", "", "", "", "(B)", "(us)",
                     "(GB/s)", "");
    for (const auto& fit : c.collective_fits)
      t += fmt::format("{:>14} {:>5} {:>10} {:>10.0f}-{:<10.0f} {:>10.3f} {:>8.3f} {:>8.5f}\n", fit.collective,
                       fit.group_size, fit.level, fit.min_bytes, fit.max_bytes, fit.alpha_s * 1e6,
                       fit.bus_bandwidth_bytes_per_s / 1e9, fit.r2);
    for (const auto& [key, value] : c.provenance) {
      const std::string prefix = "alpha_beta_r2_all_reduce_";
      if (key.rfind(prefix, 0) != 0) continue;
      const double r2 = std::stod(value);
      const std::string group = key.substr(prefix.size());
      t += fmt::format(
          "# all_reduce ({}): R² {:.4f} over every size with its regimes' lines ({} the 0.99 bar); one line for "
          "all sizes: R² {}\n",
          group, r2, r2 >= 0.99 ? "meets" : "misses", c.provenance.at("alpha_beta_r2_one_line_all_reduce_" + group));
    }
  } else {
    t += fmt::format("# collectives: not measured ({})\n", not_measured);
  }
  return t;
}

int run_profile(const ProfileFlags& f) {
  exec::Runtime runtime;
  const int rank = runtime.world_rank();
  std::string problem;
  const std::vector<std::string> built = exec::available_backends();
  if (std::find(built.begin(), built.end(), f.backend) == built.end())
    problem = fmt::format("--backend: '{}' is not built into this binary ({})", f.backend, fmt::join(built, ", "));
  else if (Status s = check_format(f.format, {"table", "json"}); !s)
    problem = s.error().message;
  else if (f.min_bytes < 4 || f.max_bytes < f.min_bytes)
    problem = "--min-bytes/--max-bytes: need 4 <= min <= max";
  else if (f.out.empty())
    problem = "--out: give the cost file to write";
  std::optional<ModelSpec> extra;
  if (problem.empty() && !f.model.empty()) {
    auto m = load_model(f.model);
    if (m)
      extra = *m;
    else
      problem = "--model: " + m.error().message;
  } else if (rank == 0) {
    // Checked before minutes of measuring: the file must be creatable (written atomically at the end).
    const std::string probe = f.out + ".probe";
    std::FILE* file = std::fopen(probe.c_str(), "w");
    if (file == nullptr)
      problem = fmt::format("--out: cannot write '{}'", f.out);
    else
      std::fclose(file), std::remove(probe.c_str());
  }
  const auto [failed, rank0_failed] = runtime.agree_on_failure(!problem.empty());
  if (failed > 0) {
    if (rank == 0)
      std::fprintf(stderr, "loom: %s\n", rank0_failed ? problem.c_str() : "a rank could not start profiling");
    return kExitBadInput;
  }
  // A GPU backend can still fail to start (no device visible, a driver older than the runtime): every
  // rank says whether its own started, and the job stops with that one line before any measuring.
  std::string error;
  auto backend = exec::make_backend(f.backend, &error, {runtime.local_rank(), runtime.local_size()});
  if (const auto [down, rank0_down] = runtime.agree_on_failure(backend == nullptr); down > 0) {
    if (rank == 0)
      std::fprintf(stderr, "loom: %s\n",
                   rank0_down ? error.c_str() : fmt::format("{} rank(s) could not start the backend", down).c_str());
    return kExitBadInput;
  }
  exec::set_cpu_threads(f.threads);
  const auto wall_start = std::chrono::steady_clock::now();
  KernelResults kernels = measure_kernels(*backend, f, extra, rank == 0);
  // Then rank 0 alone, the other ranks sleeping (an MPI wait would spin on their cores).
  std::optional<KernelResults> alone;
  if (runtime.world_size() > 1) {
    ParallelConfig everyone;
    everyone.dp = runtime.world_size();
    exec::ProcessGroups groups = exec::make_process_groups(runtime, everyone, false);
    float done = 0;
    if (rank == 0) {
      alone = measure_kernels(*backend, f, extra, true);
      for (int r = 1; r < runtime.world_size(); ++r) groups.world->isend(&done, 1, r, 0)->wait();
    } else {
      auto request = groups.world->irecv(&done, 1, 0, 0);
      while (!request->test()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  // A GPU's clock under sustained load (a CPU core's barely moves with one rank on it): every rank at once.
  const std::map<std::string, std::string> device = backend->device_provenance();  // empty off a GPU
  std::optional<exec::profile::SustainedRate> sustained;
  if (device.count("gpu") != 0) {
    ProgressBar bar("sustained GEMM", rank == 0);
    sustained = exec::profile::time_sustained_gemm(*backend, 8192, f.quick ? 2.0 : 15.0);
    bar.update(1, 1);
  }
  std::vector<exec::profile::CollectiveTiming> coll;
  const std::string not_measured = why_collectives_are_not_measured(f, runtime, *backend);
  if (not_measured.empty()) {
    ProgressBar bar("collectives", rank == 0);
    const std::int64_t max_bytes = f.quick ? std::min<std::int64_t>(f.max_bytes, 1 << 20) : f.max_bytes;
    coll = exec::profile::time_collectives(
        runtime, *backend, exec::profile::message_sizes(f.min_bytes, max_bytes, f.factor),
        f.quick ? 0.005 : f.collective_time_s, [&](std::size_t d, std::size_t t) { bar.update(d, t); },
        f.backend == "cuda");
  }
  // Rank 0's CPU time over its wall time: below 1 when other work on the host took its core.
  rusage self{};
  getrusage(RUSAGE_SELF, &self);
  const double cpu_s =
      self.ru_utime.tv_sec + self.ru_stime.tv_sec + 1e-6 * (self.ru_utime.tv_usec + self.ru_stime.tv_usec);
  const double cpu_share =
      cpu_s / (f.threads * std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count());
  if (rank != 0) return kExitOk;
  const double ab = static_cast<double>(exec::dtype_bytes(backend->compute_dtype()));
  for (KernelResults* k : {&kernels, alone ? &*alone : nullptr}) {
    if (k == nullptr) continue;
    for (const MemoryOpWorkload& w : memory_op_workloads(f.backend == "cuda", f.quick))
      exec::profile::add_softmax_points(*k, w.model, ab);
    if (extra) exec::profile::add_softmax_points(*k, *extra, ab);
  }
  const double optimizer_bytes = optimizer_bytes_per_param(backend->compute_dtype());
  exec::profile::MeasuredMachine machine{.kernels = &kernels,
                                         .alone = alone ? &*alone : nullptr,
                                         .collectives = &coll,
                                         .ranks = runtime.world_size(),
                                         .local_ranks = runtime.local_size(),
                                         .threads_per_rank = f.threads,
                                         .optimizer_bytes_per_param = optimizer_bytes};
  for (const auto& [op, weight] : layer_memory_op_weights()) machine.named_ops.push_back(op);
  // The first and last stages' ops, in the table by name but not in the memory-bound fit (their costs are not
  // per layer, and the loss on a CPU is bound by its exponentials, not its bytes).
  for (const char* op : {"embedding", "embedding_bwd", "cross_entropy", "cross_entropy_bwd"})
    machine.named_ops.push_back(op);
  if (device.count("gpu") != 0) {
    machine.gpu_name = device.at("gpu");
    machine.gpu_preset = exec::preset_for_device(machine.gpu_name);
    machine.gpu_memory_bytes = std::stod(device.at("gpu_memory_bytes"));
  }
  if (sustained) machine.sustained_slowdown = sustained->burst_flops_per_s / sustained->sustained_flops_per_s;
  ClusterSpec cluster;
  const Json file = cost_file(machine, f, cpu_share, *backend, device, sustained, cluster);
  write_output(f.out, file.dump(2) + "\n");
  write_output(
      "", f.format == "json" ? file.dump(2) + "\n" : tables(cluster, kernels, optimizer_bytes, coll, not_measured));
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
  app->add_option("--factor", flags->factor, "message size step (each size this many times the last)")
      ->check(CLI::Range(2, 1 << 10))
      ->capture_default_str();
  add_threads_option(*app, flags->threads, "threads per rank")->capture_default_str();
  app->add_option("--model", flags->model,
                  "also time this model's layers (preset name, JSON or Hugging Face config.json): its GEMMs at TP "
                  "1-8 and micro-batches 1-8 at its sequence length, its memory-bound ops, as the planner asks for "
                  "them (a GPU's cost file for that model)");
  app->add_flag("--quick", flags->quick, "seconds instead of minutes: fewer shapes, messages up to 1 MiB (CI)");
  return [flags] { return run_profile(*flags); };
}

}  // namespace

LOOM_REGISTER_COMMAND("profile", add_profile);

}  // namespace loom::cli
