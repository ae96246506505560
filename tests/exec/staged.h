// Host vectors staged through a backend's memory for op tests: the op under test reads and writes
// that backend's pointers (device memory on a GPU) while the test builds inputs and checks outputs
// on the host.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "exec/backend.h"

namespace loom::exec {

using Vec = std::vector<float>;
using Bytes = std::vector<std::uint8_t>;

// Integer and byte arrays travel in float-sized storage, copied bit for bit.
class Staged {
 public:
  explicit Staged(Backend& be) : be_(be) {}
  float* in(const Vec& host) { return upload(host.data(), host.size()); }
  float* out(std::size_t n) { return hold(n); }
  const int* ints(const std::vector<int>& host) {
    static_assert(sizeof(int) == sizeof(float));
    return reinterpret_cast<const int*>(upload(reinterpret_cast<const float*>(host.data()), host.size()));
  }
  std::uint8_t* bytes(const Bytes& host) {
    Vec packed((host.size() + 3) / 4, 0.0f);
    std::memcpy(packed.data(), host.data(), host.size());
    return reinterpret_cast<std::uint8_t*>(in(packed));
  }
  Vec get(const float* p, std::size_t n) {
    be_.synchronize();
    Vec host(n);
    be_.to_host(host.data(), p, static_cast<std::int64_t>(n));
    return host;
  }
  Bytes get_bytes(const std::uint8_t* p, std::size_t n) {
    const Vec packed = get(reinterpret_cast<const float*>(p), (n + 3) / 4);
    Bytes host(n);
    std::memcpy(host.data(), packed.data(), n);
    return host;
  }

 private:
  float* hold(std::size_t n) {
    held_.push_back(be_.alloc(1, static_cast<std::int64_t>(std::max<std::size_t>(n, 1)), MemoryCategory::kBuffers));
    return held_.back().data();
  }
  float* upload(const float* host, std::size_t n) {
    float* p = hold(n);
    be_.from_host(p, host, static_cast<std::int64_t>(n));
    return p;
  }
  Backend& be_;
  std::vector<Tensor> held_;
};

}  // namespace loom::exec
