// `loom profile`'s kernel timings (exec/profile/kernel_profile.h) run in the backend's compute dtype, as
// training does: on the bf16 emulation (and so on a GPU) GEMM operands and activations are bf16, weight
// gradients and the LM head's logits fp32, and the bytes charged per memory-bound op are the simulator's
// at 2 bytes an activation; every timing is a positive, finite time by the backend's clock.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/presets.h"
#include "exec/cpu/bf16_emulation.h"
#include "exec/cpu/cpu_backend.h"
#include "exec/profile/kernel_profile.h"

namespace loom::exec::profile {
namespace {

constexpr TimingBudget kQuick{.min_batch_s = 1e-4, .batches = 1, .sweeps = 1};

ModelSpec small_model() {
  ModelSpec m = *model_preset("gpt-tiny");
  m.layers = 1;
  return m;
}

template <class B>
void expect_profiles_in_compute_dtype() {
  B backend;
  const ModelSpec m = small_model();
  const int seq = 64;
  const auto gemms = time_gemms(backend, transformer_gemm_cases(m, seq, 1, 1), kQuick);
  ASSERT_FALSE(gemms.empty());
  for (const auto& g : gemms) EXPECT_TRUE(std::isfinite(g.seconds) && g.seconds > 0) << g.shape.op;
  const double ab = static_cast<double>(dtype_bytes(backend.compute_dtype()));
  const auto ops = time_memory_ops(backend, m, seq, {1}, kQuick);
  bool residual = false;
  for (const auto& op : ops) {
    EXPECT_TRUE(std::isfinite(op.seconds) && op.seconds > 0) << op.op;
    if (op.op == std::string("residual")) {
      residual = true;
      EXPECT_DOUBLE_EQ(op.bytes, 3 * ab * seq * m.hidden);
    }
  }
  EXPECT_TRUE(residual);
  const double optimizer = time_optimizer_step(backend, 4096, kQuick);
  EXPECT_TRUE(std::isfinite(optimizer) && optimizer > 0);
}

TEST(KernelProfile, RunsInFp32OnTheCpuBackend) { expect_profiles_in_compute_dtype<CpuBackend>(); }
TEST(KernelProfile, RunsInBf16OnTheBf16Emulation) { expect_profiles_in_compute_dtype<CpuBf16Backend>(); }

}  // namespace
}  // namespace loom::exec::profile
