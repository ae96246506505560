// Helpers the libFuzzer targets share: the input as text, or written to a scratch file for the
// readers that, as the CLI does, take a path. One scratch directory per fuzzing process.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace loom::fuzz {

inline std::string as_text(const std::uint8_t* data, std::size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// A directory of this process's own under $TMPDIR (or /tmp), created once.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::filesystem::path p = std::filesystem::path(tmp && *tmp ? tmp : "/tmp") /
                              ("loom-fuzz-" + std::to_string(static_cast<long long>(::getpid())));
    std::filesystem::create_directories(p);
    return p.string();
  }();
  return dir;
}

// Writes the input to `name` in the scratch directory and returns its path.
inline std::string write_scratch_file(const std::string& name, const std::uint8_t* data, std::size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

}  // namespace loom::fuzz
