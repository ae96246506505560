// Where a subcommand's output goes: stdout, or --out FILE written atomically (never half a file).
// And a progress bar on stderr that shows only when stderr is a terminal.
#pragma once

#include <cstddef>
#include <string>

namespace loom::cli {

// Throws InputError when the file cannot be written.
void write_output(const std::string& path, const std::string& text);

class ProgressBar {
 public:
  explicit ProgressBar(std::string label);
  ~ProgressBar();
  void update(std::size_t done, std::size_t total);

 private:
  std::string label_;
  bool enabled_;
  bool drawn_ = false;
};

}  // namespace loom::cli
