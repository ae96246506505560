// CUDA backend: device, stream and memory; host <-> device copies; the ops, each dispatched on its views'
// dtype to a kernels/ launcher queued on the backend's stream.
#include "exec/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <fmt/format.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/cuda/dispatch.h"
#include "exec/device_peak.h"
#include "exec/device_placement.h"
#include "kernels/attention.h"
#include "kernels/cuda_check.h"
#include "kernels/flash_attention.h"
#include "kernels/gemm.h"
#include "kernels/numerics.h"
#include "kernels/ops.h"

namespace loom::exec {

using cuda::bf16;
using cuda::dev;

namespace {

class CudaDeviceMemory final : public DeviceMemory {
 public:
  void* allocate(std::size_t bytes) override {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) == cudaSuccess) return p;
    (void)cudaGetLastError();  // out of memory is recoverable: clear it so no later check reports it
    return nullptr;
  }
  void free(void* p) override { CUDA_CHECK(cudaFree(p)); }
  std::size_t free_bytes() override {
    std::size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) (void)cudaGetLastError();
    return free;
  }
};

// A point in the compute stream; with `timing`, its time too (cudaEventElapsedTime: about 0.5 µs
// resolution). Events without timing are cheaper to record: communication waits on those.
class CudaEvent final : public TimedEvent {
 public:
  CudaEvent(cudaStream_t stream, bool timing) {
    CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(event_, stream));
  }
  ~CudaEvent() override { cudaEventDestroy(event_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  bool done() const override {
    const cudaError_t status = cudaEventQuery(event_);
    if (status == cudaErrorNotReady) return false;
    CUDA_CHECK(status);
    return true;
  }
  void synchronize() override { CUDA_CHECK(cudaEventSynchronize(event_)); }
  double microseconds_since(TimedEvent& earlier) override {
    const cudaEvent_t from = dynamic_cast<CudaEvent&>(earlier).event_;
    CUDA_CHECK(cudaEventSynchronize(from));
    CUDA_CHECK(cudaEventSynchronize(event_));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, from, event_));
    return 1e3 * static_cast<double>(ms);
  }

 private:
  cudaEvent_t event_ = nullptr;
};

kernels::AttentionDims dims(const AttentionShape& s) { return {s.batch, s.seq, s.heads, s.kv_heads, s.head_dim}; }
kernels::BlockDims block_dims(const AttentionShape& s, int kv_ld, int kv_rank, const AttentionDropout& drop) {
  return {dims(s), s.cp, s.cp_rank, kv_rank, kv_ld, drop.p, drop.key, drop.first, drop.heads_total};
}

kernels::DType gemm_type(DType d, const char* what) {
  if (d == DType::kF32) return kernels::DType::f32;
  if (d == DType::kBF16) return kernels::DType::bf16;
  cuda::unsupported(what, {d});
}

bool is_device_pointer(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

// Statistics, masks, fp32 gradients and optimizer state are backend tensors; a host array here is an
// executor bug, reported by name rather than as an illegal address at the next synchronisation.
template <class P>
P* on_device(P* p, const char* op, const char* what) {
  if (p != nullptr && !is_device_pointer(p))
    throw std::logic_error(std::string("cuda backend: ") + op + ": " + what +
                           " is host memory; allocate it through the backend");
  return p;
}

}  // namespace

// --- device, stream, memory --------------------------------------------------------------------------

int cuda_device_count(std::string* why_none) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    if (why_none != nullptr)
      *why_none = status != cudaSuccess ? cudaGetErrorString(status) : "cudaGetDeviceCount found 0 devices";
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

std::unique_ptr<Backend> make_cuda_backend(std::string* error, NodeSlot slot) {
  std::string why;
  const int count = cuda_device_count(&why);
  if (count == 0) {
    if (error != nullptr) *error = "--backend cuda: no CUDA device (" + why + ")";
    return nullptr;
  }
  const Result<DevicePlacement> placement = place_rank_on_device(slot.local_rank, slot.local_size, count);
  if (!placement) {
    if (error != nullptr) *error = "--backend cuda: " + placement.error().message;
    return nullptr;
  }
  // Before anything allocates: every later CUDA call of this process (allocator, cuBLASLt, kernels)
  // goes to the current device.
  CUDA_CHECK(cudaSetDevice(placement->device));
  return std::make_unique<CudaBackend>(placement->device);
}

CudaBackend::CudaBackend(int device)
    : device_(device), allocator_(std::make_unique<DeviceAllocator>(std::make_unique<CudaDeviceMemory>())) {
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  gemm_ = std::make_unique<kernels::Gemm>();
  sum_squares_scratch_ = static_cast<double*>(
      allocator_->allocate(kernels::kSumSquaresScratch * static_cast<std::int64_t>(sizeof(double))));
  device_sum_squares_ = static_cast<double*>(
      allocator_->allocate(kernels::kSumSquaresScratch * static_cast<std::int64_t>(sizeof(double))));
  device_loss_ = static_cast<double*>(allocator_->allocate(static_cast<std::int64_t>(sizeof(double))));
}

CudaBackend::~CudaBackend() {
  cudaStreamSynchronize(stream_);
  allocator_->free(sum_squares_scratch_);
  allocator_->free(device_sum_squares_);
  allocator_->free(device_loss_);
  allocator_->free(ints_);
  gemm_.reset();
  allocator_.reset();
  cudaStreamDestroy(stream_);
}

void* CudaBackend::allocate_raw(std::int64_t bytes) { return allocator_->allocate(bytes); }
// Single stream: a block freed here is reused only by work queued after what was reading it.
void CudaBackend::free_raw(void* data) { allocator_->free(data); }

void CudaBackend::synchronize() { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

double CudaBackend::peak_flops() const {
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, device_));
  return preset_peak_flops(p.name);
}

std::map<std::string, std::string> CudaBackend::device_provenance() const {
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, device_));
  int driver = 0, runtime = 0, sm_khz = 0, memory_khz = 0;
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  CUDA_CHECK(cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, device_));
  CUDA_CHECK(cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, device_));
  const auto version = [](int v) { return fmt::format("{}.{}", v / 1000, v % 1000 / 10); };
  return {{"gpu", p.name},
          {"gpu_compute_capability", fmt::format("{}.{}", p.major, p.minor)},
          {"gpu_multiprocessors", std::to_string(p.multiProcessorCount)},
          {"gpu_memory_bytes", std::to_string(p.totalGlobalMem)},
          {"gpu_sm_clock_max_mhz", std::to_string(sm_khz / 1000)},
          {"gpu_memory_clock_max_mhz", std::to_string(memory_khz / 1000)},
          {"cuda_driver_api", version(driver)},
          {"cuda_runtime", version(runtime)},
          {"gpu_uuid", device_uuid()}};
}

std::string CudaBackend::device_uuid() const {
  cudaDeviceProp properties{};
  CUDA_CHECK(cudaGetDeviceProperties(&properties, device_));
  return gpu_uuid_text(reinterpret_cast<const unsigned char(&)[16]>(properties.uuid.bytes));
}

std::unique_ptr<Event> CudaBackend::record_event() { return std::make_unique<CudaEvent>(stream_, false); }
std::unique_ptr<TimedEvent> CudaBackend::record_timed_event() { return std::make_unique<CudaEvent>(stream_, true); }

const int* CudaBackend::device_ints(const int* p, std::int64_t n) {
  if (p == nullptr || n == 0 || is_device_pointer(p)) return p;
  if (n > ints_capacity_) {
    allocator_->free(ints_);
    ints_ = allocator_->allocate(n * static_cast<std::int64_t>(sizeof(int)));
    ints_capacity_ = n;
  }
  // From pageable memory the call returns once the values are staged: the caller may free them.
  CUDA_CHECK(cudaMemcpyAsync(ints_, p, static_cast<std::size_t>(n) * sizeof(int), cudaMemcpyHostToDevice, stream_));
  return static_cast<const int*>(ints_);
}

// --- host <-> device ---------------------------------------------------------------------------------

void CudaBackend::download(void* host, ConstTensorRef src, std::int64_t n) {
  if (n == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(host, src.raw(), static_cast<std::size_t>(n) * dtype_bytes(src.dtype()),
                             cudaMemcpyDeviceToHost, stream_));
  synchronize();
}

void CudaBackend::upload(TensorRef dst, const void* host, std::int64_t n) {
  if (n == 0) return;
  // From pageable memory the call returns once the values are staged: the caller may reuse `host`.
  CUDA_CHECK(cudaMemcpyAsync(dst.raw(), host, static_cast<std::size_t>(n) * dtype_bytes(dst.dtype()),
                             cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::to_host(float* host, ConstTensorRef src, std::int64_t n) {
  if (n == 0) return;
  if (src.dtype() == DType::kF32) {
    CUDA_CHECK(
        cudaMemcpyAsync(host, src.raw(), static_cast<std::size_t>(n) * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    synchronize();
  } else if (src.dtype() == DType::kBF16) {
    std::vector<std::uint16_t> bits(static_cast<std::size_t>(n));
    CUDA_CHECK(
        cudaMemcpyAsync(bits.data(), src.raw(), bits.size() * sizeof(std::uint16_t), cudaMemcpyDeviceToHost, stream_));
    synchronize();
    for (std::int64_t i = 0; i < n; ++i) host[i] = kernels::float_from_bf16_bits(bits[static_cast<std::size_t>(i)]);
  } else {
    cuda::unsupported("to_host", {src.dtype()});
  }
}

void CudaBackend::from_host(TensorRef dst, const float* host, std::int64_t n) {
  if (n == 0) return;
  if (dst.dtype() == DType::kF32) {
    CUDA_CHECK(
        cudaMemcpyAsync(dst.raw(), host, static_cast<std::size_t>(n) * sizeof(float), cudaMemcpyHostToDevice, stream_));
    synchronize();
  } else if (dst.dtype() == DType::kBF16) {
    // Rounded on the host exactly as the CPU backend's cast (nearest even), then copied.
    std::vector<std::uint16_t> bits(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) bits[static_cast<std::size_t>(i)] = kernels::bf16_bits_from_float(host[i]);
    CUDA_CHECK(
        cudaMemcpyAsync(dst.raw(), bits.data(), bits.size() * sizeof(std::uint16_t), cudaMemcpyHostToDevice, stream_));
    synchronize();
  } else {
    cuda::unsupported("from_host", {dst.dtype()});
  }
}

void CudaBackend::cast(TensorRef dst, ConstTensorRef src, std::int64_t n) {
  if (dst.dtype() == src.dtype())
    copy(dst, src, n);
  else if (dst.dtype() == DType::kBF16 && src.dtype() == DType::kF32)
    kernels::cast(dev<bf16>(dst), dev<float>(src), n, stream_);
  else if (dst.dtype() == DType::kF32 && src.dtype() == DType::kBF16)
    kernels::cast(dev<float>(dst), dev<bf16>(src), n, stream_);
  else
    cuda::unsupported("cast", {src.dtype(), dst.dtype()});
}

// Strided rows in one call (the base class casts row by row: a launch per row).
void CudaBackend::copy_rows(TensorRef dst, std::int64_t ld_dst, ConstTensorRef src, std::int64_t ld_src,
                            std::int64_t rows, std::int64_t cols) {
  if (rows == 0 || cols == 0) return;
  if (dst.dtype() == src.dtype()) {
    const std::size_t e = static_cast<std::size_t>(dtype_bytes(dst.dtype()));
    CUDA_CHECK(cudaMemcpy2DAsync(dst.raw(), static_cast<std::size_t>(ld_dst) * e, src.raw(),
                                 static_cast<std::size_t>(ld_src) * e, static_cast<std::size_t>(cols) * e,
                                 static_cast<std::size_t>(rows), cudaMemcpyDeviceToDevice, stream_));
  } else if (dst.dtype() == DType::kBF16 && src.dtype() == DType::kF32) {
    kernels::cast_rows(dev<bf16>(dst), ld_dst, dev<float>(src), ld_src, rows, cols, stream_);
  } else if (dst.dtype() == DType::kF32 && src.dtype() == DType::kBF16) {
    kernels::cast_rows(dev<float>(dst), ld_dst, dev<bf16>(src), ld_src, rows, cols, stream_);
  } else {
    cuda::unsupported("copy_rows", {src.dtype(), dst.dtype()});
  }
}

// --- GEMM --------------------------------------------------------------------------------------------

void CudaBackend::gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, ConstTensorRef a, int lda,
                       ConstTensorRef b, int ldb, float beta, TensorRef c, int ldc) {
  if (m == 0 || n == 0) return;
  if (a.dtype() != b.dtype()) cuda::unsupported("gemm", {a.dtype(), b.dtype()});
  if (k == 0) {  // C = beta·C: no product to run (cuBLASLt rejects k = 0)
    for (int row = 0; row < m; ++row) {
      const TensorRef c_row = c + static_cast<std::int64_t>(row) * ldc;
      if (beta == 0.0f)
        zero(c_row, n);
      else if (beta != 1.0f)
        scale(c_row, beta, n);
    }
    return;
  }
  gemm_->run(trans_a, trans_b, m, n, k, alpha, a.raw(), gemm_type(a.dtype(), "gemm"), lda, b.raw(), ldb, beta, c.raw(),
             gemm_type(c.dtype(), "gemm"), ldc, stream_);
}

// --- element-wise ------------------------------------------------------------------------------------

void CudaBackend::zero(TensorRef x, std::int64_t n) {
  if (n > 0) CUDA_CHECK(cudaMemsetAsync(x.raw(), 0, static_cast<std::size_t>(n * dtype_bytes(x.dtype())), stream_));
}

void CudaBackend::copy(TensorRef dst, ConstTensorRef src, std::int64_t n) {
  if (dst.dtype() != src.dtype()) return cast(dst, src, n);
  if (n > 0 && dst.raw() != src.raw())
    CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), static_cast<std::size_t>(n * dtype_bytes(dst.dtype())),
                               cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::axpy(TensorRef y, float alpha, ConstTensorRef x, std::int64_t n) {
  if (y.dtype() == DType::kF32 && x.dtype() == DType::kBF16)  // a bf16 gradient into an fp32 main gradient
    return kernels::axpy(dev<float>(y), alpha, dev<bf16>(x), n, stream_);
  LOOM_CUDA_OP("axpy", kernels::axpy(dev<T>(y), alpha, dev<T>(x), n, stream_), y, x);
}
void CudaBackend::add(TensorRef out, ConstTensorRef a, ConstTensorRef b, std::int64_t n) {
  LOOM_CUDA_OP("add", kernels::add(dev<T>(out), dev<T>(a), dev<T>(b), n, stream_), out, a, b);
}
void CudaBackend::scale(TensorRef x, float alpha, std::int64_t n) {
  LOOM_CUDA_OP("scale", kernels::scale(dev<T>(x), alpha, n, stream_), x);
}
void CudaBackend::add_bias(TensorRef x, ConstTensorRef bias, std::int64_t rows, std::int64_t cols) {
  LOOM_CUDA_OP("add_bias", kernels::add_bias(dev<T>(x), dev<T>(bias), rows, cols, stream_), x, bias);
}
void CudaBackend::bias_grad(float* dbias, ConstTensorRef dy, std::int64_t rows, std::int64_t cols) {
  on_device(dbias, "bias_grad", "dbias");
  LOOM_CUDA_OP("bias_grad", kernels::bias_grad(dbias, dev<T>(dy), rows, cols, stream_), dy);
}

// A reduction the optimizer needs on the host (the global gradient norm): waits for the stream.
double CudaBackend::sum_squares(ConstTensorRef x, std::int64_t n) {
  if (n == 0) return 0.0;
  LOOM_CUDA_OP("sum_squares", kernels::sum_squares(sum_squares_scratch_, dev<T>(x), n, stream_), x);
  return read_double(sum_squares_scratch_);
}

double CudaBackend::read_double(const double* device) {
  double result = 0;
  CUDA_CHECK(cudaMemcpyAsync(&result, device, sizeof(double), cudaMemcpyDeviceToHost, stream_));
  synchronize();
  return result;
}

// The global gradient norm over every parameter's gradient: queued, read once.
void CudaBackend::sum_squares_reset() { CUDA_CHECK(cudaMemsetAsync(device_sum_squares_, 0, sizeof(double), stream_)); }
void CudaBackend::sum_squares_add(ConstTensorRef x, std::int64_t n) {
  if (n == 0) return;
  LOOM_CUDA_OP("sum_squares", kernels::sum_squares(device_sum_squares_, dev<T>(x), n, stream_, true), x);
}
double CudaBackend::sum_squares_result() { return read_double(device_sum_squares_); }

// The step's token losses: added on the stream per micro-batch, read once (PipelineRunner::run).
void CudaBackend::loss_reset() { CUDA_CHECK(cudaMemsetAsync(device_loss_, 0, sizeof(double), stream_)); }
void CudaBackend::loss_add(const float* max, const float* sum_exp, const float* target, std::int64_t rows) {
  on_device(max, "loss_add", "max");
  on_device(sum_exp, "loss_add", "sum_exp");
  on_device(target, "loss_add", "target");
  kernels::add_token_losses(device_loss_, max, sum_exp, target, rows, stream_);
}
double CudaBackend::loss_result() { return read_double(device_loss_); }

// --- normalisation and activations -------------------------------------------------------------------

void CudaBackend::layernorm_forward(TensorRef out, float* mean, float* rstd, ConstTensorRef x, ConstTensorRef w,
                                    ConstTensorRef b, std::int64_t rows, std::int64_t cols) {
  on_device(mean, "layernorm_forward", "mean");
  on_device(rstd, "layernorm_forward", "rstd");
  LOOM_CUDA_OP(
      "layernorm_forward",
      kernels::layernorm_forward(dev<T>(out), mean, rstd, dev<T>(x), dev<T>(w), dev<T>(b), rows, cols, stream_), out, x,
      w, b);
}
void CudaBackend::layernorm_backward(TensorRef dx, float* dw, float* db, ConstTensorRef dout, ConstTensorRef x,
                                     ConstTensorRef w, const float* mean, const float* rstd, std::int64_t rows,
                                     std::int64_t cols) {
  on_device(dw, "layernorm_backward", "dw");
  on_device(db, "layernorm_backward", "db");
  on_device(mean, "layernorm_backward", "mean");
  on_device(rstd, "layernorm_backward", "rstd");
  LOOM_CUDA_OP("layernorm_backward",
               kernels::layernorm_backward(dev<T>(dx), dw, db, dev<T>(dout), dev<T>(x), dev<T>(w), mean, rstd, rows,
                                           cols, stream_),
               dx, dout, x, w);
}
void CudaBackend::rmsnorm_forward(TensorRef out, float* rstd, ConstTensorRef x, ConstTensorRef w, std::int64_t rows,
                                  std::int64_t cols) {
  on_device(rstd, "rmsnorm_forward", "rstd");
  LOOM_CUDA_OP("rmsnorm_forward",
               kernels::rmsnorm_forward(dev<T>(out), rstd, dev<T>(x), dev<T>(w), rows, cols, stream_), out, x, w);
}
void CudaBackend::rmsnorm_backward(TensorRef dx, float* dw, ConstTensorRef dout, ConstTensorRef x, ConstTensorRef w,
                                   const float* rstd, std::int64_t rows, std::int64_t cols) {
  on_device(dw, "rmsnorm_backward", "dw");
  on_device(rstd, "rmsnorm_backward", "rstd");
  LOOM_CUDA_OP("rmsnorm_backward",
               kernels::rmsnorm_backward(dev<T>(dx), dw, dev<T>(dout), dev<T>(x), dev<T>(w), rstd, rows, cols, stream_),
               dx, dout, x, w);
}

void CudaBackend::gelu_forward(TensorRef out, ConstTensorRef in, std::int64_t n) {
  LOOM_CUDA_OP("gelu_forward", kernels::gelu_forward(dev<T>(out), dev<T>(in), n, stream_), out, in);
}
void CudaBackend::gelu_backward(TensorRef din, ConstTensorRef in, ConstTensorRef dout, std::int64_t n) {
  LOOM_CUDA_OP("gelu_backward", kernels::gelu_backward(dev<T>(din), dev<T>(in), dev<T>(dout), n, stream_), din, in,
               dout);
}
void CudaBackend::swiglu_forward(TensorRef out, ConstTensorRef in, std::int64_t rows, std::int64_t f) {
  LOOM_CUDA_OP("swiglu_forward", kernels::swiglu_forward(dev<T>(out), dev<T>(in), rows, f, stream_), out, in);
}
void CudaBackend::swiglu_backward(TensorRef din, ConstTensorRef in, ConstTensorRef dout, std::int64_t rows,
                                  std::int64_t f) {
  LOOM_CUDA_OP("swiglu_backward", kernels::swiglu_backward(dev<T>(din), dev<T>(in), dev<T>(dout), rows, f, stream_),
               din, in, dout);
}

// --- attention, dropout, rotary embedding ------------------------------------------------------------

void CudaBackend::attention_probs(TensorRef probs, ConstTensorRef qkv, const AttentionShape& s) {
  LOOM_CUDA_OP("attention_probs", kernels::attention_probs(*gemm_, dev<T>(probs), dev<T>(qkv), dims(s), stream_), probs,
               qkv);
}
void CudaBackend::attention_context(TensorRef ctx, ConstTensorRef probs, ConstTensorRef qkv, const AttentionShape& s) {
  LOOM_CUDA_OP("attention_context",
               kernels::attention_context(*gemm_, dev<T>(ctx), dev<T>(probs), dev<T>(qkv), dims(s), stream_), ctx,
               probs, qkv);
}
void CudaBackend::attention_backward(TensorRef dqkv, ConstTensorRef dctx, ConstTensorRef probs, ConstTensorRef dropped,
                                     const std::uint8_t* mask, float keep_scale, ConstTensorRef qkv,
                                     const AttentionShape& s) {
  on_device(mask, "attention_backward", "mask");
  // Scratch for the probabilities' gradient, as the CPU backend's is: not charged to a category. Freed
  // right after queueing: the next user of the block is queued after this backward on the same stream.
  void* scratch = allocator_->allocate(s.probs_numel() * dtype_bytes(dqkv.dtype()));
  LOOM_CUDA_OP("attention_backward",
               kernels::attention_backward(*gemm_, dev<T>(dqkv), static_cast<T*>(scratch), dev<T>(dctx), dev<T>(probs),
                                           dev<T>(dropped), mask, keep_scale, dev<T>(qkv), dims(s), stream_),
               dqkv, dctx, probs, dropped, qkv);
  allocator_->free(scratch);
}
void CudaBackend::attention_block_forward(float* acc, float* row_max, float* row_sum, ConstTensorRef qkv,
                                          ConstTensorRef kv, int kv_ld, int kv_rank, const AttentionShape& s,
                                          const AttentionDropout& drop) {
  on_device(acc, "attention_block_forward", "acc");
  on_device(row_max, "attention_block_forward", "row_max");
  on_device(row_sum, "attention_block_forward", "row_sum");
  LOOM_CUDA_OP("attention_block_forward",
               kernels::attention_block_forward(acc, row_max, row_sum, dev<T>(qkv), dev<T>(kv),
                                                block_dims(s, kv_ld, kv_rank, drop), stream_),
               qkv, kv);
}
void CudaBackend::attention_block_finish(TensorRef ctx, float* lse, const float* acc, const float* row_max,
                                         const float* row_sum, const AttentionShape& s) {
  on_device(lse, "attention_block_finish", "lse");
  LOOM_CUDA_OP("attention_block_finish",
               kernels::attention_block_finish(dev<T>(ctx), lse, acc, row_max, row_sum, dims(s), stream_), ctx);
}
void CudaBackend::attention_block_backward(float* dq, TensorRef dkv, ConstTensorRef dctx, ConstTensorRef ctx,
                                           const float* lse, ConstTensorRef qkv, ConstTensorRef kv, int kv_ld,
                                           int kv_rank, const AttentionShape& s, const AttentionDropout& drop) {
  on_device(dq, "attention_block_backward", "dq");
  LOOM_CUDA_OP("attention_block_backward",
               kernels::attention_block_backward(dq, dev<T>(dkv), dev<T>(dctx), dev<T>(ctx), lse, dev<T>(qkv),
                                                 dev<T>(kv), block_dims(s, kv_ld, kv_rank, drop), stream_),
               dkv, dctx, ctx, qkv, kv);
}

void CudaBackend::dropout_mask(std::uint8_t* mask, std::int64_t n, std::uint64_t key, std::uint64_t first, float p) {
  on_device(mask, "dropout_mask", "mask");
  kernels::dropout_mask(mask, n, key, first, p, stream_);
}
void CudaBackend::apply_mask(TensorRef out, ConstTensorRef in, const std::uint8_t* mask, std::int64_t n, float scale) {
  on_device(mask, "apply_mask", "mask");
  LOOM_CUDA_OP("apply_mask", kernels::apply_mask(dev<T>(out), dev<T>(in), mask, n, scale, stream_), out, in);
}
void CudaBackend::bias_dropout_add(TensorRef out, ConstTensorRef x, TensorRef branch, ConstTensorRef bias,
                                   const std::uint8_t* mask, std::int64_t rows, std::int64_t cols, float scale) {
  on_device(mask, "bias_dropout_add", "mask");
  LOOM_CUDA_OP(
      "bias_dropout_add",
      kernels::bias_dropout_add(dev<T>(out), dev<T>(x), dev<T>(branch), dev<T>(bias), mask, rows, cols, scale, stream_),
      out, x, branch, bias);
}
void CudaBackend::rope(TensorRef qkv, const AttentionShape& s, bool inverse) {
  LOOM_CUDA_OP("rope", kernels::rope(dev<T>(qkv), dims(s), inverse, stream_, s.cp, s.cp_rank), qkv);
}

// --- cross-entropy and embedding (token ids staged from the host) -----------------------------------

void CudaBackend::row_max_sum_exp(float* max, float* sum_exp, ConstTensorRef logits, std::int64_t rows,
                                  std::int64_t cols, std::int64_t valid_cols) {
  on_device(max, "row_max_sum_exp", "max");
  on_device(sum_exp, "row_max_sum_exp", "sum_exp");
  LOOM_CUDA_OP("row_max_sum_exp",
               kernels::row_max_sum_exp(max, sum_exp, dev<T>(logits), rows, cols, valid_cols, stream_), logits);
}
void CudaBackend::row_max(float* out, ConstTensorRef logits, std::int64_t rows, std::int64_t cols,
                          std::int64_t valid_cols) {
  on_device(out, "row_max", "out");
  LOOM_CUDA_OP("row_max", kernels::row_max(out, dev<T>(logits), rows, cols, valid_cols, stream_), logits);
}
void CudaBackend::row_sum_exp(float* out, ConstTensorRef logits, const float* max, std::int64_t rows, std::int64_t cols,
                              std::int64_t valid_cols) {
  on_device(out, "row_sum_exp", "out");
  on_device(max, "row_sum_exp", "max");
  LOOM_CUDA_OP("row_sum_exp", kernels::row_sum_exp(out, dev<T>(logits), max, rows, cols, valid_cols, stream_), logits);
}
void CudaBackend::target_logit(float* out, ConstTensorRef logits, const int* targets, std::int64_t rows,
                               std::int64_t cols, std::int64_t vocab_start) {
  on_device(out, "target_logit", "out");
  const int* t = device_ints(targets, rows);
  LOOM_CUDA_OP("target_logit", kernels::target_logit(out, dev<T>(logits), t, rows, cols, vocab_start, stream_), logits);
}
void CudaBackend::cross_entropy_grad(TensorRef logits, const float* max, const float* sum_exp, const int* targets,
                                     std::int64_t rows, std::int64_t cols, std::int64_t valid_cols,
                                     std::int64_t vocab_start, float scale) {
  on_device(max, "cross_entropy_grad", "max");
  on_device(sum_exp, "cross_entropy_grad", "sum_exp");
  const int* t = device_ints(targets, rows);
  LOOM_CUDA_OP(
      "cross_entropy_grad",
      kernels::cross_entropy_grad(dev<T>(logits), max, sum_exp, t, rows, cols, valid_cols, vocab_start, scale, stream_),
      logits);
}
void CudaBackend::cross_entropy_grad_into(TensorRef out, TensorRef logits, const float* max, const float* sum_exp,
                                          const int* targets, std::int64_t rows, std::int64_t cols,
                                          std::int64_t valid_cols, std::int64_t vocab_start, float scale) {
  if (logits.dtype() != DType::kF32 || out.dtype() != DType::kBF16)
    return Backend::cross_entropy_grad_into(out, logits, max, sum_exp, targets, rows, cols, valid_cols, vocab_start,
                                            scale);
  on_device(max, "cross_entropy_grad_into", "max");
  on_device(sum_exp, "cross_entropy_grad_into", "sum_exp");
  const int* t = device_ints(targets, rows);
  kernels::cross_entropy_grad(dev<bf16>(out), dev<float>(ConstTensorRef(logits)), max, sum_exp, t, rows, cols,
                              valid_cols, vocab_start, scale, stream_);
}
void CudaBackend::embedding_forward(TensorRef out, ConstTensorRef table, const int* tokens, std::int64_t n,
                                    std::int64_t cols, std::int64_t vocab_start, std::int64_t rows_held) {
  const int* t = device_ints(tokens, n);
  LOOM_CUDA_OP("embedding_forward",
               kernels::embedding_forward(dev<T>(out), dev<T>(table), t, n, cols, vocab_start, rows_held, stream_), out,
               table);
}
void CudaBackend::embedding_backward(float* dtable, ConstTensorRef dout, const int* tokens, std::int64_t n,
                                     std::int64_t cols, std::int64_t vocab_start, std::int64_t rows_held) {
  on_device(dtable, "embedding_backward", "dtable");
  const int* t = device_ints(tokens, n);
  LOOM_CUDA_OP("embedding_backward",
               kernels::embedding_backward(dtable, dev<T>(dout), t, n, cols, vocab_start, rows_held, stream_), dout);
}

// --- mixture of experts -------------------------------------------------------------------------------

void CudaBackend::index_rows(TensorRef out, ConstTensorRef in, const int* index, std::int64_t rows, std::int64_t cols) {
  if (out.dtype() != in.dtype()) cuda::unsupported("index_rows", {in.dtype(), out.dtype()});
  const int* i = device_ints(index, rows);
  kernels::index_rows(out.raw(), in.raw(), i, rows, cols * dtype_bytes(in.dtype()), stream_);
}
void CudaBackend::sum_indexed_rows(TensorRef out, ConstTensorRef in, const int* index, std::int64_t rows, int k,
                                   std::int64_t cols) {
  const int* i = device_ints(index, rows * k);
  LOOM_CUDA_OP("sum_indexed_rows", kernels::sum_indexed_rows(dev<T>(out), dev<T>(in), i, rows, k, cols, stream_), out,
               in);
}
void CudaBackend::scale_rows(TensorRef out, ConstTensorRef in, const float* scales, std::int64_t rows,
                             std::int64_t cols) {
  on_device(scales, "scale_rows", "scales");
  LOOM_CUDA_OP("scale_rows", kernels::scale_rows(dev<T>(out), dev<T>(in), scales, rows, cols, stream_), out, in);
}
void CudaBackend::row_dots(float* out, ConstTensorRef a, ConstTensorRef b, std::int64_t rows, std::int64_t cols) {
  on_device(out, "row_dots", "out");
  LOOM_CUDA_OP("row_dots", kernels::row_dots(out, dev<T>(a), dev<T>(b), rows, cols, stream_), a, b);
}

// --- optimizer ---------------------------------------------------------------------------------------

void CudaBackend::adamw(float* param, const float* grad, float* m, float* v, std::int64_t n, float lr, float beta1,
                        float beta2, float eps, float weight_decay, int step, TensorRef param_copy) {
  on_device(param, "adamw", "param");
  on_device(grad, "adamw", "grad");
  on_device(m, "adamw", "m");
  on_device(v, "adamw", "v");
  const bool bf16_copy = !param_copy.null() && param_copy.dtype() == DType::kBF16;
  kernels::adamw(param, bf16_copy ? dev<bf16>(param_copy) : nullptr, grad, m, v, n, lr, beta1, beta2, eps, weight_decay,
                 step, stream_);
  if (!param_copy.null() && !bf16_copy && param_copy.raw() != param) cast(param_copy, param, n);
}

}  // namespace loom::exec
