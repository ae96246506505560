// Test support for the Gpu* suites: a visible skip where no CUDA device is present, device buffers
// that start poisoned (NaN) and convert to and from fp32 on the host, non-zero random inputs already
// rounded to the tested type, and a closeness check with a stated tolerance.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/numerics.h"

namespace loom::kernels::testing {

using i64 = std::int64_t;
using bf16 = __nv_bfloat16;

inline bool cuda_device_present(std::string* why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    *why = cudaGetErrorString(status);
    return false;
  }
  if (count == 0) *why = "cudaGetDeviceCount found 0 devices";
  return count > 0;
}

// Every Gpu* test derives from this: it skips, saying why, where no GPU can run it.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda_device_present(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  }
  void TearDown() override {
    if (!IsSkipped()) {
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
  }
};

// Relative tolerance of each element type against the fp32 CPU reference.
template <class T>
constexpr double tolerance() {
  return std::is_same_v<T, bf16> ? 1e-2 : 1e-5;
}
constexpr double kFp32Tolerance = 1e-5;

// Values rounded to T as the device stores them: bf16 inputs reach the CPU reference already rounded.
template <class T>
float stored(float x) {
  if constexpr (std::is_same_v<T, bf16>) return float_from_bf16_bits(bf16_bits_from_float(x));
  return x;
}

// n values uniform in [lo, hi), none of them zero, rounded to T.
template <class T = float>
std::vector<float> random_values(i64 n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) {
    do x = stored<T>(dist(rng));
    while (x == 0.0f);
  }
  return v;
}

// A device array of n values of T, filled with 0xFF bytes (NaN for fp32 and bf16) until written.
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(i64 n) : n_(n) {
    EXPECT_EQ(cudaMalloc(&data_, bytes()), cudaSuccess);
    EXPECT_EQ(cudaMemset(data_, 0xFF, bytes()), cudaSuccess);
  }
  template <class U>
  explicit DeviceBuffer(const std::vector<U>& host) : DeviceBuffer(static_cast<i64>(host.size())) {
    upload(host);
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() { return data_; }
  i64 size() const { return n_; }
  std::size_t bytes() const { return static_cast<std::size_t>(n_) * sizeof(T); }

  template <class U>
  void upload(const std::vector<U>& host) {
    std::vector<T> raw(host.size());
    for (std::size_t i = 0; i < host.size(); ++i) raw[i] = to_raw(host[i]);
    EXPECT_EQ(cudaMemcpy(data_, raw.data(), bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  // The values as fp32 (or as T when T is not a floating type).
  auto download() const {
    std::vector<T> raw(static_cast<std::size_t>(n_));
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(raw.data(), data_, bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    if constexpr (std::is_same_v<T, bf16>) {
      std::vector<float> out(raw.size());
      for (std::size_t i = 0; i < raw.size(); ++i) {
        out[i] = float_from_bf16_bits(static_cast<__nv_bfloat16_raw>(raw[i]).x);
      }
      return out;
    } else {
      return raw;
    }
  }

 private:
  template <class U>
  static T to_raw(U x) {
    if constexpr (std::is_same_v<T, bf16>) {
      __nv_bfloat16_raw bits;
      bits.x = bf16_bits_from_float(static_cast<float>(x));
      return T(bits);
    } else {
      return static_cast<T>(x);
    }
  }
  T* data_ = nullptr;
  i64 n_ = 0;
};

// Every got[i] within tol·(|want[i]| + rms(want)) of want[i] (the RMS is the floor for values near
// zero, where a relative bound means nothing); NaN (an unwritten, poisoned value) always fails.
template <class G, class W>
void expect_close(const std::vector<G>& got, const std::vector<W>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double sum_sq = 0;
  for (W w : want) sum_sq += static_cast<double>(w) * w;
  const double rms = want.empty() ? 0.0 : std::sqrt(sum_sq / static_cast<double>(want.size()));
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    const bool ok = std::isfinite(g) && std::abs(g - w) <= tol * (std::abs(w) + rms);
    if (!ok && ++bad <= 5)
      ADD_FAILURE() << what << "[" << i << "]: got " << g << ", want " << w << " (tol " << tol << ")";
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " values differ";
}

struct TypeNames {
  template <class T>
  static std::string GetName(int) {
    return std::is_same_v<T, bf16> ? "bf16" : "fp32";
  }
};

}  // namespace loom::kernels::testing
