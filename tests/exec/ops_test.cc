// Every CPU backend op's backward against central finite differences of its forward, GEMM against a
// naive product, and AdamW against its formula. Tolerances are for fp32 with a step of 1e-2.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "exec/cpu/cpu_backend.h"

namespace loom::exec {
namespace {

using Vec = std::vector<float>;

Vec random_vec(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  Vec v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Checks analytic[i] ≈ d/dx[i] of loss(x) for every element of x (x is perturbed in place).
void expect_gradient(Vec& x, const Vec& analytic, const std::function<double()>& loss, const char* what) {
  const float eps = 1e-2f;
  ASSERT_EQ(x.size(), analytic.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float saved = x[i];
    x[i] = saved + eps;
    const double up = loss();
    x[i] = saved - eps;
    const double down = loss();
    x[i] = saved;
    const double numeric = (up - down) / (2.0 * eps);
    EXPECT_NEAR(analytic[i], numeric, 5e-3 + 2e-2 * std::fabs(numeric)) << what << " element " << i;
  }
}

TEST(ExecCpuOps, GemmMatchesNaiveProductForEveryTransposition) {
  CpuBackend be;
  const int m = 7, n = 5, k = 6;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Vec a = random_vec(m * k, 1), b = random_vec(k * n, 2);
      Vec c = random_vec(m * n, 3), c_eigen = c, expected(m * n);
      const int lda = ta ? m : k, ldb = tb ? k : n;
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
          double s = 0;
          for (int p = 0; p < k; ++p)
            s += static_cast<double>(ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
          expected[i * n + j] = static_cast<float>(0.5 * s + 2.0 * c[i * n + j]);
        }
      be.gemm(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 2.0f, c.data(), n);
      eigen_sgemm(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 2.0f, c_eigen.data(), n);
      for (int i = 0; i < m * n; ++i) {
        EXPECT_NEAR(c[i], expected[i], 1e-4) << ta << tb;
        EXPECT_NEAR(c_eigen[i], expected[i], 1e-4) << ta << tb;
      }
    }
}

TEST(ExecCpuOps, LayerNormBackward) {
  CpuBackend be;
  const int rows = 3, cols = 8;
  Vec x = random_vec(rows * cols, 4), w = random_vec(cols, 5), b = random_vec(cols, 6), dout = random_vec(rows * cols, 7);
  Vec out(rows * cols), mean(rows), rstd(rows), dx(rows * cols), dw(cols, 0), db(cols, 0);
  auto loss = [&] {
    be.layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), rows, cols);
    return dot(out, dout);
  };
  loss();
  be.layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), rows,
                        cols);
  expect_gradient(x, dx, loss, "dx");
  expect_gradient(w, dw, loss, "dw");
  expect_gradient(b, db, loss, "db");
}

TEST(ExecCpuOps, RmsNormBackward) {
  CpuBackend be;
  const int rows = 3, cols = 8;
  Vec x = random_vec(rows * cols, 8), w = random_vec(cols, 9), dout = random_vec(rows * cols, 10);
  Vec out(rows * cols), rstd(rows), dx(rows * cols), dw(cols, 0);
  auto loss = [&] {
    be.rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), rows, cols);
    return dot(out, dout);
  };
  loss();
  be.rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), rows, cols);
  expect_gradient(x, dx, loss, "dx");
  expect_gradient(w, dw, loss, "dw");
}

TEST(ExecCpuOps, GeluAndSwigluBackward) {
  CpuBackend be;
  const int rows = 2, f = 5;
  Vec x = random_vec(rows * 2 * f, 11), dout = random_vec(rows * 2 * f, 12), out(rows * 2 * f), dx(rows * 2 * f);
  auto gelu = [&] {
    be.gelu_forward(out.data(), x.data(), static_cast<std::int64_t>(x.size()));
    return dot(out, dout);
  };
  be.gelu_backward(dx.data(), x.data(), dout.data(), static_cast<std::int64_t>(x.size()));
  expect_gradient(x, dx, gelu, "gelu");

  Vec dsw(rows * f), sw_out(rows * f), dsw_in(rows * 2 * f);
  dsw = random_vec(rows * f, 13);
  auto swiglu = [&] {
    be.swiglu_forward(sw_out.data(), x.data(), rows, f);
    return dot(sw_out, dsw);
  };
  be.swiglu_backward(dsw_in.data(), x.data(), dsw.data(), rows, f);
  expect_gradient(x, dsw_in, swiglu, "swiglu");
}

TEST(ExecCpuOps, CausalAttentionBackwardWithGroupedQueries) {
  CpuBackend be;
  const AttentionShape s{2, 5, 4, 2, 3};  // batch 2, seq 5, 4 query heads sharing 2 key/value heads
  const std::int64_t tokens = s.batch * s.seq, ctx_cols = s.heads * s.head_dim;
  Vec qkv = random_vec(tokens * s.qkv_cols(), 14), dctx = random_vec(tokens * ctx_cols, 15);
  Vec ctx(tokens * ctx_cols), probs(s.probs_numel()), dqkv(qkv.size());
  auto loss = [&] {
    be.attention_forward(ctx.data(), probs.data(), qkv.data(), s);
    return dot(ctx, dctx);
  };
  loss();
  // Causality: the first token of each sequence attends only to itself.
  EXPECT_FLOAT_EQ(probs[0], 1.0f);
  EXPECT_FLOAT_EQ(probs[1], 0.0f);
  be.attention_backward(dqkv.data(), dctx.data(), probs.data(), qkv.data(), s);
  expect_gradient(qkv, dqkv, loss, "dqkv");
  Vec recomputed(probs.size());
  be.attention_probs(recomputed.data(), qkv.data(), s);
  EXPECT_EQ(recomputed, probs);
}

TEST(ExecCpuOps, AttentionBackwardThroughDropout) {
  CpuBackend be;
  const AttentionShape s{1, 6, 2, 2, 3};
  const std::int64_t tokens = s.batch * s.seq, ctx_cols = s.heads * s.head_dim;
  Vec qkv = random_vec(tokens * s.qkv_cols(), 21), dctx = random_vec(tokens * ctx_cols, 22);
  Vec ctx(tokens * ctx_cols), probs(s.probs_numel()), dropped(s.probs_numel()), dqkv(qkv.size());
  std::vector<std::uint8_t> mask(s.probs_numel());
  const float p = 0.3f, keep = 1.0f / (1.0f - p);
  be.dropout_mask(mask.data(), s.probs_numel(), 99, 1000, p);
  int kept = 0;
  for (auto m : mask) kept += m;
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, static_cast<int>(mask.size()));
  auto loss = [&] {
    be.attention_probs(probs.data(), qkv.data(), s);
    be.apply_mask(dropped.data(), probs.data(), mask.data(), s.probs_numel(), keep);
    be.attention_context(ctx.data(), dropped.data(), qkv.data(), s);
    return dot(ctx, dctx);
  };
  loss();
  be.attention_backward(dqkv.data(), dctx.data(), probs.data(), dropped.data(), mask.data(), keep, qkv.data(), s);
  expect_gradient(qkv, dqkv, loss, "dqkv");
  // The mask depends on the position only: a sub-range drawn on its own is the same.
  std::vector<std::uint8_t> tail(10);
  be.dropout_mask(tail.data(), 10, 99, 1000 + 20, p);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(tail[i], mask[20 + i]);
}

TEST(ExecCpuOps, RotaryEmbeddingBackwardIsItsTranspose) {
  CpuBackend be;
  const AttentionShape s{1, 6, 2, 1, 4};
  Vec x = random_vec(s.seq * s.qkv_cols(), 16), y = random_vec(x.size(), 17);
  Vec rx = x, ry = y;
  be.rope(rx.data(), s, false);
  be.rope(ry.data(), s, true);
  EXPECT_NEAR(dot(rx, y), dot(x, ry), 1e-4);  // <R x, y> = <x, Rᵀ y>
  be.rope(rx.data(), s, true);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(rx[i], x[i], 1e-5);
  // Position 0 is not rotated; v columns never are.
  for (int c = 0; c < s.qkv_cols(); ++c) EXPECT_NEAR(ry[c], y[c], 1e-6);
}

TEST(ExecCpuOps, CrossEntropyGradientIgnoresPaddedColumns) {
  CpuBackend be;
  const int rows = 3, cols = 7, valid = 5;
  Vec logits = random_vec(rows * cols, 18);
  const std::vector<int> targets = {0, 4, 2};
  auto loss = [&] {
    Vec mx(rows), sum(rows), target(rows);
    be.row_max(mx.data(), logits.data(), rows, cols, valid);
    be.row_sum_exp(sum.data(), logits.data(), mx.data(), rows, cols, valid);
    be.target_logit(target.data(), logits.data(), targets.data(), rows, cols, 0);
    double l = 0;
    for (int r = 0; r < rows; ++r) l += std::log(static_cast<double>(sum[r])) + mx[r] - target[r];
    return l;
  };
  Vec mx(rows), sum(rows), grad = logits;
  be.row_max(mx.data(), logits.data(), rows, cols, valid);
  be.row_sum_exp(sum.data(), logits.data(), mx.data(), rows, cols, valid);
  be.cross_entropy_grad(grad.data(), mx.data(), sum.data(), targets.data(), rows, cols, valid, 0, 1.0f);
  expect_gradient(logits, grad, loss, "dlogits");
  for (int r = 0; r < rows; ++r)
    for (int c = valid; c < cols; ++c) EXPECT_EQ(grad[r * cols + c], 0.0f);
}

TEST(ExecCpuOps, EmbeddingBackwardScattersIntoHeldRows) {
  CpuBackend be;
  const int cols = 3, held = 4, start = 2;
  Vec table = random_vec(held * cols, 19), dout = random_vec(4 * cols, 20), out(4 * cols, 0), dtable(held * cols, 0);
  const std::vector<int> tokens = {2, 9, 5, 2};  // 9 belongs to another rank
  auto loss = [&] {
    std::fill(out.begin(), out.end(), 0.0f);
    be.embedding_forward(out.data(), table.data(), tokens.data(), 4, cols, start, held);
    return dot(out, dout);
  };
  be.embedding_backward(dtable.data(), dout.data(), tokens.data(), 4, cols, start, held);
  expect_gradient(table, dtable, loss, "dtable");
}

TEST(ExecCpuOps, AdamWFollowsItsFormula) {
  CpuBackend be;
  Vec p = {1.0f, -2.0f}, g = {0.5f, 0.25f}, m = {0.1f, 0.0f}, v = {0.01f, 0.0f};
  const float lr = 0.1f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  const int step = 3;
  Vec expected = p;
  for (int i = 0; i < 2; ++i) {
    const double mi = b1 * m[i] + (1 - b1) * g[i], vi = b2 * v[i] + (1 - b2) * g[i] * g[i];
    const double mhat = mi / (1 - std::pow(b1, step)), vhat = vi / (1 - std::pow(b2, step));
    expected[i] = static_cast<float>(p[i] - lr * (mhat / (std::sqrt(vhat) + eps) + wd * p[i]));
  }
  be.adamw(p.data(), g.data(), m.data(), v.data(), 2, lr, b1, b2, eps, wd, step);
  EXPECT_NEAR(p[0], expected[0], 1e-6);
  EXPECT_NEAR(p[1], expected[1], 1e-6);
}

TEST(ExecCpuOps, AllocationsAreChargedToTheirCategory) {
  CpuBackend be;
  {
    Tensor a = be.alloc(10, 10, MemoryCategory::kActivations);
    Tensor b = be.alloc(5, 2, MemoryCategory::kParams);
    EXPECT_EQ(be.memory().current_bytes(MemoryCategory::kActivations), 400);
    EXPECT_EQ(be.memory().current_bytes(MemoryCategory::kParams), 40);
  }
  EXPECT_EQ(be.memory().current_bytes(MemoryCategory::kActivations), 0);
  EXPECT_EQ(be.memory().peak_bytes(MemoryCategory::kActivations), 400);
  EXPECT_EQ(be.memory().peak_total_bytes(), 440);
}

}  // namespace
}  // namespace loom::exec
