// `loom run`: execute a plan for real — launched as `mpirun -np N loom run --plan plan.json
// --data tokens.bin --steps S` (or `srun -n N loom run ...` under Slurm). Every rank validates the
// inputs on its own and the ranks agree on the verdict before any other collective, so bad input
// ends with one line from rank 0 and exit status 2 on every rank, never a hang.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "cli/command.h"
#include "cli/output.h"
#include "cli/spec_flags.h"
#include "core/json_io.h"
#include "exec/checkpoint.h"
#include "exec/comm_path.h"
#include "exec/cpu/bf16_emulation.h"
#include "exec/cpu/cpu_backend.h"
#include "exec/cuda/device_allocator.h"
#include "exec/model/gpt_layout.h"
#include "exec/run_report.h"
#include "exec/trainer.h"

namespace loom::cli {

namespace {

// A non-finite loss or gradient norm under --on-nan stop: neither bad input (2) nor an internal
// failure (1), so that a job script can tell a numerical blow-up apart.
constexpr int kExitNonFinite = 3;

struct RunOptions {
  std::string plan;
  SpecFlags spec;
  ConfigFlags config;
  std::vector<CLI::Option*> spec_and_config;  // what a plan file names: refused beside --plan
  std::string data;
  int steps = 0;
  std::string backend = "cpu";
  std::string comm;  // "direct" or "host-staged"; empty: the default exec::choose_comm_path picks
  std::string checkpoint_dir;
  int save_every = 0;
  int keep_checkpoints = 0;  // 0: keep all
  bool resume = false;
  std::string on_nan = "stop";
  double comm_timeout_s = 300;
  std::string log;
  std::string trace;
  int threads = 0;
  exec::OptimizerSettings optimizer;
  long long seed = 1234;
  float dropout = -1;
};

// Everything a rank needs to start, resolved and checked without talking to other ranks.
struct Resolved {
  exec::TrainerOptions trainer;
  std::unique_ptr<exec::Backend> backend;
  std::optional<exec::TokenFile> data;
  exec::CommPath comm = exec::CommPath::kDirect;
};

exec::CommRequest comm_request(const RunOptions& o, const exec::Runtime& runtime, int ranks_sharing_device) {
  return {o.comm, o.backend, runtime.world_size(), ranks_sharing_device, exec::has_nccl()};
}

// Parameters, gradients and Adam moments (fp32: 4 + 4 + 8 bytes, less under ZeRO) of this rank's
// share must fit in the memory the node has for each of its ranks; refusing here beats dying in
// the allocator halfway through start-up.
void check_model_states_fit(const exec::TrainerOptions& t, const exec::Runtime& runtime) {
  const RankCoords rc = rank_coords(t.config, runtime.world_rank());
  const exec::StageLayout layout = exec::make_rank_layout(t.model, t.config, rc.tp_rank, rc.pp_rank,
                                                          expert_coords(t.config, runtime.world_rank()).ep_rank)
                                       .combined;
  const double n = static_cast<double>(layout.total_padded()), dp = t.config.zero_shards();
  const double bytes = n * (4.0 / (t.config.zero >= 3 ? dp : 1.0) + 4.0 / (t.config.zero >= 2 ? dp : 1.0) +
                            8.0 / (t.config.zero >= 1 ? dp : 1.0));
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double available_kib = 0;
  while (meminfo >> key) {
    if (key == "MemAvailable:") {
      meminfo >> available_kib;
      break;
    }
    meminfo.ignore(256, '\n');
  }
  if (available_kib <= 0) return;  // not Linux: let the allocator decide
  const double per_rank = available_kib * 1024.0 / runtime.local_size();
  if (bytes > per_rank)
    throw InputError(
        fmt::format("{} under {} needs {:.1f} GiB per rank for parameters, gradients and optimizer "
                    "states, but this node has {:.1f} GiB available per rank",
                    t.model.name, describe(t.config), bytes / (1 << 30), per_rank / (1 << 30)));
}

std::string rank_path(const std::string& path, int rank, int world) {
  if (world == 1) return path;
  const auto dot = path.find_last_of('.');
  const auto slash = path.find_last_of('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash))
    return fmt::format("{}.rank{}", path, rank);
  return fmt::format("{}.rank{}{}", path.substr(0, dot), rank, path.substr(dot));
}

// A file the run writes (its --log, its --trace) must have a directory it can be written into before the
// first step trains, not be found wanting after the last: the trace is written once, at the end.
void check_writable(const char* flag, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw InputError(fmt::format("{}: '{}' is a directory, not a file", flag, path));
  const fs::path parent = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  if (!fs::is_directory(parent, ec))
    throw InputError(fmt::format("{}: cannot write '{}': no directory '{}'", flag, path, parent.string()));
  if (::access(parent.c_str(), W_OK) != 0)
    throw InputError(fmt::format("{}: cannot write '{}': directory '{}' is not writable", flag, path, parent.string()));
}

void resolve(RunOptions& o, const exec::Runtime& runtime, Resolved& r) {
  exec::TrainerOptions& t = r.trainer;
  if (!o.plan.empty()) {
    // Given beside a plan they were ignored without a word.
    for (const CLI::Option* option : o.spec_and_config)
      if (option->count() > 0)
        throw InputError(
            fmt::format("{}: the plan file names the model, the training and the layout; give --plan or "
                        "the spec and config flags, not both",
                        option->get_name()));
    const Json json = value_or_exit(read_json_file(o.plan));
    auto plan = plan_from_json(json);
    if (!plan) fail(prefix_error(o.plan + ": ", plan.error()));
    t.model = plan->model;
    t.training = plan->training;
    t.config = plan->config;
    if (t.training.seq_len == 0) t.training.seq_len = t.model.seq_len;
    t.attention = t.training.attention;  // the kernel the plan was scored with
  } else {
    if (o.spec.inputs.gpus == 0) o.spec.inputs.gpus = runtime.world_size();
    const bool batch_given = o.spec.inputs.global_batch > 0;
    if (!batch_given) o.spec.inputs.global_batch = 1;  // replaced below once the layout is known
    Specs specs = o.spec.resolve();
    t.model = specs.model;
    t.training = specs.training;
    t.config = o.config.single(static_cast<int>(o.spec.inputs.gpus));
    if (!batch_given)
      t.training.global_batch = static_cast<std::int64_t>(t.config.dp) * t.config.micro_batch * t.config.pp;
    // The executor's attention is unfused unless --attention (or a --framework) names a kernel, or context
    // parallelism or op-level recompute (which keeps the output and log-sum-exp) needs flash: the fused GPU
    // kernels are new.
    const bool named = !o.spec.inputs.attention.empty() || !o.spec.inputs.framework.empty() || t.config.cp > 1 ||
                       t.config.recompute == Recompute::kOp;
    t.attention = named ? t.training.attention : AttentionKernel::kUnfused;
    t.training.attention = t.attention;
  }
  const ParallelConfig& c = t.config;
  if (c.world_size() != runtime.world_size())
    throw InputError(fmt::format("the plan needs tp {}{} × pp {} × dp {} = {} ranks but {} were launched ({})", c.tp,
                                 c.cp > 1 ? fmt::format(" × cp {}", c.cp) : "", c.pp, c.dp, c.world_size(),
                                 runtime.world_size(),
                                 exec::Runtime::has_mpi() ? fmt::format("mpirun -np {}", c.world_size())
                                                          : std::string("this loom was built without MPI")));
  if (Status legal = exec::check_runnable(t.model, t.training, c); !legal)
    throw InputError(fmt::format("layout {}: {}", describe(c), legal.error().message));
  if (o.steps < 1) throw InputError(fmt::format("--steps: {} must be at least 1", o.steps));
  // The optimizer's settings as AdamW takes them (a NaN or negative learning rate trained on, silently).
  const auto in_range = [](const char* flag, double v, double lo, double hi, const char* what) {
    if (!(v >= lo && v <= hi)) throw InputError(fmt::format("{}: {:g} must be {}", flag, v, what));
  };
  const exec::OptimizerSettings& opt = o.optimizer;
  in_range("--lr", opt.learning_rate, 0, 1e3, "a learning rate from 0 to 1000");
  in_range("--min-lr-fraction", opt.min_lr_fraction, 0, 1, "a fraction of --lr from 0 to 1");
  in_range("--weight-decay", opt.weight_decay, 0, 1e3, "a weight decay from 0 to 1000");
  in_range("--grad-clip", opt.grad_clip, 0, 1e30, "a gradient norm, 0 for no clipping");
  if (opt.warmup_steps < 0) throw InputError(fmt::format("--warmup: {} must not be negative", opt.warmup_steps));
  if (opt.decay_steps < 0)
    throw InputError(fmt::format("--decay-steps: {} must not be negative (0: --steps)", opt.decay_steps));
  if (o.dropout != -1.0f) in_range("--dropout", o.dropout, 0, 0.999999, "a probability from 0, below 1");
  if (o.save_every < 0) throw InputError("--save-every must not be negative");
  if ((o.save_every > 0 || o.resume) && o.checkpoint_dir.empty())
    throw InputError("--save-every and --resume need --checkpoint-dir");
  if (o.keep_checkpoints < 0) throw InputError("--keep-checkpoints must not be negative (0 keeps all)");
  // Neither did anything alone, without a word: nothing was saved, and nothing pruned.
  if (o.keep_checkpoints > 0 && o.save_every == 0)
    throw InputError("--keep-checkpoints prunes after each save: it needs --save-every K");
  if (!o.checkpoint_dir.empty() && o.save_every == 0 && !o.resume)
    throw InputError(
        "--checkpoint-dir: nothing would be saved to it or resumed from it; add --save-every K or --resume");
  // Where saves go must be a directory before the first step trains, not found wanting at the first save.
  if (o.save_every > 0) {
    std::error_code ec;
    std::filesystem::create_directories(o.checkpoint_dir, ec);
    if (ec || !std::filesystem::is_directory(o.checkpoint_dir))
      throw InputError(fmt::format("--checkpoint-dir: '{}' is not a directory Loom can create or write into{}",
                                   o.checkpoint_dir, ec ? fmt::format(" ({})", ec.message()) : std::string()));
  }
  if (!o.log.empty() && runtime.world_rank() == 0) check_writable("--log", o.log);  // rank 0 writes it
  if (!o.trace.empty()) check_writable("--trace", rank_path(o.trace, runtime.world_rank(), runtime.world_size()));
  if (o.on_nan != "stop" && o.on_nan != "skip")
    throw InputError(fmt::format("--on-nan: '{}' is neither 'stop' nor 'skip'", o.on_nan));
  if (!(o.comm_timeout_s >= 0) || o.comm_timeout_s > 1e6)
    throw InputError(
        fmt::format("--comm-timeout: {} is not a number of seconds from 0 (off) to 1e6", o.comm_timeout_s));
  t.inject_nan = value_or_exit(exec::nan_injection_from_env(t.model, c));
  t.inject_hang = value_or_exit(exec::hang_injection_from_env(runtime.world_size()));
  check_model_states_fit(t, runtime);
  // What needs no device is checked before the backend starts (a bad --comm, direct on GPUs without NCCL
  // in the build); whether ranks share a GPU, once every rank's device is known (run_command).
  if (const auto path = exec::choose_comm_path(comm_request(o, runtime, 1)); !path)
    throw InputError(path.error().message);
  std::string backend_error;
  // cpu-bf16 emulates a bf16 GPU on the CPU for tests and rehearsal of mixed precision: a run option only.
  if (o.backend == "cpu-bf16")
    r.backend = std::make_unique<exec::CpuBf16Backend>();
  else
    r.backend = exec::make_backend(o.backend, &backend_error, {runtime.local_rank(), runtime.local_size()});
  if (!r.backend) throw InputError(backend_error);
  r.data.emplace(value_or_exit(exec::TokenFile::open(o.data, t.model.vocab, t.training.seq_len)));
  o.optimizer.decay_steps = o.optimizer.decay_steps > 0 ? o.optimizer.decay_steps : o.steps;
  t.optimizer = o.optimizer;
  t.seed = static_cast<std::uint64_t>(o.seed);
  t.dropout = o.dropout;
  if (o.resume) {
    const auto point = value_or_exit(exec::find_resumable_checkpoint(o.checkpoint_dir, exec::run_identity(t, *r.data)));
    if (!point.note.empty() && runtime.world_rank() == 0) std::fprintf(stderr, "loom: %s\n", point.note.c_str());
  }
}

int train(RunOptions& o, const exec::Runtime& runtime, Resolved& r) {
  const int rank = runtime.world_rank(), world = runtime.world_size();
  exec::ProcessGroups groups = exec::make_process_groups(runtime, r.trainer.config, r.trainer.model.tied_embeddings);
  if (r.comm == exec::CommPath::kHostStaged) exec::stage_through_host(groups);
  if (r.comm == exec::CommPath::kNccl) exec::communicate_over_nccl(groups);
  // Stopped (joined) when train returns, before the groups and MPI go away.
  const std::unique_ptr<exec::Watchdog> watchdog = runtime.start_watchdog(o.comm_timeout_s);
  exec::Tracer tracer(rank);
  tracer.set_enabled(!o.trace.empty());
  tracer.use_clock_of(r.backend.get());  // compute slices at the device's times, not when queued
  tracer.set_run_description(Json{{"model", to_json(r.trainer.model)},
                                  {"config", to_json(r.trainer.config)},
                                  {"gpus", world},
                                  {"global_batch", r.trainer.training.global_batch},
                                  {"seq_len", r.trainer.training.seq_len}}
                                 .dump());
  exec::Trainer trainer(r.trainer, groups, *r.backend, *r.data, &tracer);
  if (o.resume) {
    const Status s = trainer.load_checkpoint(o.checkpoint_dir);  // the same verdict on every rank
    if (!s) {
      if (rank == 0) std::fprintf(stderr, "loom: %s\n", s.error().message.c_str());
      return kExitBadInput;
    }
  }
  std::ofstream log;
  if (rank == 0 && !o.log.empty()) {
    log.open(o.log, o.resume ? std::ios::app : std::ios::trunc);
    if (!log) std::fprintf(stderr, "loom: cannot write --log '%s'; continuing without it\n", o.log.c_str());
  }
  if (rank == 0)
    fmt::print(
        "loom run: {} on {} rank(s), {} | global batch {} × seq {} | {} micro-batches | dropout {} | {} attention | "
        "backend {} ({}{}){}\n",
        r.trainer.model.name, world, describe(r.trainer.config), r.trainer.training.global_batch, trainer.seq(),
        trainer.micro_batches(), r.trainer.dropout_probability(), to_string(r.trainer.attention), r.backend->name(),
        r.backend->name() == "cuda" ? "cuBLASLt" : exec::cpu_gemm_library(),
        r.backend->device() >= 0 ? fmt::format(", rank 0 on device {}", r.backend->device()) : "",
        world > 1 && r.comm != exec::CommPath::kDirect ? " | " + exec::describe(r.comm) : "");
  // A finished run resumed again (a requeued job): nothing to train, said, and no empty memory record logged.
  if (trainer.completed_steps() >= o.steps) {
    if (rank == 0)
      fmt::print(stderr, "loom: the checkpoint is at step {}, --steps is {}: nothing left to train\n",
                 trainer.completed_steps(), o.steps);
    return kExitOk;
  }
  exec::StepMetrics last;
  // Beside the step lines only when those go to a file or a pipe.
  ProgressBar bar("training", rank == 0 && isatty(STDOUT_FILENO) == 0);
  while (trainer.completed_steps() < o.steps) {
    last = trainer.step();
    if (rank == 0) {
      fmt::print("{}\n", exec::step_line(last, o.steps));
      std::fflush(stdout);
      bar.update(static_cast<std::size_t>(last.step), static_cast<std::size_t>(o.steps),
                 fmt::format(" steps, {:.1f} s left", last.step_time_s * (o.steps - last.step)));
      Json record = exec::step_record(last);
      if (!last.nonfinite.empty()) {
        record["nonfinite"] = last.nonfinite;  // where the first NaN/Inf was (a non-finite loss logs as null)
        record["skipped"] = o.on_nan == "skip";
      }
      if (log) log << record.dump() << "\n" << std::flush;
    }
    if (!last.nonfinite.empty()) {  // every rank saw the same reduced loss and norm: all decide alike
      const std::string where =
          last.nonfinite == "loss" ? "in the loss" : fmt::format("in the gradient of {}", last.nonfinite);
      if (o.on_nan == "skip") {
        if (rank == 0) std::fprintf(stderr, "loom: step %d: NaN/Inf %s; update skipped\n", last.step, where.c_str());
      } else {
        if (rank == 0)
          std::fprintf(stderr, "loom: step %d: NaN/Inf %s; stopping (--on-nan stop)%s\n", last.step, where.c_str(),
                       o.checkpoint_dir.empty() ? "" : ", the last good checkpoint stays 'latest'");
        return kExitNonFinite;
      }
    }
    if (o.save_every > 0 && last.step % o.save_every == 0) {
      const Status s = trainer.save_checkpoint(o.checkpoint_dir);
      if (!s) {
        if (rank == 0) std::fprintf(stderr, "loom: %s\n", s.error().message.c_str());
        return kExitFailure;
      }
      if (rank == 0)
        for (const std::string& problem : exec::prune_checkpoints(o.checkpoint_dir, last.step, o.keep_checkpoints))
          std::fprintf(stderr, "loom: warning: %s\n", problem.c_str());
    }
  }
  // Every rank's peaks, gathered as a sum of rows each rank fills in its own.
  const int stride = exec::kMemoryCategories + 3;
  std::vector<double> peaks(static_cast<std::size_t>(world) * stride, 0.0);
  for (int c = 0; c < exec::kMemoryCategories; ++c) peaks[rank * stride + c] = static_cast<double>(last.peak_bytes[c]);
  peaks[rank * stride + exec::kMemoryCategories] = static_cast<double>(last.peak_total_bytes);
  peaks[rank * stride + exec::kMemoryCategories + 1] = last.moe_imbalance;
  peaks[rank * stride + exec::kMemoryCategories + 2] = last.moe_imbalance_min;
  runtime.sum_over_world(peaks.data(), static_cast<int>(peaks.size()));
  if (rank == 0 && log) log << exec::ranks_memory_record(peaks, world).dump() << "\n";
  if (!o.trace.empty()) {
    tracer.resolve();
    const Status s = write_text_file_atomic(rank_path(o.trace, rank, world), tracer.to_json());
    if (!s) std::fprintf(stderr, "loom: rank %d: %s\n", rank, s.error().message.c_str());
  }
  return kExitOk;
}

int run_command(RunOptions& o) {
  exec::Runtime runtime;
  const int threads = o.threads > 0
                          ? o.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / runtime.local_size());
  exec::set_cpu_threads(threads);
  Resolved resolved;
  std::string problem;
  try {
    resolve(o, runtime, resolved);
  } catch (const InputError& e) {
    problem = e.what();
  }
  const auto [failed, rank0_failed] = runtime.agree_on_failure(!problem.empty());
  if (failed > 0) {
    if (runtime.world_rank() == 0 && rank0_failed)
      std::fprintf(stderr, "loom: %s\n", problem.c_str());
    else if (runtime.world_rank() == 0)
      std::fprintf(stderr, "loom: %d rank(s) could not start (see their messages)\n", failed);
    else if (!rank0_failed && !problem.empty())
      std::fprintf(stderr, "loom: rank %d: %s\n", runtime.world_rank(), problem.c_str());
    return kExitBadInput;
  }
  // Every rank's GPU is known: the ranks driving one GPU are counted by its UUID (each rank may see the
  // node's GPUs under other indices, CUDA_VISIBLE_DEVICES), and the most anywhere decides for all alike
  // (NCCL needs a GPU per rank), so the verdict and rank 0's line are every rank's.
  const int sharing = runtime.ranks_sharing_a_device(resolved.backend->device_uuid());
  const auto path = exec::choose_comm_path(comm_request(o, runtime, sharing));
  if (!path) {
    if (runtime.world_rank() == 0) std::fprintf(stderr, "loom: %s\n", path.error().message.c_str());
    return kExitBadInput;
  }
  resolved.comm = *path;
  try {
    return train(o, runtime, resolved);
  } catch (const exec::DeviceOutOfMemory& e) {
    // The plan does not fit this GPU: bad input, said in one line, as when model states do not fit.
    std::fprintf(stderr, "loom: rank %d: %s\n", runtime.world_rank(), e.what());
    runtime.abort(kExitBadInput);
  } catch (const std::exception& e) {
    // Past validation every rank is inside collectives: one failing rank must end them all.
    std::fprintf(stderr, "loom: rank %d: internal error: %s\n", runtime.world_rank(), e.what());
    runtime.abort(kExitFailure);
  }
}

std::function<int()> add_run_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("run", "train a plan for real (launch with mpirun -np N or srun -n N)");
  auto o = std::make_shared<RunOptions>();
  cmd->add_option("--plan", o->plan,
                  "plan JSON written by `loom plan --emit-plan`: it names the model, the training and the layout, so "
                  "the spec and config flags below are for runs without one");
  o->spec_and_config = o->spec.add_to(*cmd, "gpt-tiny", "local-cpu", false);
  for (CLI::Option* option : o->config.add_to(*cmd, false)) o->spec_and_config.push_back(option);
  cmd->add_option("--data", o->data, "token file (.bin, llm.c format; see `loom data prepare`)")->required();
  cmd->add_option("--steps", o->steps, "optimizer steps to run (in total, when resuming)")->required();
  cmd->add_option("--backend", o->backend,
                  "cpu, cuda, or cpu-bf16 (bf16 mixed precision emulated on the CPU: tests and rehearsal)")
      ->capture_default_str();
  cmd->add_option("--comm", o->comm,
                  "direct (the communicator reads the backend's buffers: MPI on the CPU, NCCL with --backend cuda, "
                  "one rank per GPU) or host-staged (each message copied through host memory for MPI: several "
                  "ranks on one GPU); default for cuda NCCL when every rank has a GPU of its own and the build "
                  "has NCCL, else host-staged; direct for the CPU backends");
  cmd->add_option("--checkpoint-dir", o->checkpoint_dir, "where checkpoints are written and resumed from");
  cmd->add_option("--save-every", o->save_every, "save a checkpoint every K steps");
  cmd->add_option("--keep-checkpoints", o->keep_checkpoints,
                  "after each save, delete all but the K newest complete checkpoints (0: keep all)")
      ->capture_default_str();
  cmd->add_flag("--resume", o->resume, "continue from the newest checkpoint in --checkpoint-dir");
  cmd->add_option("--on-nan", o->on_nan,
                  "on a NaN/Inf loss or gradient norm: stop (exit 3, the last checkpoint stays latest) or skip "
                  "the step's update")
      ->capture_default_str();
  cmd->add_option("--comm-timeout", o->comm_timeout_s,
                  "seconds a collective or send may make no progress before the watchdog names the ranks that "
                  "did not arrive and ends the job with exit 4 (0: no watchdog)")
      ->capture_default_str();
  cmd->add_option("--log", o->log, "JSONL file, one object per step (rank 0)");
  cmd->add_option("--trace", o->trace, "Chrome trace per rank (FILE, or FILE.rankR.json with several ranks)");
  add_threads_option(*cmd, o->threads, "CPU threads per rank (default: cores / ranks on the node)");
  cmd->add_option("--lr", o->optimizer.learning_rate, "peak learning rate")->capture_default_str();
  cmd->add_option("--min-lr-fraction", o->optimizer.min_lr_fraction, "cosine floor as a fraction of --lr")
      ->capture_default_str();
  cmd->add_option("--warmup", o->optimizer.warmup_steps, "linear warm-up steps")->capture_default_str();
  cmd->add_option("--decay-steps", o->optimizer.decay_steps, "length of the cosine schedule (default: --steps)");
  cmd->add_option("--weight-decay", o->optimizer.weight_decay, "AdamW weight decay")->capture_default_str();
  cmd->add_option("--grad-clip", o->optimizer.grad_clip, "global gradient-norm clip (0: off)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "initialisation and dropout seed")->capture_default_str();
  cmd->add_option("--dropout", o->dropout,
                  "dropout probability (default: 0.1 if the model trains with dropout, else 0)");
  return [o] { return run_command(*o); };
}

}  // namespace

LOOM_REGISTER_COMMAND("run", add_run_command);

}  // namespace loom::cli
