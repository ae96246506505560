// Where a subcommand's output goes: stdout, or --out FILE written atomically (never half a file).
// And the one progress bar of every subcommand, on stderr, shown only when stderr is a terminal.
#pragma once

#include <cstddef>
#include <string>

namespace loom::cli {

// Throws InputError when the file cannot be written.
void write_output(const std::string& path, const std::string& text);

// "label [=========>          ] 12/50 note", redrawn in place; erased when it goes out of scope.
class ProgressBar {
 public:
  // `shown` false keeps it hidden even on a terminal (e.g. on ranks other than 0).
  explicit ProgressBar(std::string label, bool shown = true);
  ~ProgressBar();
  void update(std::size_t done, std::size_t total, const std::string& note = "");

 private:
  std::string label_;
  bool enabled_;
  bool drawn_ = false;
};

}  // namespace loom::cli
