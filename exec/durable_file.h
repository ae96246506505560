// Files that a crash leaves either whole or absent: written under a temporary name in the same
// directory, fsync'd, renamed over the final name, and the directory fsync'd so that the rename
// itself is durable (what ext4 and XFS need for a rename to survive a power cut).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/result.h"

namespace loom::exec {

class DurableFile {
 public:
  // Opens `path`.tmp for writing; nothing appears at `path` before publish().
  static Result<DurableFile> create(const std::string& path);
  DurableFile(DurableFile&& other) noexcept;
  DurableFile& operator=(DurableFile&&) = delete;
  DurableFile(const DurableFile&) = delete;
  ~DurableFile();  // unpublished: the temporary file is removed

  Status write(const void* data, std::size_t bytes);
  // Flushes the temporary file to the disk and closes it; it is complete but not yet visible.
  Status finish();
  // Renames it to the final name and syncs the directory.
  Status publish();

  const std::string& path() const { return path_; }
  std::string temp_path() const { return path_ + ".tmp"; }
  std::int64_t bytes() const { return bytes_; }  // written so far
  std::uint32_t crc32c() const { return crc_; }  // of the bytes written so far

 private:
  DurableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_ = -1;
  bool published_ = false;
  std::int64_t bytes_ = 0;
  std::uint32_t crc_ = 0;
};

// The whole of `text` at `path`, durably (create, write, finish, publish).
Status write_file_durably(const std::string& path, const std::string& text);
// fsync of a directory: makes the names created, renamed or removed in it durable.
Status sync_directory(const std::string& dir);

}  // namespace loom::exec
