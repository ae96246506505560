// The fp32 CPU reference of the Gpu* tests: exec's CpuBackend, called on host vectors. All glue
// between the tests and exec/backend.h's interface lives here, so a change of that interface (typed
// tensor views) is adapted in this file alone.
#pragma once

#include <cstdint>
#include <vector>

#include "exec/cpu/cpu_backend.h"

namespace loom::kernels::testing {

using Floats = std::vector<float>;

// One backend for every test; its ops keep no state between calls.
inline exec::CpuBackend& cpu() {
  static exec::CpuBackend backend;
  return backend;
}

inline exec::AttentionShape attention_shape(int batch, int seq, int heads, int kv_heads, int head_dim) {
  exec::AttentionShape s;
  s.batch = batch;
  s.seq = seq;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.head_dim = head_dim;
  return s;
}

inline float* data(Floats& v) { return v.data(); }
inline const float* data(const Floats& v) { return v.data(); }

}  // namespace loom::kernels::testing
