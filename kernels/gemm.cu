// cuBLASLt GEMM behind a row-major interface. Row-major C = op(A)·op(B) is column-major
// Cᵀ = op(B)ᵀ·op(A)ᵀ, so cuBLASLt is called with the operands swapped: its "A" is our B.
#include "kernels/gemm.h"

#include "kernels/cuda_check.h"

namespace loom::kernels {

namespace {
cudaDataType_t cuda_type(DType t) { return t == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F; }

std::int64_t element_bytes(DType t) { return t == DType::bf16 ? 2 : 4; }

// The largest power of two (≤ 256 bytes) dividing the address of every matrix of the batch: tells the
// heuristic which kernels may run.
std::uint32_t alignment(const void* p, DType type, std::int64_t batch_stride) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  const auto stride = static_cast<std::uintptr_t>(batch_stride * element_bytes(type));
  std::uint32_t a = 256;
  while (a > 1 && (address % a != 0 || stride % a != 0)) a /= 2;
  return a;
}

// A column-major layout of `rows`×`cols` with leading dimension ld, batched when batch > 1.
struct Layout {
  cublasLtMatrixLayout_t desc = nullptr;
  Layout(DType type, std::uint64_t rows, std::uint64_t cols, std::int64_t ld, int batch, std::int64_t stride) {
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc, cuda_type(type), rows, cols, ld));
    if (batch > 1) {
      CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(desc, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
      CUBLAS_CHECK(
          cublasLtMatrixLayoutSetAttribute(desc, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
    }
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(desc); }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};

struct MatmulDesc {
  cublasLtMatmulDesc_t desc = nullptr;
  MatmulDesc(bool trans_first, bool trans_second) {
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = trans_first ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = trans_second ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  }
  ~MatmulDesc() { cublasLtMatmulDescDestroy(desc); }
  MatmulDesc(const MatmulDesc&) = delete;
  MatmulDesc& operator=(const MatmulDesc&) = delete;
};

cublasLtMatmulAlgo_t pick_algorithm(cublasLtHandle_t handle, const MatmulDesc& op, const Layout& first,
                                    const Layout& second, const Layout& out, const std::uint32_t (&align)[3]) {
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const std::size_t bytes = Gemm::kWorkspaceBytes;
  CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof bytes));
  const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i)
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attrs[i], &align[i < 3 ? i : 2], sizeof(std::uint32_t)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, op.desc, first.desc, second.desc, out.desc, out.desc, pref, 1,
                                              &result, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  if (found == 0) cuda_fail("cuBLASLt", "no algorithm for this GEMM", __FILE__, __LINE__);
  return result.algo;
}
}  // namespace

// Everything one GEMM shape needs from cuBLASLt, made at its first call: the layouts, the operation
// and the heuristic's algorithm. Rebuilding the four descriptors per call cost host time on every
// GEMM of every micro-batch.
struct Gemm::Plan {
  Layout first, second, out;
  MatmulDesc op;
  cublasLtMatmulAlgo_t algorithm{};
  Plan(cublasLtHandle_t handle, const GemmShape& s, const Matrix& a, const Matrix& b, const OutMatrix& c,
       const std::uint32_t (&align)[3])
      // Column-major view: first = our B (n×k after op), second = our A (k×m after op), out = Cᵀ (n×m).
      : first(b.type, s.trans_b ? s.k : s.n, s.trans_b ? s.n : s.k, b.ld, s.batch, b.batch_stride),
        second(a.type, s.trans_a ? s.m : s.k, s.trans_a ? s.k : s.m, a.ld, s.batch, a.batch_stride),
        out(c.type, s.n, s.m, c.ld, s.batch, c.batch_stride),
        op(s.trans_b, s.trans_a),
        algorithm(pick_algorithm(handle, op, first, second, out, align)) {}
};

Gemm::Gemm() {
  CUBLAS_CHECK(cublasLtCreate(&handle_));
  CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
}

Gemm::~Gemm() {
  plans_.clear();  // the descriptors go before the handle
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

void Gemm::run(const GemmShape& s, float alpha, const Matrix& a, const Matrix& b, float beta, const OutMatrix& c,
               cudaStream_t stream) {
  if (s.m == 0 || s.n == 0 || s.batch == 0) return;
  // Alignments of cuBLASLt's A (our B), B (our A) and C/D.
  const std::uint32_t align[3] = {alignment(b.data, b.type, b.batch_stride), alignment(a.data, a.type, a.batch_stride),
                                  alignment(c.data, c.type, c.batch_stride)};
  const Key key{s.trans_a,
                s.trans_b,
                s.m,
                s.n,
                s.k,
                s.batch,
                a.ld,
                b.ld,
                c.ld,
                a.batch_stride,
                b.batch_stride,
                c.batch_stride,
                static_cast<int>(a.type),
                static_cast<int>(c.type),
                align[0] | align[1] << 9 | align[2] << 18};
  auto it = plans_.find(key);
  if (it == plans_.end()) it = plans_.emplace(key, std::make_unique<Plan>(handle_, s, a, b, c, align)).first;
  const Plan& p = *it->second;
  CUBLAS_CHECK(cublasLtMatmul(handle_, p.op.desc, &alpha, b.data, p.first.desc, a.data, p.second.desc, &beta, c.data,
                              p.out.desc, c.data, p.out.desc, &p.algorithm, workspace_, kWorkspaceBytes, stream));
}

}  // namespace loom::kernels
