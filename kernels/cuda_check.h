// Error checks for CUDA runtime and cuBLASLt calls: a failure is an internal error, reported as one
// line naming the library's own message, the file and the line, and the process exits with status 1.
// CUDA_CHECK_LAUNCH() after a kernel launch catches bad launch configurations at the launch site.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace loom::kernels {

[[noreturn]] inline void cuda_fail(const char* library, const char* message, const char* file, int line) {
  std::fprintf(stderr, "loom: %s error: %s (%s:%d)\n", library, message, file, line);
  std::exit(1);
}

inline void cuda_check(cudaError_t status, const char* file, int line) {
  if (status != cudaSuccess) cuda_fail("CUDA", cudaGetErrorString(status), file, line);
}

inline void cublas_check(cublasStatus_t status, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) cuda_fail("cuBLASLt", cublasLtGetStatusString(status), file, line);
}

}  // namespace loom::kernels

#define CUDA_CHECK(call) ::loom::kernels::cuda_check((call), __FILE__, __LINE__)
#define CUBLAS_CHECK(call) ::loom::kernels::cublas_check((call), __FILE__, __LINE__)
#define CUDA_CHECK_LAUNCH() ::loom::kernels::cuda_check(cudaGetLastError(), __FILE__, __LINE__)
