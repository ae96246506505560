// Helpers for tests that run the real `loom` binary, alone or under mpirun: shell commands with
// captured output and exit status, scratch directories, token files and JSONL logs.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "core/json_io.h"

namespace loom::exec::testing {

// A parallel layout a multi-rank test trains: its name (the test's), ranks, `loom run` flags and the
// model (tests/exec/data/<model>.json).
struct RunLayout {
  const char* name;
  int ranks;
  const char* flags;
  const char* model = "micro";
};
inline void PrintTo(const RunLayout& l, std::ostream* os) { *os << l.name; }

struct ProcessResult {
  int exit_code = -1;
  std::string out, err;
};

// Runs `command` with /bin/sh, killed after `timeout_s` (exit code 124 then).
ProcessResult run_shell(const std::string& command, int timeout_s = 120);

bool have_mpirun();
// "mpirun --oversubscribe -np N" with the root-permission variables and a session directory of its own
// (empty without MPI): what a test puts in front of a program it runs on N ranks.
std::string mpirun_prefix(int ranks);
// "mpirun --oversubscribe -np N <loom> run" (with the root-permission variables set) or, for one
// rank without MPI, "<loom> run".
std::string loom_run(int ranks);
std::string loom_binary();
// The environment variable's value, or `fallback` when it is unset or empty.
std::string from_env(const char* name, const char* fallback);

// A fresh directory under the build tree's temp area.
std::string scratch_dir(const std::string& name);
// A token file of `tokens` byte-level tokens of English-like text, deterministic.
std::string make_token_file(const std::string& dir, int tokens);
std::string test_model(const std::string& name);  // tests/exec/data/<name>.json
// The steps the multi-rank equivalence suites (layout_test, staged_comm_test) train: LOOM_LAYOUT_STEPS
// where set (the sanitizer build sets 2: each layout's forward, backward, collectives and optimizer step
// still run under ASan and UBSan, in processes about 12 times slower than the default build's), else
// `default_steps`. A value that is not a whole number >= 1 ends the test program with that one line.
int layout_steps(int default_steps);

std::vector<Json> read_jsonl(const std::string& path);
// The "loss" of every per-step record of a --log file.
std::vector<double> losses(const std::string& log_path);
// One field of every step record of a JSONL log (records without it are skipped).
std::vector<double> step_values(const std::string& log_path, const std::string& field);
// Lines of `text` that start with `prefix` ("loom:" counts a command's error lines).
int count_lines_starting(const std::string& text, const std::string& prefix);

}  // namespace loom::exec::testing
