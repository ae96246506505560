// Tensor: a 2-D block of fp32 values owned by a Backend (host memory for cpu, device memory for cuda),
// charged to one memory category for as long as it lives. Move-only; freeing returns the bytes.
#pragma once

#include <cstdint>
#include <utility>

#include "exec/memory.h"

namespace loom::exec {

class Backend;

class Tensor {
 public:
  Tensor() = default;
  Tensor(Backend* backend, float* data, std::int64_t rows, std::int64_t cols, MemoryCategory category)
      : backend_(backend), data_(data), rows_(rows), cols_(cols), category_(category) {}
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  Tensor(Tensor&& other) noexcept { *this = std::move(other); }
  Tensor& operator=(Tensor&& other) noexcept;
  ~Tensor() { reset(); }

  void reset();  // frees the storage now
  // Moves the storage out without freeing it (the caller re-wraps it, e.g. under another category).
  float* release_storage() {
    float* d = data_;
    data_ = nullptr;
    return d;
  }
  float* data() { return data_; }
  const float* data() const { return data_; }
  std::int64_t rows() const { return rows_; }
  std::int64_t cols() const { return cols_; }
  std::int64_t numel() const { return rows_ * cols_; }
  std::int64_t bytes() const { return numel() * static_cast<std::int64_t>(sizeof(float)); }
  MemoryCategory category() const { return category_; }
  bool empty() const { return data_ == nullptr; }

 private:
  Backend* backend_ = nullptr;
  float* data_ = nullptr;
  std::int64_t rows_ = 0, cols_ = 0;
  MemoryCategory category_ = MemoryCategory::kWorkspace;
};

}  // namespace loom::exec
