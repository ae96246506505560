// From the Backend interface's typed views to the kernels' element types: an op names the views that
// must share one dtype, and its body runs with T = float or __nv_bfloat16. Any other dtype, or views
// of different dtypes, is an executor bug and throws std::logic_error naming the op and the dtypes.
// Included only by the CUDA backend's .cc files (it includes CUDA headers).
#pragma once

#include <cuda_bf16.h>

#include <initializer_list>
#include <stdexcept>
#include <string>

#include "exec/tensor.h"

namespace loom::exec::cuda {

using bf16 = __nv_bfloat16;

template <class T>
struct Elem {
  using type = T;
};

[[noreturn]] inline void unsupported(const char* op, std::initializer_list<DType> dtypes) {
  std::string list;
  for (DType d : dtypes) list += (list.empty() ? "" : ", ") + std::string(to_string(d));
  throw std::logic_error(std::string("cuda backend: ") + op + " on " + list + " views is not implemented");
}

// The dtype every view shares (null views — absent biases — are skipped).
inline DType common_dtype(const char* op, std::initializer_list<ConstTensorRef> views) {
  bool found = false;
  DType d = DType::kF32;
  for (const ConstTensorRef& v : views) {
    if (v.null()) continue;
    if (found && v.dtype() != d) unsupported(op, {d, v.dtype()});
    d = v.dtype();
    found = true;
  }
  return d;
}

// Runs body(Elem<T>{}) with T the kernels' type for `dtype`.
template <class Body>
void dispatch(const char* op, DType dtype, Body&& body) {
  switch (dtype) {
    case DType::kF32: body(Elem<float>{}); return;
    case DType::kBF16: body(Elem<bf16>{}); return;
    default: unsupported(op, {dtype});
  }
}

template <class T>
T* dev(TensorRef r) {
  return static_cast<T*>(r.raw());
}
template <class T>
const T* dev(ConstTensorRef r) {
  return static_cast<const T*>(r.raw());
}

}  // namespace loom::exec::cuda

// One op = one line: LOOM_CUDA_OP("gelu_forward", kernels::gelu_forward(dev<T>(out), dev<T>(in), n, s), out, in)
// runs the call with T the element type that the listed views share.
#define LOOM_CUDA_OP(name, call, ...)                                                                        \
  ::loom::exec::cuda::dispatch(name, ::loom::exec::cuda::common_dtype(name, {__VA_ARGS__}), [&](auto elem) { \
    using T = typename decltype(elem)::type;                                                                 \
    call;                                                                                                    \
  })
