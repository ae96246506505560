// Units used across Loom: bytes, GiB (2^30), simulated time in integer nanoseconds.
#pragma once

#include <cstdint>

namespace loom {

using TimeNs = std::int64_t;

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
inline constexpr double kGB = 1e9;
inline constexpr double kNsPerS = 1e9;

inline constexpr double bytes_to_gib(double bytes) { return bytes / kGiB; }
inline constexpr double ns_to_s(TimeNs ns) { return static_cast<double>(ns) / kNsPerS; }
inline TimeNs s_to_ns(double seconds) { return static_cast<TimeNs>(seconds * kNsPerS + 0.5); }

}  // namespace loom
