// Element types of executor tensors: fp32 (the CPU reference and every statistic), bf16 (the GPU's
// mixed-precision compute type) and the two OCP fp8 formats, named now so a later fp8 path only adds
// ops. Sizes and names in one place, so memory accounting and messages follow the dtype.
#pragma once

#include <cstdint>

namespace loom::exec {

enum class DType : std::uint8_t { kF32, kBF16, kF8E4M3, kF8E5M2 };

constexpr std::int64_t dtype_bytes(DType d) {
  switch (d) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF8E4M3:
    case DType::kF8E5M2: return 1;
  }
  return 4;
}

constexpr const char* to_string(DType d) {
  switch (d) {
    case DType::kF32: return "fp32";
    case DType::kBF16: return "bf16";
    case DType::kF8E4M3: return "fp8_e4m3";
    case DType::kF8E5M2: return "fp8_e5m2";
  }
  return "?";
}

// The dtype a C++ element type stands for: float is fp32, std::uint16_t holds bf16 bits.
template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kF32;
}
template <>
constexpr DType dtype_of<std::uint16_t>() {
  return DType::kBF16;
}

}  // namespace loom::exec
