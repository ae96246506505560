// The `loom` binary: parses the command line, dispatches to the chosen subcommand and turns bad
// input into one clear line on stderr with exit status 2, and Loom's own failures into exit 1.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/command.h"
#include "cli/version.h"
#include "core/presets.h"

namespace loom::cli {

namespace {
std::vector<RegisteredCommand>& mutable_commands() {
  static std::vector<RegisteredCommand> commands;
  return commands;
}
}  // namespace

CommandRegistration::CommandRegistration(const char* name, CommandFactory factory) {
  mutable_commands().push_back({name, std::move(factory)});
}

const std::vector<RegisteredCommand>& registered_commands() { return mutable_commands(); }

}  // namespace loom::cli

int main(int argc, char** argv) {
  using namespace loom::cli;
  CLI::App app{"Loom: plan, simulate and run parallel training of large transformers"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_string());
  app.failure_message(CLI::FailureMessage::simple);

  auto commands = registered_commands();
  std::sort(commands.begin(), commands.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  std::vector<std::pair<CLI::App*, std::function<int()>>> runners;
  for (const auto& command : commands) {
    auto run = command.factory(app);
    runners.emplace_back(app.get_subcommand(command.name), std::move(run));
  }
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> names;
    for (const auto& command : commands) names.push_back(command.name);
    const std::string given = argv[1];
    if (std::find(names.begin(), names.end(), given) == names.end()) {
      const std::string hint = loom::nearest_name(given, names);
      std::fprintf(stderr, "loom: unknown command '%s' (%s)\n", given.c_str(),
                   hint.empty() ? fmt::format("commands: {}", fmt::join(names, ", ")).c_str()
                                : fmt::format("did you mean '{}'?", hint).c_str());
      return kExitBadInput;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "loom: %s\n", e.what());
    return kExitBadInput;
  }
  try {
    for (auto& [sub, run] : runners)
      if (sub->parsed()) return run();
  } catch (const InputError& e) {
    std::fprintf(stderr, "loom: %s\n", e.what());
    return kExitBadInput;
  } catch (const std::exception& e) {  // InternalError, or anything a library threw
    std::fprintf(stderr, "loom: internal error (a bug in Loom; please report it with the command line): %s\n",
                 e.what());
    return kExitFailure;
  }
  return kExitBadInput;
}
