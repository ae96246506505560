// GEMM through cuBLASLt with exec/backend.h's row-major interface: C = alpha·op(A)·op(B) + beta·C,
// op(A) m×k, op(B) k×n, leading dimensions in elements. A and B share a type (bf16 or fp32), C may be
// bf16 or fp32 (weight gradients accumulate into fp32 main grads with beta 1); compute is fp32. One
// 32 MiB workspace; the descriptors and the heuristic's algorithm are cached per shape, types and pointer
// alignment.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

namespace loom::kernels {

enum class DType { f32, bf16 };

// A row-major matrix operand: device pointer, element type, leading dimension and, for batched
// GEMMs, the distance in elements between consecutive matrices.
struct Matrix {
  const void* data = nullptr;
  DType type = DType::f32;
  std::int64_t ld = 0;
  std::int64_t batch_stride = 0;
};
struct OutMatrix {
  void* data = nullptr;
  DType type = DType::f32;
  std::int64_t ld = 0;
  std::int64_t batch_stride = 0;
};

struct GemmShape {
  bool trans_a = false, trans_b = false;
  int m = 0, n = 0, k = 0;
  int batch = 1;
};

class Gemm {
 public:
  // 32 MiB: cuBLAS's recommendation for Hopper (llm.c uses the same).
  static constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;

  Gemm();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // batch > 1 runs `batch` GEMMs whose operands lie batch_stride elements apart.
  void run(const GemmShape& shape, float alpha, const Matrix& a, const Matrix& b, float beta, const OutMatrix& c,
           cudaStream_t stream);
  // exec/backend.h's gemm: A and B of type ab_type, C of type c_type, not batched.
  void run(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const void* a, DType ab_type, int lda,
           const void* b, int ldb, float beta, void* c, DType c_type, int ldc, cudaStream_t stream) {
    run(GemmShape{trans_a, trans_b, m, n, k, 1}, alpha, Matrix{a, ab_type, lda, 0}, Matrix{b, ab_type, ldb, 0}, beta,
        OutMatrix{c, c_type, ldc, 0}, stream);
  }
  std::size_t cached_algorithms() const { return plans_.size(); }

 private:
  // Everything the heuristic's answer depends on.
  using Key = std::tuple<bool, bool, int, int, int, int, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                         std::int64_t, std::int64_t, int, int, unsigned>;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  struct Plan;  // descriptors and algorithm of one key, built at its first call
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace loom::kernels
