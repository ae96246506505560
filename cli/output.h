// Where a subcommand's output goes: stdout, or --out FILE written atomically (never half a file).
// And the one progress bar of every subcommand, on stderr, shown only when stderr is a terminal.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>

#include <CLI/CLI.hpp>

#include "core/result.h"

namespace loom::cli {

// Throws InputError when the file cannot be written.
void write_output(const std::string& path, const std::string& text);

// "--format: unknown format 'xml' (table, json)" unless `format` is one of `formats`.
Status check_format(const std::string& format, std::initializer_list<const char*> formats);

// --format (one of `formats`) and --out FILE (stdout when not given), as `plan` and `sim` print.
void add_output_flags(CLI::App& app, std::string& format, std::string& out, const std::string& formats_help);

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
