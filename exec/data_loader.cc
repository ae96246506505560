#include "exec/data_loader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include <fmt/format.h>

namespace loom::exec {

Status write_token_file(const std::string& path, const std::vector<std::uint16_t>& tokens) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return make_error(fmt::format("cannot write '{}'", path));
    std::int32_t header[kTokenFileHeaderInts] = {};
    header[0] = kTokenFileMagic;
    header[1] = kTokenFileVersion;
    header[2] = static_cast<std::int32_t>(tokens.size());
    out.write(reinterpret_cast<const char*>(header), sizeof(header));
    out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
    if (!out) return make_error(fmt::format("cannot write '{}'", path));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return make_error(fmt::format("cannot write '{}'", path));
  return {};
}

Result<TokenFile> TokenFile::open(const std::string& path, int vocab, int seq) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return make_error(fmt::format("data file '{}': {}", path, std::strerror(errno)));
  TokenFile file(fd, 0);
  struct stat st {};
  std::int32_t header[kTokenFileHeaderInts] = {};
  const bool stat_ok = fstat(fd, &st) == 0;
  if (stat_ok && S_ISDIR(st.st_mode))
    return make_error(
        fmt::format("data file '{}': is a directory (give the .bin file `loom data prepare` wrote)", path));
  if (!stat_ok || pread(fd, header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header)))
    return make_error(fmt::format("data file '{}': shorter than the 1024-byte header", path));
  if (header[0] != kTokenFileMagic)
    return make_error(
        fmt::format("data file '{}': bad magic {} (expected {}, llm.c .bin format)", path, header[0], kTokenFileMagic));
  if (header[1] != kTokenFileVersion)
    return make_error(fmt::format("data file '{}': version {} is not 1 (uint16 tokens)", path, header[1]));
  const std::int64_t n = header[2];
  const std::int64_t need = static_cast<std::int64_t>(sizeof(header)) + 2 * n;
  if (n <= 0 || st.st_size < need)
    return make_error(
        fmt::format("data file '{}': truncated: header says {} tokens ({} bytes) but the file has {} bytes", path, n,
                    need, static_cast<long long>(st.st_size)));
  if (n < seq + 1)
    return make_error(fmt::format("data file '{}': {} tokens is fewer than one sequence of {} + 1", path, n, seq));
  file.num_tokens_ = n;
  if (n <= (std::int64_t{1} << 29)) {
    std::vector<int> chunk(1 << 20);
    for (std::int64_t start = 0; start < n; start += static_cast<std::int64_t>(chunk.size())) {
      const std::int64_t count = std::min<std::int64_t>(static_cast<std::int64_t>(chunk.size()), n - start);
      file.read(start, count, chunk.data());
      for (std::int64_t i = 0; i < count; ++i)
        if (chunk[i] >= vocab)
          return make_error(fmt::format("data file '{}': token {} at position {} is outside the vocabulary of {}", path,
                                        chunk[i], start + i, vocab));
    }
  }
  return file;
}

TokenFile::TokenFile(TokenFile&& other) noexcept : fd_(other.fd_), num_tokens_(other.num_tokens_) { other.fd_ = -1; }

TokenFile::~TokenFile() {
  if (fd_ >= 0) ::close(fd_);
}

void TokenFile::read(std::int64_t start, std::int64_t n, int* out) const {
  std::vector<std::uint16_t> raw(static_cast<std::size_t>(n));
  const off_t offset = static_cast<off_t>(kTokenFileHeaderInts * 4 + 2 * start);
  std::int64_t done = 0;
  while (done < 2 * n) {
    const ssize_t got = pread(fd_, reinterpret_cast<char*>(raw.data()) + done, static_cast<size_t>(2 * n - done),
                              offset + static_cast<off_t>(done));
    if (got <= 0) break;  // sizes were checked at open; a file shrinking under us reads as zeros
    done += got;
  }
  for (std::int64_t i = 0; i < n; ++i) out[i] = raw[static_cast<std::size_t>(i)];
}

std::int64_t DataLoader::first_sequence(std::int64_t step, int index) const {
  const std::int64_t global_batch = static_cast<std::int64_t>(micro_batch_) * micro_batches_ * dp_;
  return step * global_batch + (static_cast<std::int64_t>(dp_rank_) * micro_batches_ + index) * micro_batch_;
}

void DataLoader::load(std::int64_t step, int index, std::vector<int>& tokens, std::vector<int>& targets) const {
  const int local = seq_ / cp_;
  const AttentionShape split{.seq = local, .cp = cp_, .cp_rank = cp_rank_};  // the chunks' positions
  tokens.resize(static_cast<std::size_t>(micro_batch_) * local);
  targets.resize(tokens.size());
  std::vector<int> window(static_cast<std::size_t>(seq_) + 1);
  const std::int64_t positions = file_.num_tokens() - seq_;
  for (int j = 0; j < micro_batch_; ++j) {
    const std::int64_t g = first_sequence(step, index) + j;
    // (g·seq) mod positions, reduced first: g·seq itself passes 2^63 on long runs of big batches.
    file_.read(((g % positions) * seq_) % positions, seq_ + 1, window.data());
    for (int t = 0; t < local; ++t) {
      const std::size_t at = static_cast<std::size_t>(j) * local + t, p = static_cast<std::size_t>(split.position(t));
      tokens[at] = window[p];
      targets[at] = window[p + 1];
    }
  }
}

}  // namespace loom::exec
