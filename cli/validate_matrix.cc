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

namespace {
MatrixConfig make(std::string name, int tp, int pp, int dp, int zero, int micro_batch,
                  Schedule schedule = Schedule::k1F1B, Recompute recompute = Recompute::kNone) {
  MatrixConfig c;
  c.name = std::move(name);
  c.config.tp = tp;
  c.config.pp = pp;
  c.config.dp = dp;
  c.config.zero = zero;
  c.config.micro_batch = micro_batch;
  c.config.schedule = schedule;
  c.config.recompute = recompute;
  c.global_batch = 8;  // 1280 tokens a step: ~0.5 s on one core for this model
  return c;
}
}  // namespace

std::vector<MatrixConfig> validation_matrix() {
  return {make("single", 1, 1, 1, 0, 8),
          make("dp2-zero0", 1, 1, 2, 0, 4),
          make("dp2-zero1", 1, 1, 2, 1, 4),
          make("dp2-zero2", 1, 1, 2, 2, 4),
          make("dp2-zero3", 1, 1, 2, 3, 4),
          make("tp2", 2, 1, 1, 0, 8),
          make("pp2-gpipe-m4", 1, 2, 1, 0, 2, Schedule::kGPipe),
          make("pp2-gpipe-m8", 1, 2, 1, 0, 1, Schedule::kGPipe),
          make("pp2-1f1b-m4", 1, 2, 1, 0, 2, Schedule::k1F1B),
          make("pp2-1f1b-m8", 1, 2, 1, 0, 1, Schedule::k1F1B),
          make("full-recompute", 1, 1, 1, 0, 8, Schedule::k1F1B, Recompute::kFull),
          make("grad-accum-4", 1, 1, 1, 0, 2),
          make("dp2-grad-accum-2", 1, 1, 2, 1, 2)};
}

TrainingSpec executor_training(const ModelSpec& model, const MatrixConfig& c) {
  TrainingSpec t;
  t.gpus = c.ranks();
  t.global_batch = c.global_batch;
  t.seq_len = model.seq_len;
  use_fp32_precision(t);
  t.attention = AttentionKernel::kUnfused;
  t.overlap_grad_reduce = true;  // exec/parallel/data_parallel.h: buckets launched during the backward
  return t;
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

std::string model_path(const MatrixOptions& o) { return o.work_dir + "/model.json"; }
std::string tokens_path(const MatrixOptions& o) { return o.work_dir + "/tokens.bin"; }

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
  return fmt::format(
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -k 5 {} {} --oversubscribe -np {} {} run "
      "--model {} --cluster local-cpu --gpus {} --data {} --global-batch {} --tp {} --pp {} --dp {} --zero {} "
      "--micro-batch {} --schedule {} --recompute {} --steps {} --threads {} --log {}",
      o.timeout_s, o.mpirun, c.ranks(), o.loom_binary, model_path(o), c.ranks(), tokens_path(o), c.global_batch, p.tp,
      p.pp, p.dp, p.zero, p.micro_batch, to_string(p.schedule), to_string(p.recompute), o.steps, o.threads_per_rank,
      log);
}

}  // namespace

Status prepare_matrix_inputs(const MatrixOptions& o) {
  std::error_code ec;
  std::filesystem::create_directories(o.work_dir, ec);
  if (ec) return make_error(fmt::format("validate: cannot create work directory '{}': {}", o.work_dir, ec.message()));
  const ModelSpec model = validation_model();
  if (Status s = write_text_file_atomic(model_path(o), to_json(model).dump(2) + "\n"); !s) return s;
  // Deterministic byte-level tokens (a linear congruential stream over printable ASCII): the
  // step time does not depend on what the tokens say, only that every step reads fresh ones.
  const std::int64_t needed = static_cast<std::int64_t>(o.steps + 1) * 16 * (model.seq_len + 1);
  std::vector<std::uint16_t> tokens(static_cast<std::size_t>(needed));
  std::uint64_t state = 2024;
  for (auto& t : tokens) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    t = static_cast<std::uint16_t>(32 + (state >> 33) % 95);
  }
  return exec::write_token_file(tokens_path(o), tokens);
}

Result<MatrixRow> run_matrix_config(const MatrixConfig& c, const ClusterSpec& cluster, const MatrixOptions& o) {
  MatrixRow row;
  row.config = c;
  const ModelSpec model = validation_model();
  const TrainingSpec training = executor_training(model, c);
  auto sim = sim::simulate(model, training, c.config, cluster);
  if (!sim) return prefix_error(c.name + ": simulator: ", sim.error());
  row.predicted_step_time_s = sim->step_time_s;
  const MemoryReport memory = estimate_memory(model, training, c.config, cluster);

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
    // The executor has no framework reserve; the estimate's total (its workspace included) is what
    // its tensors hold.
    m.predicted_gib = bytes_to_gib(memory.stages[static_cast<std::size_t>(stage)].total_bytes());
    row.predicted_peak_memory_gib = std::max(row.predicted_peak_memory_gib, m.predicted_gib);
    row.measured_peak_memory_gib = std::max(row.measured_peak_memory_gib, m.measured_gib);
    row.ranks.push_back(m);
  }
  const unsigned cores = thread_count(0);
  row.oversubscribed = static_cast<unsigned>(c.ranks() * o.threads_per_rank) > cores;
  return row;
}

}  // namespace loom::cli
