#include "cli/output.h"

#include <unistd.h>
#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "cli/command.h"
#include "core/json_io.h"

namespace loom::cli {

void write_output(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return;
  }
  check(write_text_file_atomic(path, text));
}

Status check_format(const std::string& format, std::initializer_list<const char*> formats) {
  std::string names;
  for (const char* f : formats) {
    if (format == f) return {};
    names += (names.empty() ? "" : ", ") + std::string(f);
  }
  return make_error(fmt::format("--format: unknown format '{}' ({})", format, names));
}

void add_output_flags(CLI::App& app, std::string& format, std::string& out, const std::string& formats_help) {
  app.add_option("--format", format, formats_help)->capture_default_str();
  app.add_option("--out", out, "write to FILE instead of stdout");
}

ProgressBar::ProgressBar(std::string label, bool shown)
    : label_(std::move(label)), enabled_(shown && isatty(STDERR_FILENO) != 0) {}

ProgressBar::~ProgressBar() {
  if (drawn_) std::fputs("\r\033[K", stderr);
}

void ProgressBar::update(std::size_t done, std::size_t total, const std::string& note) {
  if (!enabled_ || total == 0) return;
  constexpr std::size_t kWidth = 30;
  const std::size_t filled = std::min(kWidth, kWidth * done / total);
  std::string bar(filled, '=');
  if (filled < kWidth) bar += '>' + std::string(kWidth - filled - 1, ' ');
  std::fputs(fmt::format("\r{} [{}] {}/{}{}\033[K", label_, bar, done, total, note).c_str(), stderr);
  std::fflush(stderr);
  drawn_ = true;
}

}  // namespace loom::cli
