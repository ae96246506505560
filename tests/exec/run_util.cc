#include "run_util.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "exec/data_loader.h"

namespace loom::exec::testing {

namespace {
std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
}  // namespace

ProcessResult run_shell(const std::string& command, int timeout_s) {
  static int counter = 0;
  const std::string base = scratch_dir("shell") + fmt::format("/cmd{}", counter++);
  const std::string full = fmt::format("timeout -k 5 {} sh -c '{}' > {}.out 2> {}.err", timeout_s, command, base, base);
  const int status = std::system(full.c_str());
  ProcessResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(base + ".out");
  r.err = slurp(base + ".err");
  return r;
}

namespace {
// The build's paths, unless the environment names others (a bundle carried to a GPU machine:
// scripts/gpu-bundle.sh's run.sh sets them).
std::string mpiexec() { return from_env("LOOM_TEST_MPIEXEC", LOOM_MPIEXEC); }
}  // namespace

std::string from_env(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != 0 ? value : fallback;
}

bool have_mpirun() { return !mpiexec().empty(); }

std::string loom_binary() { return from_env("LOOM_TEST_LOOM", LOOM_BINARY); }

std::string mpirun_prefix(int ranks) {
  if (!have_mpirun()) return "";
  // Each test process gives its mpirun a session directory of its own: Open MPI 4.1 creates
  // /tmp/ompi.<host>.<uid> with a check-then-mkdir, and two mpiruns starting at the same moment
  // (ctest -j2) can both see it missing, one failing with "mkdir ... File exists" in orte_init.
  return fmt::format(
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "
      "OMPI_MCA_orte_tmpdir_base={} {} --oversubscribe -np {}",
      scratch_dir("ompi"), mpiexec(), ranks);
}

std::string loom_run(int ranks) {
  if (!have_mpirun()) return loom_binary() + " run";
  return fmt::format("{} {} run", mpirun_prefix(ranks), loom_binary());
}

std::string scratch_dir(const std::string& name) {
  static std::set<std::string> made;
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("loom_exec_test_{}", ::getpid()) / name;
  // The first use in this process starts empty: process ids are reused (pid_max is often 32768),
  // and a stale directory of an earlier run would leak files such as a --log opened for appending.
  if (made.insert(dir.string()).second) std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::string make_token_file(const std::string& dir, int tokens) {
  static const char* words[] = {"the ",      "quick ",    "brown ", "fox ",   "jumps ", "over ",
                                "a ",        "lazy ",     "dog ",   "while ", "loom ",  "plans ",
                                "parallel ", "training ", "on ",    "many ",  "ranks. "};
  std::vector<std::uint16_t> data;
  std::uint64_t state = 12345;
  while (static_cast<int>(data.size()) < tokens) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    for (const char* c = words[(state >> 33) % 17]; *c != 0 && static_cast<int>(data.size()) < tokens; ++c)
      data.push_back(static_cast<unsigned char>(*c));
  }
  const std::string path = dir + "/tokens.bin";
  if (!write_token_file(path, data)) return "";
  return path;
}

int layout_steps(int default_steps) {
  const std::string text = from_env("LOOM_LAYOUT_STEPS", "");
  if (text.empty()) return default_steps;
  const int steps = std::atoi(text.c_str());
  if (steps < 1 || std::to_string(steps) != text) {
    std::fprintf(stderr, "LOOM_LAYOUT_STEPS must be a whole number of steps >= 1, not '%s'\n", text.c_str());
    std::exit(2);
  }
  return steps;
}

std::string test_model(const std::string& name) {
  return from_env("LOOM_TEST_SOURCE_DIR", LOOM_SOURCE_DIR) + "/tests/exec/data/" + name + ".json";
}

std::vector<Json> read_jsonl(const std::string& path) {
  std::vector<Json> records;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) records.push_back(Json::parse(line));
  return records;
}

std::vector<double> step_values(const std::string& log_path, const std::string& field) {
  std::vector<double> out;
  for (const Json& r : read_jsonl(log_path))
    if (r.contains(field)) out.push_back(r[field].get<double>());
  return out;
}

std::vector<double> losses(const std::string& log_path) { return step_values(log_path, "loss"); }

int count_lines_starting(const std::string& text, const std::string& prefix) {
  int n = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t end = text.find('\n', pos);
    if (text.compare(pos, prefix.size(), prefix) == 0) ++n;
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return n;
}

}  // namespace loom::exec::testing
