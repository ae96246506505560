// Gpu* tests of the cuBLASLt GEMM (every transpose pair, fp32 and bf16 operands, fp32 and bf16
// results, beta 1 accumulation, padded leading dimensions, the algorithm cache) and of the unfused
// attention built on it (GQA, dropout) against the fp32 CPU backend.
#include <gtest/gtest.h>

#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "tests/kernels/cpu_reference.h"
#include "tests/kernels/gpu_test_util.h"

namespace loom::kernels::testing {
namespace {

template <class AB, class C>
struct GemmTypes {
  using Operand = AB;
  using Result = C;
};
template <class P>
class GpuGemm : public GpuTest {};
using GemmCases = ::testing::Types<GemmTypes<float, float>, GemmTypes<bf16, float>, GemmTypes<bf16, bf16>>;
struct GemmNames {
  template <class P>
  static std::string GetName(int) {
    return TypeNames::GetName<typename P::Operand>(0) + "_to_" + TypeNames::GetName<typename P::Result>(0);
  }
};
TYPED_TEST_SUITE(GpuGemm, GemmCases, GemmNames);

template <class T>
constexpr DType dtype_of() {
  return std::is_same_v<T, bf16> ? DType::bf16 : DType::f32;
}

TYPED_TEST(GpuGemm, EveryTransposePairMatchesTheCpuBackendAndBetaOneAccumulates) {
  using AB = typename TypeParam::Operand;
  using C = typename TypeParam::Result;
  Gemm gemm;
  const int m = 67, n = 129, k = 200;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int lda = (ta ? m : k) + 8, ldb = (tb ? k : n) + 8, ldc = n + 8;  // padded rows
      const Floats a = random_values<AB>(static_cast<i64>(ta ? k : m) * lda, 50);
      const Floats b = random_values<AB>(static_cast<i64>(tb ? n : k) * ldb, 51);
      const Floats c0 = random_values<C>(static_cast<i64>(m) * ldc, 52);
      Floats want = c0;
      cpu().gemm(ta, tb, m, n, k, 0.5f, data(a), lda, data(b), ldb, 1.0f, data(want), ldc);
      DeviceBuffer<AB> ga(a), gb(b);
      DeviceBuffer<C> gc(c0);
      gemm.run(ta, tb, m, n, k, 0.5f, ga.get(), dtype_of<AB>(), lda, gb.get(), ldb, 1.0f, gc.get(), dtype_of<C>(), ldc,
               nullptr);
      expect_close(gc.download(), want, tolerance<C>() + tolerance<AB>() / 10,
                   "C, ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
    }
  EXPECT_EQ(gemm.cached_algorithms(), 4u);
}

TEST_F(GpuTest, GemmReusesTheCachedAlgorithmForARepeatedShape) {
  Gemm gemm;
  const int m = 64, n = 64, k = 64;
  DeviceBuffer<float> a(random_values(m * k, 53)), b(random_values(k * n, 54)), c(m * n);
  for (int i = 0; i < 3; ++i)
    gemm.run(false, false, m, n, k, 1.0f, a.get(), DType::f32, k, b.get(), n, 0.0f, c.get(), DType::f32, n, nullptr);
  EXPECT_EQ(gemm.cached_algorithms(), 1u);
}

template <class T>
class GpuAttention : public GpuTest {};
using ElementTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(GpuAttention, ElementTypes, TypeNames);

TYPED_TEST(GpuAttention, UnfusedForwardAndBackwardWithGqaAndDropoutMatchTheCpuBackend) {
  using T = TypeParam;
  const AttentionDims dims{2, 40, 4, 2, 16};
  const exec::AttentionShape shape = attention_shape(2, 40, 4, 2, 16);
  const i64 tokens = dims.batch * dims.seq, numel = dims.probs_numel();
  const float keep_scale = 1.0f / 0.9f;
  const Floats qkv = random_values<T>(tokens * dims.qkv_cols(), 60);
  const Floats dctx = random_values<T>(tokens * dims.heads * dims.head_dim, 61);
  std::vector<std::uint8_t> mask(numel);
  cpu().dropout_mask(mask.data(), numel, 99, 0, 0.1f);
  Floats probs(numel), dropped(numel), ctx(tokens * dims.heads * dims.head_dim), dqkv(qkv.size());
  cpu().attention_probs(data(probs), data(qkv), shape);
  for (float& p : probs) p = stored<T>(p);  // the GPU keeps bf16 probabilities
  cpu().apply_mask(data(dropped), data(probs), mask.data(), numel, keep_scale);
  cpu().attention_context(data(ctx), data(dropped), data(qkv), shape);
  cpu().attention_backward(data(dqkv), data(dctx), data(probs), data(dropped), mask.data(), keep_scale, data(qkv),
                           shape);
  Gemm gemm;
  DeviceBuffer<T> gqkv(qkv), gdctx(dctx), gprobs(numel), gdropped(numel), gctx(ctx.size()), gdqkv(qkv.size());
  DeviceBuffer<T> scratch(numel);
  DeviceBuffer<std::uint8_t> gmask(mask);
  attention_probs(gemm, gprobs.get(), gqkv.get(), dims, nullptr);
  apply_mask(gdropped.get(), gprobs.get(), gmask.get(), numel, keep_scale, nullptr);
  attention_context(gemm, gctx.get(), gdropped.get(), gqkv.get(), dims, nullptr);
  attention_backward(gemm, gdqkv.get(), scratch.get(), gdctx.get(), gprobs.get(), gdropped.get(), gmask.get(),
                     keep_scale, gqkv.get(), dims, nullptr);
  expect_close(gprobs.download(), probs, tolerance<T>(), "probs");
  expect_close(gctx.download(), ctx, tolerance<T>(), "ctx");
  expect_close(gdqkv.download(), dqkv, tolerance<T>() * 2, "dqkv");
}

}  // namespace
}  // namespace loom::kernels::testing
