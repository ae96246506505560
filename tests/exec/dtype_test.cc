// Typed tensors on the CPU backend: casts between fp32 and bf16, AdamW's compute-dtype copy, memory
// charged by dtype size, and the CPU backend's refusal (naming op and dtype) of ops it computes in fp32 only.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/cpu/cpu_backend.h"
#include "kernels/numerics.h"

namespace loom::exec {
namespace {

std::vector<float> ramp(std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[i] = 0.37f * static_cast<float>(i - n / 2) + 1e-3f * static_cast<float>(i);
  return v;
}

TEST(DType, CastToBf16AndBackEqualsRoundingToNearestEven) {
  CpuBackend cpu;
  const std::vector<float> x = ramp(257);
  Tensor b = cpu.empty(257, 1, MemoryCategory::kParams, DType::kBF16);
  cpu.from_host(b.ref(), x.data(), 257);
  std::vector<float> back(257);
  cpu.to_host(back.data(), b.ref(), 257);
  for (std::size_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(back[i], kernels::float_from_bf16_bits(kernels::bf16_bits_from_float(x[i]))) << i;
  EXPECT_NE(back, x);  // the values really were rounded
}

TEST(DType, CastFromBf16ToFp32AndBackIsExact) {
  CpuBackend cpu;
  Tensor b = cpu.empty(64, 1, MemoryCategory::kParams, DType::kBF16);
  for (int i = 0; i < 64; ++i) b.data<std::uint16_t>()[i] = static_cast<std::uint16_t>(0x3F80 + 3 * i);
  Tensor f = cpu.empty(64, 1, MemoryCategory::kParams);
  Tensor b2 = cpu.alloc(64, 1, MemoryCategory::kParams, DType::kBF16);
  cpu.cast(f.ref(), b.ref(), 64);
  cpu.cast(b2.ref(), f.ref(), 64);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(b2.data<std::uint16_t>()[i], b.data<std::uint16_t>()[i]);
}

TEST(DType, AdamwWithABf16CopyEqualsFp32AdamwRounded) {
  CpuBackend cpu;
  const std::int64_t n = 100;
  std::vector<float> p1 = ramp(n), p2 = ramp(n), g = ramp(n), m1(n, 0.1f), v1(n, 0.2f), m2 = m1, v2 = v1;
  for (float& x : g) x *= 0.01f;
  Tensor copy = cpu.alloc(n, 1, MemoryCategory::kParams, DType::kBF16);
  cpu.adamw(p1.data(), g.data(), m1.data(), v1.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);
  cpu.adamw(p2.data(), g.data(), m2.data(), v2.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, copy.ref());
  EXPECT_EQ(p1, p2);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(v1, v2);
  for (std::int64_t i = 0; i < n; ++i)
    EXPECT_EQ(copy.data<std::uint16_t>()[i], kernels::bf16_bits_from_float(p1[i])) << i;
}

TEST(DType, TheCpuBackendRefusesABf16GemmNamingOpAndDtype) {
  CpuBackend cpu;
  Tensor a = cpu.alloc(4, 4, MemoryCategory::kActivations, DType::kBF16);
  Tensor c = cpu.alloc(4, 4, MemoryCategory::kActivations);
  try {
    cpu.gemm(false, false, 4, 4, 4, 1.0f, a.ref(), 4, a.ref(), 4, 0.0f, c.ref(), 4);
    FAIL() << "a bf16 GEMM ran on the CPU backend";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("gemm"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bf16"), std::string::npos) << e.what();
  }
}

TEST(DType, ReadingABf16TensorAsFloatIsAnError) {
  CpuBackend cpu;
  Tensor b = cpu.alloc(2, 2, MemoryCategory::kParams, DType::kBF16);
  EXPECT_THROW(b.data<float>(), std::logic_error);
  EXPECT_THROW(b.ref().as<float>(), std::logic_error);
}

TEST(DType, MemoryIsChargedByTheDtypesSize) {
  CpuBackend cpu;
  Tensor f = cpu.alloc(10, 3, MemoryCategory::kParams);
  Tensor b = cpu.alloc(10, 3, MemoryCategory::kGrads, DType::kBF16);
  EXPECT_EQ(cpu.memory().current_bytes(MemoryCategory::kParams), 120);
  EXPECT_EQ(cpu.memory().current_bytes(MemoryCategory::kGrads), 60);
  EXPECT_EQ(b.bytes(), 60);
  Tensor r = cpu.recharge(std::move(b), MemoryCategory::kBuffers);
  EXPECT_EQ(r.dtype(), DType::kBF16);
  EXPECT_EQ(cpu.memory().current_bytes(MemoryCategory::kBuffers), 60);
}

TEST(DType, AViewAdvancesByElementsOfItsDtype) {
  CpuBackend cpu;
  Tensor b = cpu.alloc(8, 1, MemoryCategory::kParams, DType::kBF16);
  EXPECT_EQ(static_cast<char*>((b.ref() + 3).raw()) - static_cast<char*>(b.raw()), 6);
  Tensor f = cpu.alloc(8, 1, MemoryCategory::kParams);
  EXPECT_EQ(static_cast<char*>((f.ref() + 3).raw()) - static_cast<char*>(f.raw()), 12);
}

}  // namespace
}  // namespace loom::exec
