// CRC-32C (Castagnoli, the iSCSI/ext4 polynomial 0x1EDC6F41, reflected 0x82F63B78): the checksum a
// checkpoint manifest records for each shard. SSE 4.2's crc32 instruction where the CPU has it, a
// slicing-by-8 table otherwise; both give the same value (check value of "123456789": 0xE3069283).
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom::exec {

// Continues a CRC-32C: crc32c(crc32c(0, a), b) == crc32c(0, a + b).
std::uint32_t crc32c(std::uint32_t crc, const void* data, std::size_t bytes);
// The table version alone, for tests that compare it with the hardware one.
std::uint32_t crc32c_portable(std::uint32_t crc, const void* data, std::size_t bytes);

}  // namespace loom::exec
