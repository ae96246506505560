// CPU backend: memory, GEMM, element-wise, normalisation, activation and optimizer ops.
#include "exec/cpu/cpu_backend.h"
#include "exec/cpu/cpu_loops.h"
#include "exec/cpu/vector_math.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/numerics.h"

#include <Eigen/Core>

#ifdef LOOM_EXEC_CBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int num_threads);
extern "C" int openblas_get_parallel();  // 0: single-threaded build, 1: its own pthreads, 2: OpenMP
#endif
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace loom::exec {

namespace {
using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Stride = Eigen::OuterStride<>;
using ConstMap = Eigen::Map<const RowMajor, 0, Stride>;
using Map = Eigen::Map<RowMajor, 0, Stride>;
}  // namespace

const char* cpu_gemm_library() {
#ifdef LOOM_EXEC_CBLAS
  switch (openblas_get_parallel()) {
    case 0: return "openblas (single-threaded build)";
    case 2: return "openblas (openmp)";
    default: return "openblas (pthreads)";
  }
#else
  return "eigen";
#endif
}

void set_cpu_threads(int threads) {
  if (threads < 1) threads = 1;
#if defined(LOOM_EXEC_CBLAS) && defined(_OPENMP)
  // GEMMs run in fixed panels on the OpenMP team (CpuBackend::gemm), each sgemm on one thread (inside a
  // parallel region OpenBLAS's OpenMP build runs serially). It sets the team's size here too, so the team
  // is sized after it.
  openblas_set_num_threads(1);
#elif defined(LOOM_EXEC_CBLAS)
  openblas_set_num_threads(threads);
#endif
#ifdef _OPENMP
  omp_set_num_threads(threads);
#endif
  Eigen::setNbThreads(threads);
}

void eigen_sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                 int ldb, float beta, float* c, int ldc) {
  ConstMap A(a, trans_a ? k : m, trans_a ? m : k, Stride(lda));
  ConstMap B(b, trans_b ? n : k, trans_b ? k : n, Stride(ldb));
  Map C(c, m, n, Stride(ldc));
  if (beta == 0.0f)
    C.setZero();
  else if (beta != 1.0f)
    C *= beta;
  if (trans_a && trans_b)
    C.noalias() += alpha * (A.transpose() * B.transpose());
  else if (trans_a)
    C.noalias() += alpha * (A.transpose() * B);
  else if (trans_b)
    C.noalias() += alpha * (A * B.transpose());
  else
    C.noalias() += alpha * (A * B);
}

void CpuBackend::gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, ConstTensorRef a_r, int lda,
                      ConstTensorRef b_r, int ldb, float beta, TensorRef c_r, int ldc) {
  const float* a = f32(a_r, "gemm");
  const float* b = f32(b_r, "gemm");
  float* c = f32(c_r, "gemm");
  if (m == 0 || n == 0) return;
#if defined(LOOM_EXEC_CBLAS) && defined(_OPENMP)
  // Fixed panels of C, each one single-threaded sgemm on the OpenMP team (OpenBLAS runs serially inside a
  // parallel region), so the bits do not depend on the thread count: OpenBLAS's own threading splits C
  // by thread count, and its Haswell kernels (also what 0.3.21 picks on AVX-512 AMD EPYC) round a row
  // differently by where it falls in the split (1 and 2 threads differed on every training shape). The
  // panels cut the longer side of C, so each extra panel packs the operand along the shorter side once
  // more (what a panel costs beside OpenBLAS's one call: on a cold cache, smaller tiles of both sides ran
  // the profile's GEMMs 10 % slower). An even number of equal panels of at most 1024 (whole below 256), so
  // two threads share any C evenly. The split follows from the shape alone.
  const bool rows = m >= n;
  const int side = rows ? m : n;
  const int count = side < 256 ? 1 : 2 * ((side + 2047) / 2048);
  const int panel = count == 1 ? side : (side / count + 15) / 16 * 16;
  const int panels = (side + panel - 1) / panel;
  const auto tile = [&](int t) {
    const int first = t * panel, width = std::min(panel, side - first);
    const int i = rows ? first : 0, j = rows ? 0 : first;
    const int tm = rows ? width : m, tn = rows ? n : width;
    const float* at = trans_a ? a + i : a + static_cast<std::int64_t>(i) * lda;
    const float* bt = trans_b ? b + static_cast<std::int64_t>(j) * ldb : b + j;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, tm, tn, k,
                alpha, at, lda, bt, ldb, beta, c + static_cast<std::int64_t>(i) * ldc + j, ldc);
  };
  // Even one panel runs inside the region: outside one, OpenBLAS's OpenMP build takes the team's size for
  // its own threads whatever openblas_set_num_threads said.
#pragma omp parallel for schedule(static)
  for (int t = 0; t < panels; ++t) tile(t);
#elif defined(LOOM_EXEC_CBLAS)
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha,
              a, lda, b, ldb, beta, c, ldc);
#else
  eigen_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#endif
}

// Freed blocks are kept per size and handed out again (as PyTorch's caching allocator does): a
// training step allocates the same shapes every micro-batch, and fresh pages cost page faults.
void* CpuBackend::allocate_raw(std::int64_t bytes) {
  const std::size_t aligned = (static_cast<std::size_t>(bytes) + 63) / 64 * 64;
  auto it = free_blocks_.find(aligned);
  if (it != free_blocks_.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    block_sizes_[p] = aligned;
    return p;
  }
  void* p = std::aligned_alloc(64, aligned);
  if (p == nullptr) throw std::bad_alloc();
  block_sizes_[p] = aligned;
  return p;
}

void CpuBackend::free_raw(void* data) {
  auto it = block_sizes_.find(data);
  free_blocks_[it->second].push_back(data);
  block_sizes_.erase(it);
}

CpuBackend::~CpuBackend() {
  for (auto& [size, blocks] : free_blocks_)
    for (void* p : blocks) std::free(p);
}

float* f32(TensorRef r, const char* op) {
  if (!r.null() && r.dtype() != DType::kF32)
    throw std::logic_error(std::string("cpu backend: ") + op + " on " + to_string(r.dtype()) +
                           " data is not implemented (the CPU backend computes in fp32)");
  return static_cast<float*>(r.raw());
}
const float* f32(ConstTensorRef r, const char* op) { return f32(TensorRef(const_cast<void*>(r.raw()), r.dtype()), op); }

// clflush of every 64-byte line (x86; elsewhere the lines stay where they are).
void CpuBackend::evict_from_cache([[maybe_unused]] ConstTensorRef x, [[maybe_unused]] std::int64_t bytes) {
#if defined(__x86_64__) || defined(__i386__)
  const char* p = static_cast<const char*>(x.raw());
  for (std::int64_t i = 0; i < bytes; i += 64) _mm_clflush(p + i);
  _mm_mfence();
#endif
}

// Zeroing and same-dtype copies move bytes, so they serve every dtype.
void CpuBackend::zero(TensorRef x, std::int64_t n) {
  std::memset(x.raw(), 0, static_cast<std::size_t>(n * dtype_bytes(x.dtype())));
}
void CpuBackend::copy(TensorRef dst, ConstTensorRef src, std::int64_t n) {
  if (dst.dtype() != src.dtype()) {
    cast(dst, src, n);
    return;
  }
  if (dst.raw() != src.raw())
    std::memmove(dst.raw(), src.raw(), static_cast<std::size_t>(n * dtype_bytes(dst.dtype())));
}

void CpuBackend::cast(TensorRef dst, ConstTensorRef src, std::int64_t n) {
  if (dst.dtype() == src.dtype()) {
    copy(dst, src, n);
  } else if (dst.dtype() == DType::kBF16 && src.dtype() == DType::kF32) {
    std::uint16_t* d = dst.as<std::uint16_t>();
    const float* x = src.as<float>();
    for (std::int64_t i = 0; i < n; ++i) d[i] = kernels::bf16_bits_from_float(x[i]);
  } else if (dst.dtype() == DType::kF32 && src.dtype() == DType::kBF16) {
    float* d = dst.as<float>();
    const std::uint16_t* x = src.as<std::uint16_t>();
    for (std::int64_t i = 0; i < n; ++i) d[i] = kernels::float_from_bf16_bits(x[i]);
  } else {
    throw std::logic_error(std::string("cpu backend: cast from ") + to_string(src.dtype()) + " to " +
                           to_string(dst.dtype()) + " is not implemented");
  }
}
namespace {
LOOM_CPU_CLONES void axpy_kernel(float* y, float alpha, const float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}
LOOM_CPU_CLONES void add_kernel(float* out, const float* a, const float* b, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
LOOM_CPU_CLONES void scale_kernel(float* x, float alpha, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) x[i] *= alpha;
}
// Σ x² in double over eight interleaved lanes, added in a fixed order: vectorises without reassociating,
// so every build and every thread count gets the same sum.
LOOM_CPU_CLONES double sum_squares_kernel(const float* x, std::int64_t n) {
  double lane[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) lane[l] += static_cast<double>(x[i + l]) * x[i + l];
  for (; i < n; ++i) lane[i % 8] += static_cast<double>(x[i]) * x[i];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}
// dbias[c] += Σ_r dy[r, c] over rows [r0, r1): vectorised over the columns.
LOOM_CPU_CLONES void column_sums(float* out, const float* dy, std::int64_t r0, std::int64_t r1, std::int64_t cols) {
  for (std::int64_t r = r0; r < r1; ++r)
    for (std::int64_t c = 0; c < cols; ++c) out[c] += dy[r * cols + c];
}

// A reduction over rows (bias and norm weight gradients) in blocks of kRowBlock rows on the team:
// f(r0, r1, sums) adds rows [r0, r1) into its block's K zeroed arrays of `cols`, and the blocks' sums
// are then added into outs[0..K) in block order.
constexpr std::int64_t kRowBlock = 64;
template <std::size_t K, class F>
void sum_row_blocks(std::int64_t rows, std::int64_t cols, const std::array<float*, K>& outs, F&& f) {
  const std::int64_t blocks = chunk_count(rows, kRowBlock);
  std::vector<float> partial(static_cast<std::size_t>(K * blocks * cols), 0.0f);
  auto sums = [&](std::int64_t blk, std::size_t k) { return &partial[(K * blk + k) * cols]; };
  for_blocks(rows, kRowBlock, rows * cols, [&](std::int64_t r0, std::int64_t r1, std::int64_t blk) {
    std::array<float*, K> mine;
    for (std::size_t k = 0; k < K; ++k) mine[k] = sums(blk, k);
    f(r0, r1, mine);
  });
  for (std::int64_t blk = 0; blk < blocks; ++blk)
    for (std::size_t k = 0; k < K; ++k) axpy_kernel(outs[k], 1.0f, sums(blk, k), cols);
}
}  // namespace

void CpuBackend::axpy(TensorRef y_r, float alpha, ConstTensorRef x_r, std::int64_t n) {
  float* y = f32(y_r, "axpy");
  const float* x = f32(x_r, "axpy");
  for_chunks(n, [&](std::int64_t b, std::int64_t e, std::int64_t) { axpy_kernel(y + b, alpha, x + b, e - b); });
}
void CpuBackend::add(TensorRef out_r, ConstTensorRef a_r, ConstTensorRef b_r, std::int64_t n) {
  float* out = f32(out_r, "add");
  const float* a = f32(a_r, "add");
  const float* b = f32(b_r, "add");
  for_chunks(n, [&](std::int64_t lo, std::int64_t hi, std::int64_t) { add_kernel(out + lo, a + lo, b + lo, hi - lo); });
}
void CpuBackend::scale(TensorRef x_r, float alpha, std::int64_t n) {
  float* x = f32(x_r, "scale");
  for_chunks(n, [&](std::int64_t b, std::int64_t e, std::int64_t) { scale_kernel(x + b, alpha, e - b); });
}
void CpuBackend::add_bias(TensorRef x_r, ConstTensorRef bias_r, std::int64_t rows, std::int64_t cols) {
  float* x = f32(x_r, "add_bias");
  const float* bias = f32(bias_r, "add_bias");
#pragma omp parallel for if (rows * cols > kParallelWork)
  for (std::int64_t r = 0; r < rows; ++r) add_kernel(x + r * cols, x + r * cols, bias, cols);
}
void CpuBackend::bias_grad(float* dbias, ConstTensorRef dy_r, std::int64_t rows, std::int64_t cols) {
  const float* dy = f32(dy_r, "bias_grad");
  sum_row_blocks<1>(rows, cols, {dbias}, [&](std::int64_t r0, std::int64_t r1, const std::array<float*, 1>& sums) {
    column_sums(sums[0], dy, r0, r1, cols);
  });
}
double CpuBackend::sum_squares(ConstTensorRef x_r, std::int64_t n) {
  const float* x = f32(x_r, "sum_squares");
  std::vector<double> partial(static_cast<std::size_t>(chunk_count(n)));
  for_chunks(n, [&](std::int64_t b, std::int64_t e, std::int64_t c) { partial[c] = sum_squares_kernel(x + b, e - b); });
  double s = 0;
  for (double p : partial) s += p;
  return s;
}

void CpuBackend::layernorm_forward(TensorRef out_r, float* mean, float* rstd, ConstTensorRef x_r, ConstTensorRef w_r,
                                   ConstTensorRef b_r, std::int64_t rows, std::int64_t cols) {
  float* out = f32(out_r, "layernorm_forward");
  const float* x = f32(x_r, "layernorm_forward");
  const float* w = f32(w_r, "layernorm_forward");
  const float* b = f32(b_r, "layernorm_forward");
#pragma omp parallel for if (rows * cols > kParallelWork)
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float m = 0;
    for (std::int64_t c = 0; c < cols; ++c) m += xr[c];
    m /= static_cast<float>(cols);
    float var = 0;
    for (std::int64_t c = 0; c < cols; ++c) var += (xr[c] - m) * (xr[c] - m);
    var /= static_cast<float>(cols);
    const float s = 1.0f / std::sqrt(var + 1e-5f);
    float* o = out + r * cols;
    for (std::int64_t c = 0; c < cols; ++c) o[c] = (xr[c] - m) * s * w[c] + b[c];
    mean[r] = m;
    rstd[r] = s;
  }
}

namespace {
// Rows [r0, r1) of LayerNorm's backward: dx of each row, and the rows' dw and db added into dw, db.
LOOM_CPU_CLONES void layernorm_backward_rows(float* dx, float* dw, float* db, const float* dout, const float* x,
                                             const float* w, const float* mean, const float* rstd, std::int64_t r0,
                                             std::int64_t r1, std::int64_t cols) {
  for (std::int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * cols;
    const float* d = dout + r * cols;
    float dnorm_mean = 0, dnorm_norm_mean = 0;
    for (std::int64_t c = 0; c < cols; ++c) {
      const float norm = (xr[c] - mean[r]) * rstd[r];
      const float dnorm = w[c] * d[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
      dw[c] += norm * d[c];
      db[c] += d[c];
    }
    dnorm_mean /= static_cast<float>(cols);
    dnorm_norm_mean /= static_cast<float>(cols);
    float* dxr = dx + r * cols;
    for (std::int64_t c = 0; c < cols; ++c) {
      const float norm = (xr[c] - mean[r]) * rstd[r];
      dxr[c] = (w[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * rstd[r];
    }
  }
}
}  // namespace

void CpuBackend::layernorm_backward(TensorRef dx_r, float* dw, float* db, ConstTensorRef dout_r, ConstTensorRef x_r,
                                    ConstTensorRef w_r, const float* mean, const float* rstd, std::int64_t rows,
                                    std::int64_t cols) {
  float* dx = f32(dx_r, "layernorm_backward");
  const float* dout = f32(dout_r, "layernorm_backward");
  const float* x = f32(x_r, "layernorm_backward");
  const float* w = f32(w_r, "layernorm_backward");
  sum_row_blocks<2>(rows, cols, {dw, db}, [&](std::int64_t r0, std::int64_t r1, const std::array<float*, 2>& sums) {
    layernorm_backward_rows(dx, sums[0], sums[1], dout, x, w, mean, rstd, r0, r1, cols);
  });
}

void CpuBackend::rmsnorm_forward(TensorRef out_r, float* rstd, ConstTensorRef x_r, ConstTensorRef w_r,
                                 std::int64_t rows, std::int64_t cols) {
  float* out = f32(out_r, "rmsnorm_forward");
  const float* x = f32(x_r, "rmsnorm_forward");
  const float* w = f32(w_r, "rmsnorm_forward");
#pragma omp parallel for if (rows * cols > kParallelWork)
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float ms = 0;
    for (std::int64_t c = 0; c < cols; ++c) ms += xr[c] * xr[c];
    const float s = 1.0f / std::sqrt(ms / static_cast<float>(cols) + 1e-5f);
    for (std::int64_t c = 0; c < cols; ++c) out[r * cols + c] = xr[c] * s * w[c];
    rstd[r] = s;
  }
}

void CpuBackend::rmsnorm_backward(TensorRef dx_r, float* dw, ConstTensorRef dout_r, ConstTensorRef x_r,
                                  ConstTensorRef w_r, const float* rstd, std::int64_t rows, std::int64_t cols) {
  float* dx = f32(dx_r, "rmsnorm_backward");
  const float* dout = f32(dout_r, "rmsnorm_backward");
  const float* x = f32(x_r, "rmsnorm_backward");
  const float* w = f32(w_r, "rmsnorm_backward");
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    const float* d = dout + r * cols;
    float dot = 0;
    for (std::int64_t c = 0; c < cols; ++c) {
      dot += w[c] * d[c] * xr[c];
      dw[c] += xr[c] * rstd[r] * d[c];
    }
    const float k = dot * rstd[r] * rstd[r] * rstd[r] / static_cast<float>(cols);
    for (std::int64_t c = 0; c < cols; ++c) dx[r * cols + c] = w[c] * d[c] * rstd[r] - xr[c] * k;
  }
}

namespace {
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/π)
}

// tanh(u) = 1 − 2 / (1 + e^{2u}), saturating at ±1.
LOOM_ALWAYS_INLINE float fast_tanh(float u) { return 1.0f - 2.0f / (1.0f + vector_exp(2.0f * u)); }

namespace {
LOOM_CPU_CLONES void gelu_forward_kernel(float* out, const float* in, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float x = in[i];
    out[i] = 0.5f * x * (1.0f + fast_tanh(kGeluScale * (x + 0.044715f * x * x * x)));
  }
}
LOOM_CPU_CLONES void gelu_backward_kernel(float* din, const float* in, const float* dout, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float x = in[i];
    const float t = fast_tanh(kGeluScale * (x + 0.044715f * x * x * x));
    const float dt = (1.0f - t * t) * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    din[i] = dout[i] * (0.5f * (1.0f + t) + 0.5f * x * dt);
  }
}
}  // namespace

void CpuBackend::gelu_forward(TensorRef out_r, ConstTensorRef in_r, std::int64_t n) {
  float* out = f32(out_r, "gelu_forward");
  const float* in = f32(in_r, "gelu_forward");
  for_chunks(n, [&](std::int64_t b, std::int64_t e, std::int64_t) { gelu_forward_kernel(out + b, in + b, e - b); });
}

void CpuBackend::gelu_backward(TensorRef din_r, ConstTensorRef in_r, ConstTensorRef dout_r, std::int64_t n) {
  float* din = f32(din_r, "gelu_backward");
  const float* in = f32(in_r, "gelu_backward");
  const float* dout = f32(dout_r, "gelu_backward");
  for_chunks(
      n, [&](std::int64_t b, std::int64_t e, std::int64_t) { gelu_backward_kernel(din + b, in + b, dout + b, e - b); });
}

void CpuBackend::swiglu_forward(TensorRef out_r, ConstTensorRef in_r, std::int64_t rows, std::int64_t f) {
  float* out = f32(out_r, "swiglu_forward");
  const float* in = f32(in_r, "swiglu_forward");
#pragma omp parallel for if (rows * f > kParallelWork)
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < f; ++c) {
      const float g = in[r * 2 * f + c], u = in[r * 2 * f + f + c];
      out[r * f + c] = g / (1.0f + std::exp(-g)) * u;
    }
}

void CpuBackend::swiglu_backward(TensorRef din_r, ConstTensorRef in_r, ConstTensorRef dout_r, std::int64_t rows,
                                 std::int64_t f) {
  float* din = f32(din_r, "swiglu_backward");
  const float* in = f32(in_r, "swiglu_backward");
  const float* dout = f32(dout_r, "swiglu_backward");
#pragma omp parallel for if (rows * f > kParallelWork)
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < f; ++c) {
      const float g = in[r * 2 * f + c], u = in[r * 2 * f + f + c];
      const float sig = 1.0f / (1.0f + std::exp(-g));
      const float d = dout[r * f + c];
      din[r * 2 * f + c] = d * u * sig * (1.0f + g * (1.0f - sig));
      din[r * 2 * f + f + c] = d * g * sig;
    }
}

namespace {
// The square root is the instruction (sqrtps), not libm's errno-setting call: the file is compiled with
// -fno-math-errno, so the loop vectorises; the result is the same correctly rounded root.
LOOM_CPU_CLONES void adamw_kernel(float* param, const float* grad, float* m, float* v, std::int64_t n, float lr,
                                  float beta1, float beta2, float eps, float weight_decay, float c1, float c2) {
  for (std::int64_t i = 0; i < n; ++i) {
    m[i] = beta1 * m[i] + (1.0f - beta1) * grad[i];
    v[i] = beta2 * v[i] + (1.0f - beta2) * grad[i] * grad[i];
    const float mhat = m[i] / c1, vhat = v[i] / c2;
    param[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + weight_decay * param[i]);
  }
}
}  // namespace

void CpuBackend::adamw(float* param, const float* grad, float* m, float* v, std::int64_t n, float lr, float beta1,
                       float beta2, float eps, float weight_decay, int step, TensorRef param_copy) {
  const float c1 = 1.0f - std::pow(beta1, static_cast<float>(step));
  const float c2 = 1.0f - std::pow(beta2, static_cast<float>(step));
  for_chunks(n, [&](std::int64_t b, std::int64_t e, std::int64_t) {
    adamw_kernel(param + b, grad + b, m + b, v + b, e - b, lr, beta1, beta2, eps, weight_decay, c1, c2);
  });
  if (!param_copy.null() && param_copy.raw() != param) cast(param_copy, param, n);
}

}  // namespace loom::exec
