// The on-machine validation matrix: the simulator's prediction (sim::simulate + the planner's
// memory model, fed the measured cost file) against `loom run` executed as a real mpirun
// subprocess, reading the median step time after warm-up and every rank's peaks from its JSONL log.
#include "cli/validate_matrix.h"

#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "core/json_io.h"
#include "core/parallel_for.h"
#include "core/presets.h"
#include "core/stats.h"
#include "core/units.h"
#include "exec/data_loader.h"
#include "planner/memory_model.h"
#include "sim/simulator.h"

namespace loom::cli {

ModelSpec validation_model() {
  ModelSpec m;
  m.name = "gpt-validate";
  m.layers = 4;  // divisible by PP 2
  m.hidden = 192;
  m.heads = 6;  // head_dim 32; divisible by TP 2
  m.kv_heads = 6;
  m.ffn_hidden = 768;  // 4·hidden, as GPT
  m.vocab = 256;       // byte-level, as `loom data prepare` writes
  m.seq_len = 160;
  m.dropout = false;  // the executor's layouts compute the same losses without dropout masks
  return m;
}

const char* to_string(MatrixBackend b) { return b == MatrixBackend::kCuda ? "cuda" : "cpu"; }

namespace {

// GPT-2 shapes (Radford et al. 2019, Table 2: 12/24 layers of 768/1024; vocabulary 50257, context
// 1024) and the GPT-3 paper's 1.3B (Brown et al. 2020, Table 2.1: 24 layers, 2048 wide, 16 heads,
// context 2048), trained with dropout as they were; Llama 3.2 1B's layers (16 × 2048, 32 query and 8
// key/value heads, SwiGLU 8192; its config.json) with Llama 2's 32,000-token vocabulary: a token file
// holds 16-bit ids, and 128,256 do not fit.
ModelSpec gpt_model(std::string name, int layers, int hidden, int heads, int seq) {
  return gpt_shape(std::move(name), layers, hidden, heads, 50257, seq);
}
ModelSpec llama_model() { return llama_shape("llama-1b", 16, 2048, 32, 8, 8192, 32000, 2048); }

MatrixConfig make(std::string name, int tp, int pp, int dp, int zero, int micro_batch,
                  Schedule schedule = Schedule::k1F1B, Recompute recompute = Recompute::kNone,
                  AttentionKernel attention = AttentionKernel::kUnfused) {
  MatrixConfig c;
  c.name = std::move(name);
  c.config.tp = tp;
  c.config.pp = pp;
  c.config.dp = dp;
  c.config.zero = zero;
  c.config.micro_batch = micro_batch;
  c.config.schedule = schedule;
  c.config.recompute = recompute;
  c.attention = attention;
  c.global_batch = 8;  // 1280 tokens a step: ~0.5 s on one core for this model
  c.seq_len = validation_model().seq_len;
  return c;
}

// One GPU configuration: `model` at `seq` (0: its own), `global_batch` sequences a step in micro-batches
// of `micro_batch` on tp·pp·dp GPUs.
MatrixConfig gpu(std::string name, std::string model, int seq, std::int64_t global_batch, int micro_batch,
                 Recompute recompute = Recompute::kNone, int tp = 1, int pp = 1, int dp = 1, int zero = 0,
                 AttentionKernel attention = AttentionKernel::kUnfused) {
  MatrixConfig c = make(std::move(name), tp, pp, dp, zero, micro_batch, Schedule::k1F1B, recompute, attention);
  c.seq_len = seq > 0 ? seq : matrix_model(MatrixBackend::kCuda, model).seq_len;
  c.model = std::move(model);
  c.global_batch = global_batch;
  c.config.sequence_parallel = tp > 1;
  return c;
}

}  // namespace

std::vector<ModelSpec> matrix_models(MatrixBackend backend) {
  if (backend == MatrixBackend::kCpu) return {validation_model()};
  return {gpt_model("gpt2-small", 12, 768, 12, 1024), gpt_model("gpt-350m", 24, 1024, 16, 1024),
          gpt_model("gpt-1.3b", 24, 2048, 16, 2048), llama_model()};
}

ModelSpec matrix_model(MatrixBackend backend, const std::string& name) {
  for (ModelSpec& m : matrix_models(backend))
    if (m.name == name) return m;
  throw std::logic_error("validation matrix: no model named " + name);
}

std::vector<MatrixConfig> validation_matrix(MatrixBackend backend) {
  if (backend == MatrixBackend::kCuda) {
    const Recompute sel = Recompute::kSelective, full = Recompute::kFull;
    const AttentionKernel flash = AttentionKernel::kFlash;
    return {// Model size, micro-batch and gradient accumulation at each model's own sequence length.
            gpu("small-mb8", "gpt2-small", 0, 16, 8), gpu("small-mb2-accum8", "gpt2-small", 0, 16, 2),
            gpu("small-seq512-mb16", "gpt2-small", 512, 32, 16), gpu("small-selective", "gpt2-small", 0, 16, 8, sel),
            gpu("small-full", "gpt2-small", 0, 16, 8, full), gpu("350m-mb4", "gpt-350m", 0, 16, 4),
            gpu("350m-full-mb16", "gpt-350m", 0, 16, 16, full), gpu("1.3b-mb2", "gpt-1.3b", 0, 8, 2),
            gpu("1.3b-mb1-accum8", "gpt-1.3b", 0, 8, 1), gpu("1.3b-selective-mb4", "gpt-1.3b", 0, 8, 4, sel),
            gpu("1.3b-full-mb8", "gpt-1.3b", 0, 8, 8, full), gpu("1.3b-seq1024-mb4", "gpt-1.3b", 1024, 16, 4),
            gpu("llama1b-mb2", "llama-1b", 0, 8, 2), gpu("llama1b-selective-mb4", "llama-1b", 0, 8, 4, sel),
            // Flash attention (kernels/flash_attention.cu): no probabilities kept, so larger micro-batches fit.
            gpu("small-flash-mb8", "gpt2-small", 0, 16, 8, Recompute::kNone, 1, 1, 1, 0, flash),
            gpu("1.3b-flash-mb4", "gpt-1.3b", 0, 8, 4, Recompute::kNone, 1, 1, 1, 0, flash),
            gpu("llama1b-flash-mb8", "llama-1b", 0, 8, 8, Recompute::kNone, 1, 1, 1, 0, flash),
            // torchtitan's op-level SAC (wk, wo and w3 re-run), which runs flash attention.
            gpu("llama1b-op-mb8", "llama-1b", 0, 8, 8, Recompute::kOp, 1, 1, 1, 0, flash),
            // Two GPUs, one rank each (NCCL): run where the machine has them.
            gpu("350m-dp2-zero1", "gpt-350m", 0, 16, 4, Recompute::kNone, 1, 1, 2, 1),
            gpu("350m-tp2-sp", "gpt-350m", 0, 16, 4, Recompute::kNone, 2),
            gpu("1.3b-pp2-1f1b-m16", "gpt-1.3b", 0, 16, 1, Recompute::kNone, 1, 2),
            gpu("1.3b-dp2-zero3", "gpt-1.3b", 0, 8, 2, Recompute::kNone, 1, 1, 2, 3)};
  }
  return {
      make("single", 1, 1, 1, 0, 8),
      make("dp2-zero0", 1, 1, 2, 0, 4),
      make("dp2-zero1", 1, 1, 2, 1, 4),
      make("dp2-zero2", 1, 1, 2, 2, 4),
      make("dp2-zero3", 1, 1, 2, 3, 4),
      make("tp2", 2, 1, 1, 0, 8),
      make("pp2-gpipe-m4", 1, 2, 1, 0, 2, Schedule::kGPipe),
      make("pp2-gpipe-m8", 1, 2, 1, 0, 1, Schedule::kGPipe),
      make("pp2-1f1b-m4", 1, 2, 1, 0, 2, Schedule::k1F1B),
      make("pp2-1f1b-m8", 1, 2, 1, 0, 1, Schedule::k1F1B),
      make("pp2-zb-m8", 1, 2, 1, 0, 1, Schedule::kZeroBubble),
      make("full-recompute", 1, 1, 1, 0, 8, Schedule::k1F1B, Recompute::kFull),
      // torchtitan's op-level SAC (flash attention; this GPT's biased linears all re-run).
      make("op-recompute", 1, 1, 1, 0, 8, Schedule::k1F1B, Recompute::kOp, AttentionKernel::kFlash),
      make("grad-accum-4", 1, 1, 1, 0, 2),
      make("dp2-grad-accum-2", 1, 1, 2, 1, 2),
  };
}

TrainingSpec executor_training(const MatrixConfig& c, MatrixBackend backend) {
  TrainingSpec t;
  t.gpus = c.ranks();
  t.global_batch = c.global_batch;
  t.seq_len = c.seq_len;
  if (backend == MatrixBackend::kCpu) {
    use_fp32_precision(t);
  } else {
    t.grad_bytes = 4;  // fp32 main gradients (exec/README.md, "The CUDA backend")
  }
  t.attention = c.attention;
  t.overlap_grad_reduce = true;  // exec/parallel/data_parallel.h: buckets launched during the backward
  // exec/parallel/tensor_parallel.cc waits for each TP all-reduce / reduce-scatter before going on.
  t.tp_comm_overlap = false;
  return t;
}

double MatrixPrediction::peak_gib() const {
  return stage_gib.empty() ? 0.0 : *std::max_element(stage_gib.begin(), stage_gib.end());
}

Result<MatrixPrediction> predict_matrix_config(const MatrixConfig& c, const ClusterSpec& cluster,
                                               MatrixBackend backend) {
  const ModelSpec model = matrix_model(backend, c.model);
  const TrainingSpec training = executor_training(c, backend);
  auto sim = sim::simulate(model, training, c.config, cluster);
  if (!sim) return prefix_error(c.name + ": simulator: ", sim.error());
  MatrixPrediction p;
  p.step_time_s = sim->step_time_s;
  // The executor counts its own tensors, not the CUDA context or the libraries' handles: the estimate's
  // total less the cost file's framework reserve (its workspace kept).
  const MemoryReport memory = estimate_memory(model, training, c.config, cluster);
  for (const StageMemory& s : memory.stages)
    p.stage_gib.push_back(bytes_to_gib(s.total_bytes() - cluster.framework_reserve_bytes));
  p.fits = memory.fits;
  return p;
}

double MatrixRow::memory_error() const {
  double worst = 0;
  for (const auto& r : ranks)
    if (r.measured_gib > 0) worst = std::max(worst, std::abs(r.predicted_gib / r.measured_gib - 1.0));
  return worst;
}

namespace {
double children_cpu_s() {
  rusage u{};
  getrusage(RUSAGE_CHILDREN, &u);  // every waited-for descendant: mpirun, its daemon, the ranks
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}
}  // namespace

namespace {

// The CPU matrix's one model keeps the names bench/validate/run_matrix.sh reads.
std::string model_path(const MatrixOptions& o, const std::string& model) {
  return o.backend == MatrixBackend::kCpu ? o.work_dir + "/model.json"
                                          : fmt::format("{}/model-{}.json", o.work_dir, model);
}
std::string tokens_path(const MatrixOptions& o, const std::string& model) {
  return o.backend == MatrixBackend::kCpu ? o.work_dir + "/tokens.bin"
                                          : fmt::format("{}/tokens-{}.bin", o.work_dir, model);
}

std::string read_last_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return last;
}

std::string run_command(const MatrixConfig& c, const MatrixOptions& o, const std::string& log) {
  const ParallelConfig& p = c.config;
  // mpirun even for one rank, so every configuration pays the same launcher and MPI start-up.
  std::string command = fmt::format(
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -k 5 {} {} --oversubscribe -np {} {} run "
      "--model {} --cluster {} --gpus {} --data {} --global-batch {} --tp {} --pp {} --dp {} --zero {} "
      "--micro-batch {} --schedule {} --recompute {} --attention {} --steps {} --log {}",
      o.timeout_s, o.mpirun, c.ranks(), o.loom_binary, model_path(o, c.model), o.run_cluster, c.ranks(),
      tokens_path(o, c.model), c.global_batch, p.tp, p.pp, p.dp, p.zero, p.micro_batch, to_string(p.schedule),
      to_string(p.recompute), to_string(c.attention), o.steps, log);
  if (o.backend == MatrixBackend::kCpu) return command + fmt::format(" --threads {}", o.threads_per_rank);
  return command + fmt::format(" --backend cuda --sp {} --seq {}", p.sequence_parallel ? "on" : "off", c.seq_len);
}

}  // namespace

Status prepare_matrix_inputs(const MatrixOptions& o, const std::vector<MatrixConfig>& configs) {
  std::error_code ec;
  std::filesystem::create_directories(o.work_dir, ec);
  if (ec) return make_error(fmt::format("validate: cannot create work directory '{}': {}", o.work_dir, ec.message()));
  for (const ModelSpec& model : matrix_models(o.backend)) {
    // Enough tokens for every step of the largest batch any configuration trains this model on.
    std::int64_t tokens_per_step = 0;
    for (const MatrixConfig& c : configs)
      if (c.model == model.name) tokens_per_step = std::max(tokens_per_step, c.global_batch * (c.seq_len + 1));
    if (tokens_per_step == 0) continue;
    if (Status s = write_text_file_atomic(model_path(o, model.name), to_json(model).dump(2) + "\n"); !s) return s;
    // Deterministic tokens (a linear congruential stream; printable ASCII for the byte-level CPU model,
    // the whole vocabulary otherwise): the step time does not depend on what the tokens say, only that
    // every step reads fresh ones.
    const std::int64_t needed =
        static_cast<std::int64_t>(o.steps + 1) * std::max<std::int64_t>(tokens_per_step, 16 * (model.seq_len + 1));
    std::vector<std::uint16_t> tokens(static_cast<std::size_t>(needed));
    std::uint64_t state = 2024;
    for (auto& t : tokens) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      t = static_cast<std::uint16_t>(o.backend == MatrixBackend::kCpu
                                         ? 32 + (state >> 33) % 95
                                         : (state >> 33) % static_cast<std::uint64_t>(model.vocab));
    }
    if (Status s = exec::write_token_file(tokens_path(o, model.name), tokens); !s) return s;
  }
  return {};
}

Result<MatrixRow> run_matrix_config(const MatrixConfig& c, const ClusterSpec& cluster, const MatrixOptions& o) {
  MatrixRow row;
  row.config = c;
  auto prediction = predict_matrix_config(c, cluster, o.backend);
  if (!prediction) return prediction.error();
  row.predicted_step_time_s = prediction->step_time_s;

  const std::string log = fmt::format("{}/{}.jsonl", o.work_dir, c.name);
  const std::string err = fmt::format("{}/{}.stderr", o.work_dir, c.name);
  std::filesystem::remove(log);
  const std::string command = run_command(c, o, log) + fmt::format(" > {}/{}.stdout 2> {}", o.work_dir, c.name, err);
  const double cpu_before = children_cpu_s();
  const auto wall_start = std::chrono::steady_clock::now();
  const int status = std::system(command.c_str());
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  row.cpu_share = (children_cpu_s() - cpu_before) / (wall_s * c.ranks() * o.threads_per_rank);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code != 0) return make_error(fmt::format("{}: loom run exited with {}: {}", c.name, code, read_last_line(err)));

  std::ifstream in(log);
  std::string line;
  Json peaks;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto record = parse_json(line, log);
    if (!record) return record.error();
    if (record->contains("event") && (*record)["event"] == "memory_peaks")
      peaks = *record;
    else if ((*record)["step"].get<int>() > o.warmup_steps)
      row.measured_step_times_s.push_back((*record)["step_time_s"].get<double>());
  }
  if (row.measured_step_times_s.empty() || peaks.is_null())
    return make_error(fmt::format("{}: {} has no steps after warm-up or no memory peaks", c.name, log));
  row.measured_step_time_s = median(row.measured_step_times_s);

  for (const Json& r : peaks["ranks"]) {
    RankMemory m;
    m.rank = r["rank"].get<int>();
    m.measured_gib = r["memory_peak_gib"]["total"].get<double>();
    const int stage = rank_coords(c.config, m.rank).pp_rank;
    m.predicted_gib = prediction->stage_gib[static_cast<std::size_t>(stage)];
    row.predicted_peak_memory_gib = std::max(row.predicted_peak_memory_gib, m.predicted_gib);
    row.measured_peak_memory_gib = std::max(row.measured_peak_memory_gib, m.measured_gib);
    row.ranks.push_back(m);
  }
  // On a GPU the matrix runs a configuration only where every rank has a GPU of its own.
  const unsigned cores = thread_count(0);
  row.oversubscribed =
      o.backend == MatrixBackend::kCpu && static_cast<unsigned>(c.ranks() * o.threads_per_rank) > cores;
  return row;
}

}  // namespace loom::cli
