// Test helper: run the real `loom` binary as a child process and capture its exit status,
// standard output and standard error.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace loom::testing {

struct Run {
  int status = -1;
  std::string out;
  std::string err;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::filesystem::path scratch_dir() {
  const auto dir = std::filesystem::temp_directory_path() / ("loom_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

// `args` is passed to /bin/sh; stdin is closed, as in CI.
inline Run run_loom(const std::string& args) {
  static int counter = 0;
  const auto dir = scratch_dir();
  const auto out = dir / ("out" + std::to_string(counter));
  const auto err = dir / ("err" + std::to_string(counter++));
  const std::string cmd = std::string(LOOM_BINARY) + " " + args + " </dev/null >" + out.string() + " 2>" + err.string();
  const int raw = std::system(cmd.c_str());
  Run r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

// Bad input: exit status 2, one line on stderr (the message and its newline) containing `expected`,
// nothing on stdout.
inline void expect_bad_input(const std::string& args, const std::string& expected) {
  const auto r = run_loom(args);
  EXPECT_EQ(r.status, 2) << args << "\nstderr: " << r.err;
  EXPECT_NE(r.err.find(expected), std::string::npos) << args << "\nstderr: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\nstderr: " << r.err;
  EXPECT_TRUE(r.out.empty()) << args;
}

}  // namespace loom::testing
