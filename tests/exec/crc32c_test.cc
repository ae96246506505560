// CRC-32C against published check values (the CRC catalogue's "123456789" and RFC 3720's iSCSI
// vectors), the hardware and table versions against each other, and continuation across calls.
#include "exec/crc32c.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace loom::exec {
namespace {

TEST(ExecCrc32c, MatchesPublishedCheckValues) {
  const std::string check = "123456789";
  EXPECT_EQ(crc32c(0, check.data(), check.size()), 0xE3069283u);
  EXPECT_EQ(crc32c_portable(0, check.data(), check.size()), 0xE3069283u);
  // RFC 3720 appendix B.4: 32 bytes of zeros, of ones, ascending and descending.
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xFF), up(32), down(32);
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<unsigned char>(i);
    down[i] = static_cast<unsigned char>(31 - i);
  }
  for (auto f : {&crc32c, &crc32c_portable}) {
    EXPECT_EQ(f(0, zeros.data(), 32), 0x8A9136AAu);
    EXPECT_EQ(f(0, ones.data(), 32), 0x62A8AB43u);
    EXPECT_EQ(f(0, up.data(), 32), 0x46DD794Eu);
    EXPECT_EQ(f(0, down.data(), 32), 0x113FDB5Cu);
  }
  EXPECT_EQ(crc32c(0, nullptr, 0), 0u);
}

TEST(ExecCrc32c, HardwareAndTableAgreeOnEveryLengthAndAlignment) {
  std::mt19937 rng(7);
  std::vector<unsigned char> data(4096 + 8);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  for (std::size_t offset = 0; offset < 8; ++offset)
    for (std::size_t n : {0, 1, 7, 8, 9, 63, 64, 65, 1000, 4096})
      EXPECT_EQ(crc32c(0, data.data() + offset, n), crc32c_portable(0, data.data() + offset, n))
          << "offset " << offset << " length " << n;
}

TEST(ExecCrc32c, ContinuesAcrossCalls) {
  std::vector<unsigned char> data(1000);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 31 + 7);
  const std::uint32_t whole = crc32c(0, data.data(), data.size());
  for (std::size_t cut : {0, 1, 13, 500, 999, 1000}) {
    EXPECT_EQ(crc32c(crc32c(0, data.data(), cut), data.data() + cut, data.size() - cut), whole) << cut;
    EXPECT_EQ(crc32c_portable(crc32c_portable(0, data.data(), cut), data.data() + cut, data.size() - cut), whole);
  }
  data[500] ^= 1;  // one flipped bit changes it
  EXPECT_NE(crc32c(0, data.data(), data.size()), whole);
}

}  // namespace
}  // namespace loom::exec
