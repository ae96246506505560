#include "exec/backend.h"

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "exec/cpu/cpu_backend.h"
#ifdef LOOM_WITH_CUDA
#include "exec/cuda/cuda_backend.h"
#endif

namespace loom::exec {

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    reset();
    backend_ = std::exchange(other.backend_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    rows_ = std::exchange(other.rows_, 0);
    cols_ = std::exchange(other.cols_, 0);
    category_ = other.category_;
    dtype_ = other.dtype_;
  }
  return *this;
}

void Tensor::reset() {
  if (data_ != nullptr && backend_ != nullptr) backend_->release(data_, bytes(), category_);
  data_ = nullptr;
  rows_ = cols_ = 0;
}

Tensor Backend::alloc(std::int64_t rows, std::int64_t cols, MemoryCategory category, DType dtype) {
  Tensor t = empty(rows, cols, category, dtype);
  zero(t.ref(), rows * cols);
  return t;
}

Tensor Backend::empty(std::int64_t rows, std::int64_t cols, MemoryCategory category, DType dtype) {
  const std::int64_t bytes = rows * cols * dtype_bytes(dtype);
  void* data = allocate_raw(bytes > 0 ? bytes : static_cast<std::int64_t>(sizeof(float)));
  memory_.allocated(category, bytes);
  return Tensor(this, data, rows, cols, category, dtype);
}

void Backend::release(void* data, std::int64_t bytes, MemoryCategory category) {
  free_raw(data);
  memory_.freed(category, bytes);
}

namespace {
class CompletedEvent final : public Event {
 public:
  bool done() const override { return true; }
  void synchronize() override {}
};
class HostTimedEvent final : public TimedEvent {
 public:
  bool done() const override { return true; }
  void synchronize() override {}
  double microseconds_since(TimedEvent& earlier) override {
    return std::chrono::duration<double, std::micro>(at_ - dynamic_cast<HostTimedEvent&>(earlier).at_).count();
  }

 private:
  std::chrono::steady_clock::time_point at_ = std::chrono::steady_clock::now();
};
}  // namespace

void Backend::loss_add(const float* max, const float* sum_exp, const float* target, std::int64_t rows) {
  std::vector<float> m(static_cast<std::size_t>(rows)), s(m.size()), t(m.size());
  to_host(m.data(), ConstTensorRef(max), rows);
  to_host(s.data(), ConstTensorRef(sum_exp), rows);
  to_host(t.data(), ConstTensorRef(target), rows);
  double total = 0;
  for (std::size_t i = 0; i < m.size(); ++i) total += std::log(static_cast<double>(s[i])) + m[i] - t[i];
  loss_total_ += total;
}

void Backend::bias_dropout_add(TensorRef out, ConstTensorRef x, TensorRef branch, ConstTensorRef bias,
                               const std::uint8_t* mask, std::int64_t rows, std::int64_t cols, float scale) {
  if (!bias.null()) add_bias(branch, bias, rows, cols);
  if (mask != nullptr) apply_mask(branch, branch, mask, rows * cols, scale);
  add(out, x, branch, rows * cols);
}

void Backend::row_max_sum_exp(float* max, float* sum_exp, ConstTensorRef logits, std::int64_t rows, std::int64_t cols,
                              std::int64_t valid_cols) {
  row_max(max, logits, rows, cols, valid_cols);
  row_sum_exp(sum_exp, logits, max, rows, cols, valid_cols);
}

void Backend::cross_entropy_grad_into(TensorRef out, TensorRef logits, const float* max, const float* sum_exp,
                                      const int* targets, std::int64_t rows, std::int64_t cols, std::int64_t valid_cols,
                                      std::int64_t vocab_start, float scale) {
  cross_entropy_grad(logits, max, sum_exp, targets, rows, cols, valid_cols, vocab_start, scale);
  cast(out, logits, rows * cols);
}

std::unique_ptr<Event> Backend::record_event() { return std::make_unique<CompletedEvent>(); }
std::unique_ptr<TimedEvent> Backend::record_timed_event() { return std::make_unique<HostTimedEvent>(); }

Tensor Backend::recharge(Tensor tensor, MemoryCategory category) {
  const std::int64_t rows = tensor.rows(), cols = tensor.cols();
  const DType dtype = tensor.dtype();
  memory_.freed(tensor.category(), tensor.bytes());
  memory_.allocated(category, tensor.bytes());
  return Tensor(this, tensor.release_storage(), rows, cols, category, dtype);
}

void Backend::attention_block_forward(float*, float*, float*, ConstTensorRef, ConstTensorRef, int, int,
                                      const AttentionShape&, const AttentionDropout&) {
  throw std::logic_error("attention_block_forward (ring attention) is not implemented on backend " + name());
}

void Backend::attention_block_finish(TensorRef, float*, const float*, const float*, const float*,
                                     const AttentionShape&) {
  throw std::logic_error("attention_block_finish (ring attention) is not implemented on backend " + name());
}

void Backend::attention_block_backward(float*, TensorRef, ConstTensorRef, ConstTensorRef, const float*, ConstTensorRef,
                                       ConstTensorRef, int, int, const AttentionShape&, const AttentionDropout&) {
  throw std::logic_error("attention_block_backward (ring attention) is not implemented on backend " + name());
}

void Backend::copy_rows(TensorRef dst, std::int64_t ld_dst, ConstTensorRef src, std::int64_t ld_src, std::int64_t rows,
                        std::int64_t cols) {
  for (std::int64_t r = 0; r < rows; ++r) cast(dst + r * ld_dst, src + r * ld_src, cols);
}

std::unique_ptr<Backend> make_backend(const std::string& name, std::string* error, NodeSlot slot) {
  if (name == "cpu") return std::make_unique<CpuBackend>();
#ifdef LOOM_WITH_CUDA
  if (name == "cuda") return make_cuda_backend(error, slot);
#else
  (void)slot;
#endif
  if (error != nullptr) {
    *error = name == "cuda" ? "--backend cuda: this build of loom has no CUDA backend (use --backend cpu)"
                            : "--backend: unknown backend '" + name + "' (cpu, cuda)";
  }
  return nullptr;
}

int visible_gpus(std::string* why_none) {
#ifdef LOOM_WITH_CUDA
  return cuda_device_count(why_none);
#else
  if (why_none != nullptr) *why_none = "this build of loom has no CUDA backend";
  return 0;
#endif
}

std::vector<std::string> available_backends() {
#ifdef LOOM_WITH_CUDA
  return {"cpu", "cuda"};
#else
  return {"cpu"};
#endif
}

}  // namespace loom::exec
