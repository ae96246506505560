// Tensor: a 2-D block of values of one dtype owned by a Backend (host memory for cpu, device memory for
// cuda), charged to one memory category for as long as it lives. Move-only; freeing returns the bytes.
// TensorRef / ConstTensorRef: the typed views (pointer, dtype) every Backend op takes.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "exec/dtype.h"
#include "exec/memory.h"

namespace loom::exec {

class Backend;

// Throws std::logic_error (an executor bug, not bad input) when `actual` is not `expected`.
inline void check_dtype(DType expected, DType actual, const char* what) {
  if (expected != actual)
    throw std::logic_error(std::string(what) + ": " + to_string(actual) + " data read as " + to_string(expected));
}

// A typed view of backend memory. Converts implicitly from float* (an fp32 buffer), so host test
// vectors and fp32 statistics pass without ceremony; `+ n` advances by n elements of the dtype.
class TensorRef {
 public:
  TensorRef() = default;
  TensorRef(std::nullptr_t) {}
  TensorRef(float* p) : ptr_(p), dtype_(DType::kF32) {}  // NOLINT(google-explicit-constructor)
  TensorRef(void* p, DType dtype) : ptr_(p), dtype_(dtype) {}
  void* raw() const { return ptr_; }
  DType dtype() const { return dtype_; }
  bool null() const { return ptr_ == nullptr; }
  template <class T>
  T* as() const {
    check_dtype(dtype_of<T>(), dtype_, "TensorRef");
    return static_cast<T*>(ptr_);
  }
  TensorRef operator+(std::int64_t elements) const {
    return {static_cast<char*>(ptr_) + elements * dtype_bytes(dtype_), dtype_};
  }

 private:
  void* ptr_ = nullptr;
  DType dtype_ = DType::kF32;
};

class ConstTensorRef {
 public:
  ConstTensorRef() = default;
  ConstTensorRef(std::nullptr_t) {}
  ConstTensorRef(const float* p) : ptr_(p), dtype_(DType::kF32) {}   // NOLINT(google-explicit-constructor)
  ConstTensorRef(TensorRef r) : ptr_(r.raw()), dtype_(r.dtype()) {}  // NOLINT(google-explicit-constructor)
  ConstTensorRef(const void* p, DType dtype) : ptr_(p), dtype_(dtype) {}
  const void* raw() const { return ptr_; }
  DType dtype() const { return dtype_; }
  bool null() const { return ptr_ == nullptr; }
  template <class T>
  const T* as() const {
    check_dtype(dtype_of<T>(), dtype_, "ConstTensorRef");
    return static_cast<const T*>(ptr_);
  }
  ConstTensorRef operator+(std::int64_t elements) const {
    return {static_cast<const char*>(ptr_) + elements * dtype_bytes(dtype_), dtype_};
  }

 private:
  const void* ptr_ = nullptr;
  DType dtype_ = DType::kF32;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(Backend* backend, void* data, std::int64_t rows, std::int64_t cols, MemoryCategory category,
         DType dtype = DType::kF32)
      : backend_(backend), data_(data), rows_(rows), cols_(cols), category_(category), dtype_(dtype) {}
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  Tensor(Tensor&& other) noexcept { *this = std::move(other); }
  Tensor& operator=(Tensor&& other) noexcept;
  ~Tensor() { reset(); }

  void reset();  // frees the storage now
  // Moves the storage out without freeing it (the caller re-wraps it, e.g. under another category).
  void* release_storage() { return std::exchange(data_, nullptr); }
  // Typed access: T must match the dtype (float for fp32, the default).
  template <class T = float>
  T* data() {
    check_dtype(dtype_of<T>(), dtype_, "Tensor::data");
    return static_cast<T*>(data_);
  }
  template <class T = float>
  const T* data() const {
    check_dtype(dtype_of<T>(), dtype_, "Tensor::data");
    return static_cast<const T*>(data_);
  }
  TensorRef ref() { return {data_, dtype_}; }
  ConstTensorRef ref() const { return {data_, dtype_}; }
  void* raw() { return data_; }
  std::int64_t rows() const { return rows_; }
  std::int64_t cols() const { return cols_; }
  std::int64_t numel() const { return rows_ * cols_; }
  std::int64_t bytes() const { return numel() * dtype_bytes(dtype_); }
  MemoryCategory category() const { return category_; }
  DType dtype() const { return dtype_; }
  bool empty() const { return data_ == nullptr; }

 private:
  Backend* backend_ = nullptr;
  void* data_ = nullptr;
  std::int64_t rows_ = 0, cols_ = 0;
  MemoryCategory category_ = MemoryCategory::kWorkspace;
  DType dtype_ = DType::kF32;
};

}  // namespace loom::exec
