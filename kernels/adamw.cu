// AdamW over fp32 master weights and fp32 moments (Megatron's mixed-precision layout), writing the
// bf16 compute copy of each updated weight in the same pass; the update is kernels/activations.h's.
#include <cmath>

#include "kernels/activations.h"
#include "kernels/cuda_check.h"
#include "kernels/device.cuh"
#include "kernels/ops.h"

namespace loom::kernels {

namespace {
__global__ void adamw_kernel(float* master, bf16* param, const float* grad, float* m, float* v, i64 n, AdamW h) {
  LOOM_GRID_STRIDE(i, n) {
    float mi = m[i], vi = v[i];
    const float p = adamw_update(master[i], grad[i], mi, vi, h);
    m[i] = mi;
    v[i] = vi;
    master[i] = p;
    if (param != nullptr) param[i] = __float2bfloat16_rn(p);
  }
}
}  // namespace

void adamw(float* master, bf16* param, const float* grad, float* m, float* v, i64 n, float lr, float beta1, float beta2,
           float eps, float weight_decay, int step, cudaStream_t stream) {
  if (n == 0) return;
  // The bias corrections in fp32 on the host, as the CPU backend computes them.
  const AdamW h{lr,
                beta1,
                beta2,
                eps,
                weight_decay,
                1.0f - std::pow(beta1, static_cast<float>(step)),
                1.0f - std::pow(beta2, static_cast<float>(step))};
  adamw_kernel<<<grid_for(n), kThreads, 0, stream>>>(master, param, grad, m, v, n, h);
  CUDA_CHECK_LAUNCH();
}

}  // namespace loom::kernels
