// Subcommand registry for the `loom` binary: each cli/cmd_*.cc registers itself with
// LOOM_REGISTER_COMMAND, so adding a subcommand is adding a file.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>

#include <CLI/CLI.hpp>

#include "core/result.h"

namespace loom::cli {

// Thrown for bad input anywhere below main(); main prints the message on one line, exits 2.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Thrown for a failure that is Loom's own fault (an engine deadlock, a broken invariant); main
// says so, asks for a report, and exits 1.
struct InternalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The one way from an Error to the exit: throws InputError or InternalError by the error's kind.
[[noreturn]] inline void fail(const Error& error) {
  if (error.internal()) throw InternalError(error.message);
  throw InputError(error.message);
}

inline void check(const Status& status) {
  if (!status) fail(status.error());
}

template <typename T>
T value_or_exit(Result<T> result) {
  if (!result) fail(result.error());
  return std::move(result).value();
}

// Exit codes shared by every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;

// --threads on any subcommand: 0 (the default) means the machine's, and a count is at most 65,536 (a
// negative count meant the default, silently).
inline CLI::Option* add_threads_option(CLI::App& app, int& threads, const std::string& help) {
  return app.add_option("--threads", threads, help)->check(CLI::Range(0, 1 << 16));
}

// add(root) creates the subcommand on `root` and returns what to run once it is chosen.
using CommandFactory = std::function<std::function<int()>(CLI::App& root)>;

struct CommandRegistration {
  CommandRegistration(const char* name, CommandFactory factory);
};

struct RegisteredCommand {
  std::string name;
  CommandFactory factory;
};
const std::vector<RegisteredCommand>& registered_commands();

}  // namespace loom::cli

#define LOOM_REGISTER_COMMAND(name, factory) \
  static const ::loom::cli::CommandRegistration loom_command_registration_##factory(name, factory)
