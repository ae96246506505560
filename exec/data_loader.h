// Training data: token files in llm.c's .bin format (a header of 256 int32 — magic 20240520,
// version 1, token count — then uint16 tokens) and the deterministic order in which DP ranks read
// them: sequence g of the run starts at token (g·seq) mod (tokens − seq), and step k's global batch
// is sequences [k·B, (k+1)·B), so any step can be re-read exactly (resume) on any layout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"
#include "exec/backend.h"

namespace loom::exec {

inline constexpr std::int32_t kTokenFileMagic = 20240520;
inline constexpr std::int32_t kTokenFileVersion = 1;
inline constexpr int kTokenFileHeaderInts = 256;

// Writes tokens (each < 65536) to `path` in the .bin format, atomically.
Status write_token_file(const std::string& path, const std::vector<std::uint16_t>& tokens);

class TokenFile {
 public:
  // Checks the header, the file size and (for files up to 1 GiB) that every token is < vocab.
  static Result<TokenFile> open(const std::string& path, int vocab, int seq);
  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&&) = delete;
  TokenFile(const TokenFile&) = delete;
  ~TokenFile();
  std::int64_t num_tokens() const { return num_tokens_; }
  // tokens [start, start + n) as ints.
  void read(std::int64_t start, std::int64_t n, int* out) const;

 private:
  TokenFile(int fd, std::int64_t num_tokens) : fd_(fd), num_tokens_(num_tokens) {}
  int fd_ = -1;
  std::int64_t num_tokens_ = 0;
};

class DataLoader {
 public:
  // Under context parallelism (cp > 1) a rank loads only its chunks of each sequence: cp_rank and
  // 2·cp−1−cp_rank of 2·cp (causal load balance), seq/cp tokens in that order.
  DataLoader(const TokenFile& file, int seq, int micro_batch, int micro_batches, int dp, int dp_rank, int cp = 1,
             int cp_rank = 0)
      : file_(file),
        seq_(seq),
        micro_batch_(micro_batch),
        micro_batches_(micro_batches),
        dp_(dp),
        dp_rank_(dp_rank),
        cp_(cp),
        cp_rank_(cp_rank) {}
  // Inputs and next-token targets of micro-batch `index` of step `step` (from 0) for this DP (and CP) rank.
  void load(std::int64_t step, int index, std::vector<int>& tokens, std::vector<int>& targets) const;
  // Index of the first sequence of a step's micro-batch for this DP rank (recorded in logs).
  std::int64_t first_sequence(std::int64_t step, int index) const;

 private:
  const TokenFile& file_;
  int seq_, micro_batch_, micro_batches_, dp_, dp_rank_, cp_, cp_rank_;
};

}  // namespace loom::exec
