#include "exec/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include <fmt/format.h>

#include "exec/crc32c.h"

namespace loom::exec {

namespace {
std::string parent_dir(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

std::string system_error(const std::string& path, const char* what) {
  return fmt::format("{}: {} failed ({})", path, what, std::strerror(errno));
}
}  // namespace

Result<DurableFile> DurableFile::create(const std::string& path) {
  const std::string temp = path + ".tmp";
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return make_error(system_error(temp, "open"));
  return DurableFile(path, fd);
}

DurableFile::DurableFile(DurableFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      published_(std::exchange(other.published_, true)),
      bytes_(other.bytes_),
      crc_(other.crc_) {}

DurableFile::~DurableFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!published_) std::remove(temp_path().c_str());
}

Status DurableFile::write(const void* data, std::size_t bytes) {
  crc_ = exec::crc32c(crc_, data, bytes);
  bytes_ += static_cast<std::int64_t>(bytes);
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return make_error(system_error(temp_path(), "write"));  // a full disk ends here
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
  return {};
}

Status DurableFile::finish() {
  if (::fsync(fd_) != 0) return make_error(system_error(temp_path(), "fsync"));
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) return make_error(system_error(temp_path(), "close"));
  return {};
}

Status DurableFile::publish() {
  if (std::rename(temp_path().c_str(), path_.c_str()) != 0) return make_error(system_error(path_, "rename"));
  published_ = true;
  return sync_directory(parent_dir(path_));
}

Status write_file_durably(const std::string& path, const std::string& text) {
  auto file = DurableFile::create(path);
  if (!file) return file.error();
  if (Status s = file->write(text.data(), text.size()); !s) return s;
  if (Status s = file->finish(); !s) return s;
  return file->publish();
}

Status sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return make_error(system_error(dir, "open (directory)"));
  const bool ok = ::fsync(fd) == 0;
  const std::string error = ok ? "" : system_error(dir, "fsync (directory)");
  ::close(fd);
  if (!ok) return make_error(error);
  return {};
}

}  // namespace loom::exec
