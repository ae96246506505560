#include "cli/output.h"

#include <cstdio>
#include <unistd.h>

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
  if (auto status = write_text_file_atomic(path, text); !status) throw InputError(status.error().message);
}

ProgressBar::ProgressBar(std::string label) : label_(std::move(label)), enabled_(isatty(STDERR_FILENO) != 0) {}

ProgressBar::~ProgressBar() {
  if (drawn_) std::fputs("\r\033[K", stderr);
}

void ProgressBar::update(std::size_t done, std::size_t total) {
  if (!enabled_ || total == 0) return;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * done / total);
  std::fputs(fmt::format("\r{} [{}{}] {}/{}", label_, std::string(filled, '='), std::string(kWidth - filled, ' '), done,
                         total)
                 .c_str(),
             stderr);
  std::fflush(stderr);
  drawn_ = true;
}

}  // namespace loom::cli
