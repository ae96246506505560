// Gpu* op tests, part 2: rotary embedding, causal softmax, the vocabulary-parallel cross-entropy
// pieces, the embedding, the global-norm sum of squares and AdamW, against the fp32 CPU backend
// (the causal softmax, private to the CPU backend, against a loop written out here).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "tests/kernels/cpu_reference.h"
#include "tests/kernels/gpu_test_util.h"

namespace loom::kernels::testing {
namespace {

template <class T>
class GpuLoss : public GpuTest {};
using ElementTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(GpuLoss, ElementTypes, TypeNames);

TYPED_TEST(GpuLoss, RopeRotatesQueriesAndKeysAsTheCpuBackendAndTheInverseTurnsBack) {
  using T = TypeParam;
  const AttentionDims dims{2, 37, 4, 2, 16};  // GQA: 4 query heads over 2 key/value heads
  const exec::AttentionShape shape = attention_shape(2, 37, 4, 2, 16);
  const i64 n = dims.batch * dims.seq * dims.qkv_cols();
  const Floats qkv = random_values<T>(n, 30);
  Floats want = qkv;
  cpu().rope(data(want), shape, false);
  DeviceBuffer<T> g(qkv);
  rope(g.get(), dims, false, nullptr);
  expect_close(g.download(), want, tolerance<T>(), "rope");
  rope(g.get(), dims, true, nullptr);
  expect_close(g.download(), qkv, tolerance<T>() * 2, "rope then inverse");
}

// Both kernels of each direction (kernels/softmax.cu): a warp per row where rows are whole 16-byte loads of
// at most 8 a lane (bf16: 296 and 2048; fp32: 300 and 296), else a block per row (bf16: 300 and 2056; fp32:
// 2048 and 2056); the backward in place as the attention runs it, and through a dropout mask (dprobs
// scaled by the mask as it is read), too.
TYPED_TEST(GpuLoss, CausalSoftmaxForwardAndBackwardFollowTheirDefinitions) {
  using T = TypeParam;
  const float keep_scale = 1.0f / 0.9f;
  for (const int seq : {300, 296, 2048, 2056}) {
    const i64 rows = 3 * static_cast<i64>(seq);  // three (sequence, head) blocks
    const Floats scores = random_values<T>(rows * seq, 31, -4.0f, 4.0f), dprobs = random_values<T>(rows * seq, 32);
    std::vector<std::uint8_t> mask(static_cast<std::size_t>(rows * seq));
    for (std::size_t i = 0; i < mask.size(); ++i) mask[i] = (i * 2654435761u >> 7) % 10 != 0 ? 1 : 0;
    Floats probs(rows * seq, 0.0f), dscores(rows * seq, 0.0f), dmasked(rows * seq, 0.0f);
    for (i64 r = 0; r < rows; ++r) {
      const i64 valid = r % seq + 1, o = r * seq;
      double mx = -INFINITY, sum = 0, dot = 0, dot_masked = 0;
      for (i64 j = 0; j < valid; ++j) mx = std::max<double>(mx, scores[o + j]);
      for (i64 j = 0; j < valid; ++j) sum += std::exp(scores[o + j] - mx);
      for (i64 j = 0; j < valid; ++j) probs[o + j] = static_cast<float>(std::exp(scores[o + j] - mx) / sum);
      const auto through_mask = [&](i64 j) { return mask[o + j] != 0 ? dprobs[o + j] * keep_scale : 0.0f; };
      for (i64 j = 0; j < valid; ++j) dot += stored<T>(probs[o + j]) * dprobs[o + j];
      for (i64 j = 0; j < valid; ++j) dot_masked += stored<T>(probs[o + j]) * through_mask(j);
      for (i64 j = 0; j < valid; ++j) {
        dscores[o + j] = static_cast<float>(stored<T>(probs[o + j]) * (dprobs[o + j] - dot));
        dmasked[o + j] = static_cast<float>(stored<T>(probs[o + j]) * (through_mask(j) - dot_masked));
      }
    }
    const std::string at = " at seq " + std::to_string(seq);
    DeviceBuffer<T> g(scores), gd(dprobs), gds(rows * seq);
    DeviceBuffer<std::uint8_t> gmask(mask);
    causal_softmax_forward(g.get(), rows, seq, nullptr);
    causal_softmax_backward(gds.get(), g.get(), gd.get(), nullptr, 1.0f, rows, seq, nullptr);
    expect_close(g.download(), probs, tolerance<T>(), "probs" + at);
    expect_close(gds.download(), dscores, tolerance<T>(), "dscores" + at);
    causal_softmax_backward(gds.get(), g.get(), gd.get(), gmask.get(), keep_scale, rows, seq, nullptr);
    expect_close(gds.download(), dmasked, tolerance<T>(), "dscores through the dropout mask" + at);
    causal_softmax_backward(gd.get(), g.get(), gd.get(), gmask.get(), keep_scale, rows, seq, nullptr);
    expect_close(gd.download(), dmasked, tolerance<T>(), "dscores in place through the mask" + at);
  }
}

// The pieces on one rank's shard of the vocabulary: columns from vocab_start on, 1000 real ones and then
// padding. Rows of 1031 columns take one value a thread; rows of 1024 (rank 1's shard, vocabulary
// indices 1024 to 2047) have their gradient written in whole packs, each value's vocabulary index
// vocab_start past its column. Targets fall inside the shard (one on its first column) and outside it,
// below and above (other ranks' columns, where no gradient value takes the −1).
TYPED_TEST(GpuLoss, CrossEntropyPiecesMatchTheCpuBackendOnAVocabularyShard) {
  using T = TypeParam;
  struct Shard {
    i64 cols, vocab_start;
  };
  for (const Shard shard : {Shard{1031, 2000}, Shard{1024, 1024}}) {
    SCOPED_TRACE(::testing::Message() << shard.cols << " columns from " << shard.vocab_start);
    const i64 rows = 19, cols = shard.cols, valid = 1000, vocab_start = shard.vocab_start;
    const Floats logits = random_values<T>(rows * cols, 33, -6.0f, 6.0f);
    std::vector<int> targets(rows);
    for (i64 r = 0; r < rows; ++r) {
      const i64 t = r == 1       ? vocab_start
                    : r % 3 != 0 ? vocab_start + (r * 97) % valid
                    : r % 2 == 0 ? 17
                                 : vocab_start + cols + r;
      targets[r] = static_cast<int>(t);
    }
    Floats mx(rows), sum(rows), target(rows), grad = logits;
    cpu().row_max(data(mx), data(logits), rows, cols, valid);
    cpu().row_sum_exp(data(sum), data(logits), data(mx), rows, cols, valid);
    cpu().target_logit(data(target), data(logits), targets.data(), rows, cols, vocab_start);
    cpu().cross_entropy_grad(data(grad), data(mx), data(sum), targets.data(), rows, cols, valid, vocab_start, 0.25f);
    DeviceBuffer<T> g(logits);
    DeviceBuffer<float> gmax(rows), gsum(rows), gtarget(rows);
    DeviceBuffer<int> gtargets(targets);
    row_max(gmax.get(), g.get(), rows, cols, valid, nullptr);
    row_sum_exp(gsum.get(), g.get(), gmax.get(), rows, cols, valid, nullptr);
    target_logit(gtarget.get(), g.get(), gtargets.get(), rows, cols, vocab_start, nullptr);
    cross_entropy_grad(g.get(), gmax.get(), gsum.get(), gtargets.get(), rows, cols, valid, vocab_start, 0.25f, nullptr);
    expect_close(gmax.download(), mx, 0.0, "row max");
    expect_close(gsum.download(), sum, kFp32Tolerance, "row sum exp");
    expect_close(gtarget.download(), target, 0.0, "target logit");
    expect_close(g.download(), grad, tolerance<T>(), "dlogits");
  }
}

// The one-pass max and sum (an online softmax) and the gradient, over rows that fill whole packs (1032
// columns: the vector path, one pack straddling the last real column, 1001) and rows that do not (1031).
TYPED_TEST(GpuLoss, OnePassMaxAndSumAndTheGradientMatchTheCpuBackendAtEveryRowWidth) {
  using T = TypeParam;
  for (const i64 cols : {i64{1031}, i64{1032}}) {
    SCOPED_TRACE(::testing::Message() << cols << " columns");
    const i64 rows = 37, valid = 1001, vocab_start = 0;
    const Floats logits = random_values<T>(rows * cols, 34, -20.0f, 20.0f);
    std::vector<int> targets(rows);
    for (i64 r = 0; r < rows; ++r) targets[r] = static_cast<int>((r * 131) % valid);
    Floats mx(rows), sum(rows), grad = logits;
    cpu().row_max(data(mx), data(logits), rows, cols, valid);
    cpu().row_sum_exp(data(sum), data(logits), data(mx), rows, cols, valid);
    cpu().cross_entropy_grad(data(grad), data(mx), data(sum), targets.data(), rows, cols, valid, vocab_start, 0.5f);
    DeviceBuffer<T> g(logits);
    DeviceBuffer<float> gmax(rows), gsum(rows);
    DeviceBuffer<int> gtargets(targets);
    row_max_sum_exp(gmax.get(), gsum.get(), g.get(), rows, cols, valid, nullptr);
    cross_entropy_grad(g.get(), gmax.get(), gsum.get(), gtargets.get(), rows, cols, valid, vocab_start, 0.5f, nullptr);
    expect_close(gmax.download(), mx, 0.0, "row max");
    expect_close(gsum.download(), sum, kFp32Tolerance, "row sum exp, rescaled as the maximum grew");
    expect_close(g.download(), grad, tolerance<T>(), "dlogits");
  }
}

// A NaN logit makes the one-pass sum NaN, as it makes the CPU backend's (and so the loss): one NaN among
// numbers (one value a thread at 1031 columns, inside a pack at 1032) and a run of NaNs that fills whole
// packs (columns 16 to 31: four fp32 packs, two bf16 ones).
TYPED_TEST(GpuLoss, OnePassSumIsNanWhereALogitIsNan) {
  using T = TypeParam;
  for (const i64 cols : {i64{1031}, i64{1032}}) {
    SCOPED_TRACE(::testing::Message() << cols << " columns");
    const i64 rows = 3, valid = 1001;
    Floats logits = random_values<T>(rows * cols, 36, -20.0f, 20.0f);
    logits[cols + 500] = NAN;
    for (i64 c = 16; c < 32; ++c) logits[2 * cols + c] = NAN;
    DeviceBuffer<T> g(logits);
    DeviceBuffer<float> gmax(rows), gsum(rows);
    row_max_sum_exp(gmax.get(), gsum.get(), g.get(), rows, cols, valid, nullptr);
    const Floats sum = gsum.download();
    EXPECT_TRUE(std::isfinite(sum[0])) << sum[0];
    EXPECT_TRUE(std::isnan(sum[1])) << "one NaN: " << sum[1];
    EXPECT_TRUE(std::isnan(sum[2])) << "whole packs of NaN: " << sum[2];
  }
}

// fp32 logits' gradient written in bf16 in one pass: the in-place fp32 gradient rounded once, bit for
// bit, and the CPU backend's within bf16's rounding. Over a whole vocabulary (1031 columns, one value a
// thread; 1032, packs) and over rank 1's shard, columns 1024 to 2047 of which 1000 are real, in packs,
// with targets in the shard and outside it, below and above (other ranks' columns).
TEST_F(GpuTest, CrossEntropyGradientIntoBf16IsTheFp32GradientRounded) {
  struct Case {
    i64 cols, valid, vocab_start;
  };
  for (const Case shape : {Case{1031, 1001, 0}, Case{1032, 1001, 0}, Case{1024, 1000, 1024}}) {
    SCOPED_TRACE(::testing::Message() << shape.cols << " columns from " << shape.vocab_start);
    const i64 rows = 29, cols = shape.cols, valid = shape.valid, vocab_start = shape.vocab_start;
    const Floats logits = random_values(rows * cols, 35, -20.0f, 20.0f);
    std::vector<int> targets(rows);
    for (i64 r = 0; r < rows; ++r) targets[r] = static_cast<int>(vocab_start + (r * 71) % valid);
    if (vocab_start > 0) {
      for (i64 r = 0; r < rows; r += 3) targets[r] = static_cast<int>(r % 2 == 0 ? 17 : vocab_start + cols + r);
    }
    Floats mx(rows), sum(rows), grad = logits;
    cpu().row_max(data(mx), data(logits), rows, cols, valid);
    cpu().row_sum_exp(data(sum), data(logits), data(mx), rows, cols, valid);
    cpu().cross_entropy_grad(data(grad), data(mx), data(sum), targets.data(), rows, cols, valid, vocab_start, 0.5f);
    DeviceBuffer<float> g(logits), gmax(rows), gsum(rows);
    DeviceBuffer<bf16> into(rows * cols), cast_back(rows * cols);
    DeviceBuffer<int> gtargets(targets);
    row_max_sum_exp(gmax.get(), gsum.get(), g.get(), rows, cols, valid, nullptr);
    cross_entropy_grad(into.get(), g.get(), gmax.get(), gsum.get(), gtargets.get(), rows, cols, valid, vocab_start,
                       0.5f, nullptr);
    cross_entropy_grad(g.get(), gmax.get(), gsum.get(), gtargets.get(), rows, cols, valid, vocab_start, 0.5f, nullptr);
    cast(cast_back.get(), g.get(), rows * cols, nullptr);
    EXPECT_EQ(into.download(), cast_back.download());
    expect_close(into.download(), grad, tolerance<bf16>(), "dlogits in bf16");
  }
}

TYPED_TEST(GpuLoss, EmbeddingLooksUpAndAccumulatesOnlyTheRowsThisRankHolds) {
  using T = TypeParam;
  const i64 n = 203, cols = 67, vocab_start = 50, rows_held = 40;
  std::vector<int> tokens(n);
  for (i64 i = 0; i < n; ++i) tokens[i] = static_cast<int>((i * 37) % 120);  // some below, some above the range
  const Floats table = random_values<T>(rows_held * cols, 34), out0 = random_values<T>(n * cols, 35);
  const Floats dout = random_values<T>(n * cols, 36), dtable0 = random_values(rows_held * cols, 37);
  Floats out = out0, dtable = dtable0;
  cpu().embedding_forward(data(out), data(table), tokens.data(), n, cols, vocab_start, rows_held);
  cpu().embedding_backward(data(dtable), data(dout), tokens.data(), n, cols, vocab_start, rows_held);
  DeviceBuffer<T> gtable(table), gout(out0), gdout(dout);
  DeviceBuffer<float> gdtable(dtable0);
  DeviceBuffer<int> gtokens(tokens);
  embedding_forward(gout.get(), gtable.get(), gtokens.get(), n, cols, vocab_start, rows_held, nullptr);
  embedding_backward(gdtable.get(), gdout.get(), gtokens.get(), n, cols, vocab_start, rows_held, nullptr);
  expect_close(gout.download(), out, 0.0, "embedding");
  expect_close(gdtable.download(), dtable, kFp32Tolerance, "dtable");
}

TYPED_TEST(GpuLoss, SumOfSquaresMatchesTheCpuBackendInDouble) {
  using T = TypeParam;
  const i64 n = 1000003;
  const Floats x = random_values<T>(n, 38, -3.0f, 3.0f);
  DeviceBuffer<T> g(x);
  DeviceBuffer<double> out(kSumSquaresScratch);
  sum_squares(out.get(), g.get(), n, nullptr);
  const std::vector<double> got = out.download();
  EXPECT_NEAR(got[0], cpu().sum_squares(data(x), n), 1e-9 * got[0]);
}

TEST_F(GpuTest, AdamWUpdatesFp32MastersAndMomentsAndWritesTheBf16Copy) {
  const i64 n = 54321;
  const Floats master0 = random_values(n, 40), grad = random_values(n, 41, -0.1f, 0.1f);
  const Floats m0 = random_values(n, 42, -0.01f, 0.01f), v0 = random_values(n, 43, 1e-6f, 1e-4f);
  Floats master = master0, m = m0, v = v0;
  cpu().adamw(data(master), data(grad), data(m), data(v), n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 7);
  Floats bf16_copy(n);
  for (i64 i = 0; i < n; ++i) bf16_copy[i] = float_from_bf16_bits(bf16_bits_from_float(master[i]));
  DeviceBuffer<float> gmaster(master0), ggrad(grad), gm(m0), gv(v0);
  DeviceBuffer<bf16> gparam(n);
  adamw(gmaster.get(), gparam.get(), ggrad.get(), gm.get(), gv.get(), n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 7, nullptr);
  expect_close(gmaster.download(), master, kFp32Tolerance, "master");
  expect_close(gm.download(), m, kFp32Tolerance, "m");
  expect_close(gv.download(), v, kFp32Tolerance, "v");
  // Rounding a master that differs in its last bit may land on the neighbouring bf16 value.
  expect_close(gparam.download(), bf16_copy, 1e-2, "bf16 copy");
}

}  // namespace
}  // namespace loom::kernels::testing
