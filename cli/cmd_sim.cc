// `loom sim`: one configuration in detail — step time, throughput, MFU, bubble, exposed
// communication by kind, memory per stage, the critical path — and a Perfetto trace.
#include <memory>

#include <fmt/format.h>

#include "cli/command.h"
#include "cli/output.h"
#include "cli/spec_flags.h"
#include "core/json_io.h"
#include "core/units.h"
#include "planner/enumerate.h"
#include "planner/memory_model.h"
#include "planner/report.h"
#include "planner/search.h"
#include "sim/simulator.h"
#include "sim/trace.h"

namespace loom::cli {
namespace {

struct SimFlags {
  SpecFlags specs;
  ConfigFlags config;
  std::string trace;
  std::string format = "table";
  std::string out;
};

// The critical path folded into runs of consecutive ops on one stage.
std::string critical_path_text(const sim::SimResult& r) {
  std::string out;
  std::size_t i = 0;
  while (i < r.critical_path.size()) {
    std::size_t j = i;
    double seconds = 0;
    while (j < r.critical_path.size() && r.critical_path[j].stage == r.critical_path[i].stage) {
      seconds += r.critical_path[j].contribution_s;
      ++j;
    }
    const auto& first = r.critical_path[i];
    const auto& last = r.critical_path[j - 1];
    out += fmt::format("  stage {:>3}  {:>9.3f} s  {}{}  ({} ops)\n", first.stage, seconds, first.name,
                       j - i > 1 ? " .. " + last.name : "", j - i);
    i = j;
  }
  return out;
}

std::string table_text(const Specs& specs, const ParallelConfig& c, const sim::SimResult& r, const MemoryReport& mem) {
  std::string t;
  t += fmt::format("# {} on {} x {} ({}), global batch {} x {} tokens, {} micro-batches per pipeline\n",
                   specs.model.name, specs.training.gpus, specs.cluster.device.name, specs.cluster.name,
                   specs.training.global_batch, specs.training.seq_len, r.micro_batches);
  t += fmt::format("# config: {}{}\n", describe(c),
                   specs.training.precision == Precision::kFp8
                       ? fmt::format(", FP8 linear layers ({} scaling)", to_string(specs.training.fp8_recipe))
                       : "");
  if (!specs.training.framework.empty())
    t += fmt::format("# framework: {} (`loom frameworks` lists its behaviours and their sources)\n",
                     specs.training.framework);
  if (!specs.model.checkpoint_note.empty()) t += fmt::format("# checkpoint: {}\n", specs.model.checkpoint_note);
  t += fmt::format("step time            {:.4f} s\n", r.step_time_s);
  t += fmt::format("tokens/s             {:.0f}\n", r.tokens_per_s);
  t += fmt::format("TFLOP/s per GPU      {:.1f} model, {:.1f} hardware (with recompute)\n", r.tflops_per_gpu,
                   r.hw_tflops_per_gpu);
  t += fmt::format("MFU                  {:.1f} %\n", 100.0 * r.mfu);
  t += fmt::format("bubble               {:.1f} % of the step\n", 100.0 * r.bubble_fraction);
  if (r.jitter_s > 0)
    t += fmt::format(
        "stragglers           {:.4f} s  (of the step: waits for the slowest ranks, --kernel-cv {:g}, "
        "--gpu-cv {:g})\n",
        r.jitter_s, specs.training.kernel_cv, specs.training.gpu_cv);
  t += fmt::format("exposed comm         {:.4f} s  (TP {:.4f}, PP {:.4f}, DP {:.4f}{}{})\n", r.exposed.total(),
                   r.exposed.tp_s, r.exposed.pp_s, r.exposed.dp_s,
                   c.cp > 1 ? fmt::format(", CP {:.4f}", r.exposed.cp_s) : std::string(),
                   c.ep > 1 ? fmt::format(", EP {:.4f}", r.exposed.ep_s) : std::string());
  t += fmt::format("memory per stage     (GiB; capacity {:.1f}; {})\n", bytes_to_gib(mem.capacity_bytes),
                   mem.fits ? "fits" : "DOES NOT FIT");
  t += fmt::format("  {:>5} {:>6} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>8}\n", "stage", "layers", "params", "grads",
                   "optim", "act", "buf", "total", "busy_s");
  for (const auto& s : mem.stages)
    t +=
        fmt::format("  {:>5} {:>6} {:>7.2f} {:>7.2f} {:>7.2f} {:>7.2f} {:>7.2f} {:>7.2f} {:>8.3f}\n", s.stage, s.layers,
                    bytes_to_gib(s.params_bytes), bytes_to_gib(s.grads_bytes), bytes_to_gib(s.optimizer_bytes),
                    bytes_to_gib(s.activations_bytes), bytes_to_gib(s.buffers_bytes + s.reserve_bytes),
                    bytes_to_gib(s.total_bytes()), r.stages[s.stage].busy_s);
  t += "what limits this plan: " + r.limited_by + "\n";
  t += "critical path:\n" + critical_path_text(r);
  return t;
}

int run_sim(const SimFlags& f) {
  check(check_format(f.format, {"table", "json"}));
  const Specs specs = f.specs.resolve();
  const ParallelConfig config = f.config.single(specs.training.gpus);
  // How far ZeRO-3's gathers prefetch means nothing to a layout without them (`plan` applies it to its
  // ZeRO-3 rows; one configuration says what it runs, as --cp-comm at cp 1 does).
  if (f.specs.inputs.zero3_prefetch >= 0 && config.zero < 3)
    throw InputError(fmt::format("--zero3-prefetch: applies to --zero 3 only (zero is {})", config.zero));
  check(check_config(specs.model, specs.training, specs.cluster, config));
  const MemoryReport memory = estimate_memory(specs.model, specs.training, config, specs.cluster);

  // One configuration: keep the graph, so the critical path is named in the table and JSON too.
  const sim::SimOptions options = detailed_sim_options(memory, config);
  const sim::SimResult result =
      value_or_exit(sim::simulate(specs.model, specs.training, config, specs.cluster, options));

  if (!f.trace.empty())
    write_output(f.trace, sim::chrome_trace_json(result, specs.model.name + " " + describe(config)));

  if (f.format == "json") {
    Json j = {{"model", model_summary_json(specs.model)}};
    j.update(plan_row_json(plan_row(result, memory, specs.training), 1));
    j.erase("rank");
    Json stages = Json::array();
    for (const auto& s : memory.stages)
      stages.push_back({{"stage", s.stage},
                        {"layers", s.layers},
                        {"params", bytes_to_gib(s.params_bytes)},
                        {"grads", bytes_to_gib(s.grads_bytes)},
                        {"optimizer", bytes_to_gib(s.optimizer_bytes)},
                        {"activations", bytes_to_gib(s.activations_bytes)},
                        {"buffers", bytes_to_gib(s.buffers_bytes + s.reserve_bytes)},
                        {"total", bytes_to_gib(s.total_bytes())},
                        {"busy_s", result.stages[s.stage].busy_s}});
    j["memory_per_stage_gib"] = stages;
    Json path = Json::array();
    for (const auto& step : result.critical_path)
      path.push_back({{"name", step.name},
                      {"stage", step.stage},
                      {"start_s", step.start_s},
                      {"contribution_s", step.contribution_s}});
    j["critical_path"] = path;
    write_output(f.out, j.dump(2) + "\n");
  } else {
    write_output(f.out, table_text(specs, config, result, memory));
  }
  return kExitOk;
}

std::function<int()> add_sim(CLI::App& root) {
  auto flags = std::make_shared<SimFlags>();
  CLI::App* app = root.add_subcommand("sim", "simulate one configuration in detail");
  flags->specs.add_to(*app, "", "dgx-a100-80gb", true);
  flags->config.add_to(*app, false);
  app->add_option("--trace", flags->trace, "write a Chrome/Perfetto trace of the step to FILE");
  add_output_flags(*app, flags->format, flags->out, "table or json");
  return [flags] { return run_sim(*flags); };
}

}  // namespace

LOOM_REGISTER_COMMAND("sim", add_sim);

}  // namespace loom::cli
