// Gpu* op tests, part 1: element-wise ops, casts, bias, norms, activations and dropout, each run in
// fp32 and bf16 on random inputs against the fp32 CPU backend (tolerances in gpu_test_util.h).
// Sizes are odd on purpose: partial warps, partial blocks and grid-stride tails all get exercised.
#include <gtest/gtest.h>

#include "kernels/ops.h"
#include "tests/kernels/cpu_reference.h"
#include "tests/kernels/gpu_test_util.h"

namespace loom::kernels::testing {
namespace {

template <class T>
class GpuOps : public GpuTest {};
using ElementTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(GpuOps, ElementTypes, TypeNames);

TYPED_TEST(GpuOps, AxpyAddAndScaleMatchTheCpuBackend) {
  using T = TypeParam;
  const i64 n = 100003;
  const Floats x = random_values<T>(n, 1), y0 = random_values<T>(n, 2);
  Floats axpy_want = y0, add_want(n), scale_want = x;
  cpu().axpy(data(axpy_want), 0.75f, data(x), n);
  cpu().add(data(add_want), data(x), data(y0), n);
  cpu().scale(data(scale_want), -1.5f, n);
  DeviceBuffer<T> gx(x), gy(y0), gsum(n), gscaled(x);
  axpy(gy.get(), 0.75f, gx.get(), n, nullptr);
  add(gsum.get(), gx.get(), gy.get(), n, nullptr);  // gy now holds axpy's result
  scale(gscaled.get(), -1.5f, n, nullptr);
  expect_close(gy.download(), axpy_want, tolerance<T>(), "axpy");
  Floats add_of_axpy(n);
  cpu().add(data(add_of_axpy), data(x), data(axpy_want), n);
  expect_close(gsum.download(), add_of_axpy, tolerance<T>(), "add");
  expect_close(gscaled.download(), scale_want, tolerance<T>(), "scale");
}

TYPED_TEST(GpuOps, CopyAndZeroWriteEveryValue) {
  using T = TypeParam;
  const i64 n = 4099;
  const Floats x = random_values<T>(n, 3);
  DeviceBuffer<T> src(x), dst(n), zeroed(n);
  copy(dst.get(), src.get(), n, nullptr);
  zero(zeroed.get(), n, nullptr);
  expect_close(dst.download(), x, 0.0, "copy");
  expect_close(zeroed.download(), Floats(n, 0.0f), 0.0, "zero");
}

TEST_F(GpuTest, Fp32GradientsAccumulateBf16ValuesThroughAxpy) {
  const i64 n = 777;
  const Floats grad0 = random_values(n, 4), x = random_values<bf16>(n, 5);
  Floats want = grad0;
  cpu().axpy(data(want), 1.0f, data(x), n);
  DeviceBuffer<float> grad(grad0);
  DeviceBuffer<bf16> gx(x);
  axpy(grad.get(), 1.0f, gx.get(), n, nullptr);
  expect_close(grad.download(), want, kFp32Tolerance, "fp32 += bf16");
}

TEST_F(GpuTest, CastsRoundToNearestEvenAsTheHostDoes) {
  const i64 n = 10007;
  const Floats x = random_values(n, 6, -300.0f, 300.0f);
  Floats rounded(n);
  for (i64 i = 0; i < n; ++i) rounded[i] = float_from_bf16_bits(bf16_bits_from_float(x[i]));
  DeviceBuffer<float> src(x), back(n);
  DeviceBuffer<bf16> half(n);
  cast(half.get(), src.get(), n, nullptr);
  cast(back.get(), half.get(), n, nullptr);
  expect_close(half.download(), rounded, 0.0, "fp32 -> bf16");
  expect_close(back.download(), rounded, 0.0, "bf16 -> fp32");
}

TYPED_TEST(GpuOps, BiasAddAndBiasGradientMatchTheCpuBackend) {
  using T = TypeParam;
  const i64 rows = 301, cols = 97;
  const Floats x0 = random_values<T>(rows * cols, 7), bias = random_values<T>(cols, 8);
  const Floats dbias0 = random_values(cols, 9);  // the gradient accumulates onto what is there
  Floats x_want = x0, dbias_want = dbias0;
  cpu().add_bias(data(x_want), data(bias), rows, cols);
  cpu().bias_grad(data(dbias_want), data(x0), rows, cols);
  DeviceBuffer<T> gx(x0), gbias(bias), gdy(x0);
  DeviceBuffer<float> gdbias(dbias0);
  add_bias(gx.get(), gbias.get(), rows, cols, nullptr);
  bias_grad(gdbias.get(), gdy.get(), rows, cols, nullptr);
  expect_close(gx.download(), x_want, tolerance<T>(), "x + bias");
  expect_close(gdbias.download(), dbias_want, kFp32Tolerance, "dbias");
}

// The bias add over many rows in whole packs (768 columns: 96 packs of 8 bf16 values or 192 of 4 fp32
// a row, each added to the bias's pack at its column) and one value a thread (770 columns, which no
// pack width divides), against the CPU backend bit for bit: each value is one fp32 addition rounded once
// to T, to nearest even as the host rounds the CPU backend's fp32 sum here.
TYPED_TEST(GpuOps, BiasAddMatchesTheCpuBackendBitForBitOnRowsThatFillPacksAndRowsThatDoNot) {
  using T = TypeParam;
  for (const i64 cols : {i64{768}, i64{770}}) {
    SCOPED_TRACE(::testing::Message() << cols << " columns");
    const i64 rows = 37;
    const Floats x0 = random_values<T>(rows * cols, 45, -4.0f, 4.0f), bias = random_values<T>(cols, 46);
    Floats want = x0;
    cpu().add_bias(data(want), data(bias), rows, cols);
    for (float& v : want) v = stored<T>(v);
    DeviceBuffer<T> gx(x0), gbias(bias);
    add_bias(gx.get(), gbias.get(), rows, cols, nullptr);
    expect_close(gx.download(), want, 0.0, "x + bias");
  }
}

// LayerNorm forward and backward at rows × cols against the CPU backend; the weight and bias gradients
// are column sums over the rows, within `sum_tolerance`.
template <class T>
void expect_layernorm_matches(i64 rows, i64 cols, double sum_tolerance) {
  const Floats x = random_values<T>(rows * cols, 10, -2.0f, 3.0f), w = random_values<T>(cols, 11);
  const Floats b = random_values<T>(cols, 12), dout = random_values<T>(rows * cols, 13);
  const Floats dw0 = random_values(cols, 14), db0 = random_values(cols, 15);
  Floats out(rows * cols), mean(rows), rstd(rows), dx(rows * cols), dw = dw0, db = db0;
  cpu().layernorm_forward(data(out), data(mean), data(rstd), data(x), data(w), data(b), rows, cols);
  cpu().layernorm_backward(data(dx), data(dw), data(db), data(dout), data(x), data(w), data(mean), data(rstd), rows,
                           cols);
  DeviceBuffer<T> gx(x), gw(w), gb(b), gout(rows * cols), gdout(dout), gdx(rows * cols);
  DeviceBuffer<float> gmean(rows), grstd(rows), gdw(dw0), gdb(db0);
  layernorm_forward(gout.get(), gmean.get(), grstd.get(), gx.get(), gw.get(), gb.get(), rows, cols, nullptr);
  layernorm_backward(gdx.get(), gdw.get(), gdb.get(), gdout.get(), gx.get(), gw.get(), gmean.get(), grstd.get(), rows,
                     cols, nullptr);
  expect_close(gout.download(), out, tolerance<T>(), "out");
  expect_close(gmean.download(), mean, kFp32Tolerance, "mean");
  expect_close(grstd.download(), rstd, kFp32Tolerance, "rstd");
  expect_close(gdx.download(), dx, tolerance<T>(), "dx");
  expect_close(gdw.download(), dw, kFp32Tolerance * 10, "dw");
  expect_close(gdb.download(), db, sum_tolerance, "db");
}

// 771 columns take one value a lane at a time, 768 whole packs (kernels/packs.cuh).
TYPED_TEST(GpuOps, LayerNormForwardAndBackwardMatchTheCpuBackend) {
  for (const i64 cols : {i64{771}, i64{768}}) {
    SCOPED_TRACE(::testing::Message() << cols << " columns");
    expect_layernorm_matches<TypeParam>(45, cols, kFp32Tolerance);
  }
}

TYPED_TEST(GpuOps, RmsNormForwardAndBackwardMatchTheCpuBackend) {
  using T = TypeParam;
  for (const i64 cols : {i64{515}, i64{512}}) {  // one value a lane at a time; whole packs
    SCOPED_TRACE(::testing::Message() << cols << " columns");
    const i64 rows = 53;
    const Floats x = random_values<T>(rows * cols, 16, -2.0f, 2.0f), w = random_values<T>(cols, 17);
    const Floats dout = random_values<T>(rows * cols, 18), dw0 = random_values(cols, 19);
    Floats out(rows * cols), rstd(rows), dx(rows * cols), dw = dw0;
    cpu().rmsnorm_forward(data(out), data(rstd), data(x), data(w), rows, cols);
    cpu().rmsnorm_backward(data(dx), data(dw), data(dout), data(x), data(w), data(rstd), rows, cols);
    DeviceBuffer<T> gx(x), gw(w), gout(rows * cols), gdout(dout), gdx(rows * cols);
    DeviceBuffer<float> grstd(rows), gdw(dw0);
    rmsnorm_forward(gout.get(), grstd.get(), gx.get(), gw.get(), rows, cols, nullptr);
    rmsnorm_backward(gdx.get(), gdw.get(), gdout.get(), gx.get(), gw.get(), grstd.get(), rows, cols, nullptr);
    expect_close(gout.download(), out, tolerance<T>(), "out");
    expect_close(grstd.download(), rstd, kFp32Tolerance, "rstd");
    expect_close(gdx.download(), dx, tolerance<T>(), "dx");
    expect_close(gdw.download(), dw, kFp32Tolerance * 10, "dw");
  }
}

// The column sums of parameter gradients over as many rows as a training micro-batch has tokens, where
// the rows are split into chunks summed apart and then in order (kernels/device.cuh); the tests above
// have too few rows to split. 771 columns are 25 blocks of 32 (the last ragged), so 4099 rows split into
// 21 chunks of 196 (the last ragged). Sums of 4099 terms in another order than the CPU's differ by fp32
// rounding, not by a tolerance for mistakes: a chunk dropped or added twice moves a column by about a
// 21st of its sum.
TYPED_TEST(GpuOps, ColumnSumsOverATrainingBatchOfRowsMatchTheCpuBackend) {
  using T = TypeParam;
  const i64 rows = 4099, cols = 771;
  expect_layernorm_matches<T>(rows, cols, kFp32Tolerance * 10);
  const Floats dy = random_values<T>(rows * cols, 43), dbias0 = random_values(cols, 44);
  Floats dbias = dbias0;
  cpu().bias_grad(data(dbias), data(dy), rows, cols);
  DeviceBuffer<T> gdy(dy);
  DeviceBuffer<float> gdbias(dbias0), again(dbias0);
  bias_grad(gdbias.get(), gdy.get(), rows, cols, nullptr);
  expect_close(gdbias.download(), dbias, kFp32Tolerance * 10, "dbias");
  // Two runs give the same bits: the chunks are added in a fixed order.
  bias_grad(again.get(), gdy.get(), rows, cols, nullptr);
  EXPECT_EQ(again.download(), gdbias.download());
}

TYPED_TEST(GpuOps, GeluForwardAndBackwardMatchTheCpuBackend) {
  using T = TypeParam;
  const i64 n = 65539;
  const Floats x = random_values<T>(n, 20, -5.0f, 5.0f), dout = random_values<T>(n, 21);
  Floats out(n), din(n);
  cpu().gelu_forward(data(out), data(x), n);
  cpu().gelu_backward(data(din), data(x), data(dout), n);
  DeviceBuffer<T> gx(x), gdout(dout), gout(n), gdin(n);
  gelu_forward(gout.get(), gx.get(), n, nullptr);
  gelu_backward(gdin.get(), gx.get(), gdout.get(), n, nullptr);
  expect_close(gout.download(), out, tolerance<T>(), "gelu");
  expect_close(gdin.download(), din, tolerance<T>(), "dgelu");
}

TYPED_TEST(GpuOps, SwigluForwardAndBackwardMatchTheCpuBackend) {
  using T = TypeParam;
  const i64 rows = 33, f = 131;
  const Floats in = random_values<T>(rows * 2 * f, 22, -4.0f, 4.0f), dout = random_values<T>(rows * f, 23);
  Floats out(rows * f), din(rows * 2 * f);
  cpu().swiglu_forward(data(out), data(in), rows, f);
  cpu().swiglu_backward(data(din), data(in), data(dout), rows, f);
  DeviceBuffer<T> gin(in), gdout(dout), gout(rows * f), gdin(rows * 2 * f);
  swiglu_forward(gout.get(), gin.get(), rows, f, nullptr);
  swiglu_backward(gdin.get(), gin.get(), gdout.get(), rows, f, nullptr);
  expect_close(gout.download(), out, tolerance<T>(), "swiglu");
  expect_close(gdin.download(), din, tolerance<T>(), "dswiglu");
}

TYPED_TEST(GpuOps, DropoutDrawsTheCpuBackendsMaskAndAppliesIt) {
  using T = TypeParam;
  const i64 n = 50021;
  const std::uint64_t key = 0xC0FFEE, first = 123456789;
  const float p = 0.1f, keep_scale = 1.0f / 0.9f;
  std::vector<std::uint8_t> mask(n);
  cpu().dropout_mask(mask.data(), n, key, first, p);
  const Floats x = random_values<T>(n, 24);
  Floats out(n);
  cpu().apply_mask(data(out), data(x), mask.data(), n, keep_scale);
  DeviceBuffer<std::uint8_t> gmask(n);
  DeviceBuffer<T> gx(x), gout(n);
  dropout_mask(gmask.get(), n, key, first, p, nullptr);
  apply_mask(gout.get(), gx.get(), gmask.get(), n, keep_scale, nullptr);
  EXPECT_EQ(gmask.download(), mask);
  expect_close(gout.download(), out, tolerance<T>(), "dropped");
}

// The fused residual add against the three kernels it replaces (bit for bit: the same roundings) and
// against the CPU backend, with and without bias and mask, over rows whose width fills whole packs (the
// vector path) and rows that do not (one value a thread).
TYPED_TEST(GpuOps, BiasDropoutAddIsAddBiasApplyMaskAndAddInOnePass) {
  using T = TypeParam;
  for (const i64 cols : {i64{96}, i64{97}}) {
    const i64 rows = 203, n = rows * cols;
    const Floats x = random_values<T>(n, 30), branch = random_values<T>(n, 31), bias = random_values<T>(cols, 32);
    std::vector<std::uint8_t> mask(n);
    cpu().dropout_mask(mask.data(), n, 0xBEEF, 77, 0.1f);
    const float keep_scale = 1.0f / 0.9f;
    for (const bool with_bias : {false, true}) {
      for (const bool with_mask : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "cols " << cols << ", bias " << with_bias << ", mask " << with_mask);
        Floats want = branch, sum(n);
        if (with_bias) cpu().add_bias(data(want), data(bias), rows, cols);
        if (with_mask) cpu().apply_mask(data(want), data(want), mask.data(), n, keep_scale);
        cpu().add(data(sum), data(x), data(want), n);
        DeviceBuffer<T> gx(x), gbranch(branch), gbias(bias), steps(branch), gsum(n), fused(n);
        DeviceBuffer<std::uint8_t> gmask(mask);
        const T* b = with_bias ? gbias.get() : nullptr;
        const std::uint8_t* m = with_mask ? gmask.get() : nullptr;
        if (with_bias) add_bias(steps.get(), gbias.get(), rows, cols, nullptr);
        if (with_mask) apply_mask(steps.get(), steps.get(), gmask.get(), n, keep_scale, nullptr);
        add(gsum.get(), gx.get(), steps.get(), n, nullptr);
        bias_dropout_add(fused.get(), gx.get(), gbranch.get(), b, m, rows, cols, keep_scale, nullptr);
        EXPECT_EQ(fused.download(), gsum.download());
        expect_close(fused.download(), sum, tolerance<T>(), "x + dropout(branch + bias)");
      }
    }
  }
}

// The element-wise ops read and write whole packs only where every array is aligned to one: at an
// address one value off they take the one-value path, and both match the CPU backend. 4100 values are
// whole fp32 packs (a bf16 tail of 4); 4103 leave a tail past the last pack in every type (3 fp32
// values, 7 bf16), written one value a thread after the packs.
TYPED_TEST(GpuOps, ElementWiseOpsMatchTheCpuBackendAtAddressesOnAndOffAPack) {
  using T = TypeParam;
  for (const i64 n : {i64{4100}, i64{4103}}) {
    const Floats x = random_values<T>(n + 1, 33, -3.0f, 3.0f), y = random_values<T>(n + 1, 34);
    std::vector<std::uint8_t> mask(n + 1);
    cpu().dropout_mask(mask.data(), n + 1, 5, 0, 0.3f);
    DeviceBuffer<T> gx(x), gy(y);
    DeviceBuffer<std::uint8_t> gmask(mask);
    for (const i64 offset : {i64{0}, i64{1}}) {
      SCOPED_TRACE(::testing::Message() << n << " values at offset " << offset);
      const T* px = gx.get() + offset;
      const T* py = gy.get() + offset;
      DeviceBuffer<T> sum(n + 1), acc(y), g(n + 1), dg(n + 1), dropped(n + 1), bf(n + 1);
      DeviceBuffer<float> f32(n + 1);
      add(sum.get() + offset, px, py, n, nullptr);
      axpy(acc.get() + offset, 0.5f, px, n, nullptr);
      gelu_forward(g.get() + offset, px, n, nullptr);
      gelu_backward(dg.get() + offset, px, py, n, nullptr);
      apply_mask(dropped.get() + offset, px, gmask.get() + offset, n, 1.0f / 0.7f, nullptr);
      if constexpr (std::is_same_v<T, bf16>) cast(f32.get() + offset, px, n, nullptr);
      Floats want_sum(n), want_acc(y.begin() + offset, y.begin() + offset + n), want_g(n), want_dg(n), want_dropped(n);
      cpu().add(data(want_sum), data(x) + offset, data(y) + offset, n);
      cpu().axpy(data(want_acc), 0.5f, data(x) + offset, n);
      cpu().gelu_forward(data(want_g), data(x) + offset, n);
      cpu().gelu_backward(data(want_dg), data(x) + offset, data(y) + offset, n);
      cpu().apply_mask(data(want_dropped), data(x) + offset, mask.data() + offset, n, 1.0f / 0.7f);
      const auto slice = [&](const Floats& v) { return Floats(v.begin() + offset, v.begin() + offset + n); };
      expect_close(slice(sum.download()), want_sum, tolerance<T>(), "add");
      expect_close(slice(acc.download()), want_acc, tolerance<T>(), "axpy");
      expect_close(slice(g.download()), want_g, tolerance<T>(), "gelu");
      expect_close(slice(dg.download()), want_dg, tolerance<T>(), "dgelu");
      expect_close(slice(dropped.download()), want_dropped, tolerance<T>(), "dropped");
      if constexpr (std::is_same_v<T, bf16>)
        expect_close(slice(f32.download()), Floats(x.begin() + offset, x.begin() + offset + n), 0.0, "cast");
    }
  }
}

}  // namespace
}  // namespace loom::kernels::testing
