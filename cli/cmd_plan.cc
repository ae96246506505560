// `loom plan`: every configuration that fits, ranked by simulated step time, with the memory
// breakdown per GPU; table, CSV, JSON or markdown; --explain for the rejected ones.
#include <memory>

#include <fmt/format.h>

#include "cli/command.h"
#include "cli/output.h"
#include "cli/spec_flags.h"
#include "core/json_io.h"
#include "exec/model/gpt_layout.h"
#include "planner/report.h"
#include "planner/search.h"

namespace loom::cli {
namespace {

struct PlanFlags {
  SpecFlags specs;
  ConfigFlags config;
  std::size_t top = 0;
  std::string format = "table";
  std::string out;
  bool explain = false;
  std::string emit_plan;
  int threads = 0;
};

int run_plan(const PlanFlags& f) {
  check(check_format(f.format, {"table", "csv", "json", "md"}));
  // One search per software stack named (`--framework a,b`), their plans ranked together.
  const std::vector<Specs> stacks = value_or_exit(resolve_specs_per_framework(f.specs.inputs));
  const Specs& specs = stacks.front();
  const SearchSpace space = f.config.search_space();
  PlanOptions options;
  options.threads = f.threads;
  options.top = f.top;
  ProgressBar bar(stacks.size() > 1 ? fmt::format("searching {} stacks", stacks.size()) : "searching");
  options.progress = [&bar](std::size_t done, std::size_t total) { bar.update(done, total); };
  const PlanResult result = value_or_exit(search_stacks(stacks, space, options));

  const ReportContext ctx = stacks_report_context(stacks);
  std::string text;
  if (f.format == "table")
    text = format_table(ctx, result, f.top);
  else if (f.format == "csv")
    text = format_csv(ctx, result, f.top);
  else if (f.format == "md")
    text = format_markdown(ctx, result, f.top);
  else
    text = format_json(specs.model, result, f.top).dump(2) + "\n";
  if (f.explain && f.format != "json") text += format_rejections(result, 3);

  if (!f.emit_plan.empty()) {
    if (result.plans.empty()) throw InputError("--emit-plan: no configuration fits, so there is no plan to write");
    const PlanRow& best = result.plans.front();
    const Specs& stack = stack_of(stacks, best);
    check(write_text_file_atomic(f.emit_plan, plan_file_text(stack, best)));
    // The planner ranks what the executor does not run yet (FP8): the plan
    // is written all the same, and `loom run --plan` would refuse it in one line. Said here, where the search
    // can still be restricted.
    if (Status runnable = exec::check_runnable(stack.model, stack.training, best.config); !runnable)
      fmt::print(stderr,
                 "loom: note: {} holds a plan loom run cannot run yet ({}); restrict the search (--precision) for "
                 "one it runs\n",
                 f.emit_plan, runnable.error().message);
  }
  write_output(f.out, text);
  // Nothing fits is an answer, not an error (DESIGN.md): the table's `#` lines and the JSON's rejections
  // say why, and exit 0 leaves exit 1 to Loom's own failures.
  if (result.plans.empty())
    fmt::print(stderr, "loom: no configuration of {} on {} GPUs fits in {:.0f} GiB (see --explain)\n", specs.model.name,
               specs.training.gpus, specs.cluster.gpu_memory_gib());
  return kExitOk;
}

std::function<int()> add_plan(CLI::App& root) {
  auto flags = std::make_shared<PlanFlags>();
  CLI::App* app = root.add_subcommand("plan", "rank every parallel configuration that fits, by simulated step time");
  flags->specs.add_to(*app, "", "dgx-a100-80gb", true);
  flags->config.add_to(*app, true);
  app->add_option("--top", flags->top,
                  "show the K fastest, simulating only configurations that could be among them (default: all that fit, "
                  "all simulated)")
      // A size_t: "-1" wrapped round to "all" before.
      ->check(CLI::Validator(
          [](const std::string& v) {
            return v.find('-') != std::string::npos ? v + " must be at least 0 (0: all)" : std::string();
          },
          ""));
  add_output_flags(*app, flags->format, flags->out, "table, csv, json or md");
  app->add_flag("--explain", flags->explain, "list rejected configurations grouped by reason");
  app->add_option("--emit-plan", flags->emit_plan, "write the fastest configuration as a plan file for `loom run`");
  add_threads_option(*app, flags->threads, "simulation threads (default: all hardware threads)");
  return [flags] { return run_plan(*flags); };
}

}  // namespace

LOOM_REGISTER_COMMAND("plan", add_plan);

}  // namespace loom::cli
