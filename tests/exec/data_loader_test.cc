// The data order at steps far beyond any run: sequence g starts at token (g·seq) mod (tokens − seq)
// even where g·seq passes 2^63 (it wrapped around, and read before the file's start).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "exec/data_loader.h"

namespace loom::exec {
namespace {

// 128-bit arithmetic, the reference the loader's reduced modulo is checked against (a GCC/Clang extension).
__extension__ typedef __int128 Wide;

TEST(DataLoader, StepsWhoseTokenOffsetPassesTwoToThe63ReadTheRightWindow) {
  const auto path =
      std::filesystem::temp_directory_path() / ("loom_data_loader_" + std::to_string(::getpid()) + ".bin");
  std::vector<std::uint16_t> tokens(1000);
  std::iota(tokens.begin(), tokens.end(), 0);  // token i is i: a window shows where it was read
  ASSERT_TRUE(write_token_file(path.string(), tokens).ok());
  auto file = TokenFile::open(path.string(), 1000, 8);
  ASSERT_TRUE(file.ok()) << file.error().message;
  const int seq = 8, micro_batch = 2, micro_batches = 2, dp = 2, dp_rank = 1;
  const DataLoader loader(*file, seq, micro_batch, micro_batches, dp, dp_rank);
  const std::int64_t step = std::int64_t{1} << 58;  // g ≈ 2^61, g·seq ≈ 2^64
  std::vector<int> in, target;
  loader.load(step, 1, in, target);
  const std::int64_t positions = 1000 - seq;
  for (int j = 0; j < micro_batch; ++j) {
    const std::int64_t g = loader.first_sequence(step, 1) + j;
    const auto start = static_cast<std::int64_t>((static_cast<Wide>(g) * seq) % positions);
    for (int k = 0; k < seq; ++k) {
      EXPECT_EQ(in[j * seq + k], start + k) << "sequence " << j << " token " << k;
      EXPECT_EQ(target[j * seq + k], start + k + 1) << "sequence " << j << " token " << k;
    }
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace loom::exec
