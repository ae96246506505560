// Every backend op, on every backend this build can make (ggml's test-backend-ops): inputs are built on
// the host, the op runs on the backend under test and on the CPU fp32 reference, and the outputs
// agree within the op's stated tolerance. Independent checks run on the backend under test too:
// backwards against central finite differences of their forwards (fp32, step 1e-2), GEMM against a
// naive product, AdamW against its formula. A backend that cannot start here (no GPU) skips visibly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "exec/cpu/cpu_backend.h"
#include "staged.h"

namespace loom::exec {
namespace {

using Outputs = std::vector<Vec>;

// How far an op's output on another backend may be from the fp32 reference: |got − ref| ≤ abs + rel·|ref|.
// GEMMs and reductions may sum in another order (blocked, tree, fused multiply-add); transcendental
// functions (exp, tanh) may differ by a few ulp, which softmax and attention then carry through.
struct Tolerance {
  double abs, rel;
};
constexpr Tolerance kExact{0, 0};                 // copies, masks, gathers: bit for bit
constexpr Tolerance kElementwise{1e-6, 1e-6};     // one rounding per value
constexpr Tolerance kReduction{1e-5, 1e-5};       // GEMM, norms, bias gradients, cross-entropy
constexpr Tolerance kTranscendental{1e-5, 1e-5};  // GELU, SwiGLU, RoPE, AdamW
constexpr Tolerance kAttention{1e-5, 1e-4};       // softmax then two GEMMs

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

Vec bytes_as_floats(const Bytes& b) { return Vec(b.begin(), b.end()); }

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

void expect_close(const Vec& got, const Vec& ref, Tolerance tol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], ref[i], tol.abs + tol.rel * std::fabs(ref[i])) << what << " element " << i;
}

// The backend named by the test's parameter, and the CPU fp32 reference beside it.
class BackendOps : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string error;
    backend_ = make_backend(GetParam(), &error);
    if (!backend_) GTEST_SKIP() << "backend '" << GetParam() << "' cannot run here: " << error;
  }
  Backend& be() { return *backend_; }

  // Runs `op` (host inputs in, host outputs out) on both backends and compares every output.
  Outputs expect_matches_reference(const std::function<Outputs(Backend&)>& op, Tolerance tol, const char* what) {
    const Outputs got = op(be()), ref = op(reference_);
    EXPECT_EQ(got.size(), ref.size()) << what;
    for (std::size_t i = 0; i < std::min(got.size(), ref.size()); ++i)
      expect_close(got[i], ref[i], tol, std::string(what) + " output " + std::to_string(i) + " on " + GetParam());
    return got;
  }

  CpuBackend reference_;
  std::unique_ptr<Backend> backend_;
};

TEST_P(BackendOps, GemmMatchesNaiveProductForEveryTransposition) {
  const int m = 7, n = 5, k = 6;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Vec a = random_vec(m * k, 1), b = random_vec(k * n, 2), c0 = random_vec(m * n, 3);
      const int lda = ta ? m : k, ldb = tb ? k : n;
      Vec expected(m * n);
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
          double s = 0;
          for (int p = 0; p < k; ++p)
            s += static_cast<double>(ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
          expected[i * n + j] = static_cast<float>(0.5 * s + 2.0 * c0[i * n + j]);
        }
      auto gemm = [&](Backend& be) {
        Staged s(be);
        float* c = s.in(c0);
        be.gemm(ta, tb, m, n, k, 0.5f, s.in(a), lda, s.in(b), ldb, 2.0f, c, n);
        return Outputs{s.get(c, m * n)};
      };
      const Outputs got = expect_matches_reference(gemm, kReduction, "gemm");
      expect_close(got[0], expected, {1e-4, 0}, "gemm vs naive product");
    }
}

// `loom profile` evicts an op's operands before timing it cold: the values must survive the eviction.
TEST_P(BackendOps, EvictingFromTheCachesKeepsTheValues) {
  const Vec x = random_vec(10000, 41);
  Staged s(be());
  float* d = s.in(x);
  be().evict_from_cache(d, static_cast<std::int64_t>(x.size() * sizeof(float)));
  EXPECT_EQ(s.get(d, x.size()), x);
}

TEST_P(BackendOps, ElementwiseOpsFollowTheirFormulas) {
  const int rows = 3, cols = 4, n = rows * cols;
  const Vec x = random_vec(n, 30), y = random_vec(n, 31), bias = random_vec(cols, 32);
  auto ops = [&](Backend& be) {
    Staged s(be);
    float *sum = s.out(n), *axpy = s.in(y), *biased = s.in(x), *dbias = s.in(bias), *scaled = s.in(x),
          *copied = s.out(n);
    float* zeroed = s.in(x);
    be.add(sum, s.in(x), s.in(y), n);
    be.axpy(axpy, 0.5f, s.in(x), n);
    be.add_bias(biased, s.in(bias), rows, cols);
    be.bias_grad(dbias, s.in(y), rows, cols);
    be.scale(scaled, -2.0f, n);
    be.copy(copied, s.in(y), n);
    be.zero(zeroed, n);
    const double squares = be.sum_squares(s.in(x), n);
    return Outputs{s.get(sum, n),    s.get(axpy, n),   s.get(biased, n), s.get(dbias, cols),
                   s.get(scaled, n), s.get(copied, n), s.get(zeroed, n), Vec{static_cast<float>(squares)}};
  };
  const Outputs got = expect_matches_reference(ops, kElementwise, "element-wise");
  Vec dbias = bias;
  double squares = 0;
  for (int i = 0; i < n; ++i) {
    EXPECT_FLOAT_EQ(got[0][i], x[i] + y[i]);
    EXPECT_FLOAT_EQ(got[1][i], y[i] + 0.5f * x[i]);
    EXPECT_FLOAT_EQ(got[2][i], x[i] + bias[i % cols]);
    EXPECT_FLOAT_EQ(got[4][i], -2.0f * x[i]);
    EXPECT_EQ(got[5][i], y[i]);
    EXPECT_EQ(got[6][i], 0.0f);
    dbias[i % cols] += y[i];
    squares += static_cast<double>(x[i]) * x[i];
  }
  expect_close(got[3], dbias, {1e-6, 1e-6}, "bias_grad accumulates column sums");
  EXPECT_NEAR(got[7][0], squares, 1e-5 * squares);
}

TEST_P(BackendOps, LayerNormMatchesReferenceAndItsFiniteDifferences) {
  const int rows = 3, cols = 8;
  Vec x = random_vec(rows * cols, 4), w = random_vec(cols, 5), b = random_vec(cols, 6);
  const Vec dout = random_vec(rows * cols, 7);
  auto forward = [&](Backend& be) {  // out, mean, rstd
    Staged s(be);
    float *out = s.out(rows * cols), *mean = s.out(rows), *rstd = s.out(rows);
    be.layernorm_forward(out, mean, rstd, s.in(x), s.in(w), s.in(b), rows, cols);
    return Outputs{s.get(out, rows * cols), s.get(mean, rows), s.get(rstd, rows)};
  };
  auto backward = [&](Backend& be) {  // dx, dw, db
    const Outputs f = forward(be);
    Staged s(be);
    float *dx = s.out(rows * cols), *dw = s.out(cols), *db = s.out(cols);
    be.layernorm_backward(dx, dw, db, s.in(dout), s.in(x), s.in(w), s.in(f[1]), s.in(f[2]), rows, cols);
    return Outputs{s.get(dx, rows * cols), s.get(dw, cols), s.get(db, cols)};
  };
  expect_matches_reference(forward, kReduction, "layernorm forward");
  const Outputs g = expect_matches_reference(backward, kReduction, "layernorm backward");
  auto loss = [&] { return dot(forward(be())[0], dout); };
  expect_gradient(x, g[0], loss, "dx");
  expect_gradient(w, g[1], loss, "dw");
  expect_gradient(b, g[2], loss, "db");
}

TEST_P(BackendOps, RmsNormMatchesReferenceAndItsFiniteDifferences) {
  const int rows = 3, cols = 8;
  Vec x = random_vec(rows * cols, 8), w = random_vec(cols, 9);
  const Vec dout = random_vec(rows * cols, 10);
  auto forward = [&](Backend& be) {  // out, rstd
    Staged s(be);
    float *out = s.out(rows * cols), *rstd = s.out(rows);
    be.rmsnorm_forward(out, rstd, s.in(x), s.in(w), rows, cols);
    return Outputs{s.get(out, rows * cols), s.get(rstd, rows)};
  };
  auto backward = [&](Backend& be) {  // dx, dw
    const Outputs f = forward(be);
    Staged s(be);
    float *dx = s.out(rows * cols), *dw = s.out(cols);
    be.rmsnorm_backward(dx, dw, s.in(dout), s.in(x), s.in(w), s.in(f[1]), rows, cols);
    return Outputs{s.get(dx, rows * cols), s.get(dw, cols)};
  };
  expect_matches_reference(forward, kReduction, "rmsnorm forward");
  const Outputs g = expect_matches_reference(backward, kReduction, "rmsnorm backward");
  auto loss = [&] { return dot(forward(be())[0], dout); };
  expect_gradient(x, g[0], loss, "dx");
  expect_gradient(w, g[1], loss, "dw");
}

TEST_P(BackendOps, GeluAndSwigluMatchReferenceAndTheirFiniteDifferences) {
  const int rows = 2, f = 5, n = rows * 2 * f;
  Vec x = random_vec(n, 11);
  const Vec dout = random_vec(n, 12), dsw = random_vec(rows * f, 13);
  auto gelu = [&](Backend& be) {  // out, din
    Staged s(be);
    float *out = s.out(n), *din = s.out(n);
    be.gelu_forward(out, s.in(x), n);
    be.gelu_backward(din, s.in(x), s.in(dout), n);
    return Outputs{s.get(out, n), s.get(din, n)};
  };
  auto swiglu = [&](Backend& be) {  // out, din
    Staged s(be);
    float *out = s.out(rows * f), *din = s.out(n);
    be.swiglu_forward(out, s.in(x), rows, f);
    be.swiglu_backward(din, s.in(x), s.in(dsw), rows, f);
    return Outputs{s.get(out, rows * f), s.get(din, n)};
  };
  const Vec dgelu = expect_matches_reference(gelu, kTranscendental, "gelu")[1];
  const Vec dswiglu = expect_matches_reference(swiglu, kTranscendental, "swiglu")[1];
  expect_gradient(
      x, dgelu, [&] { return dot(gelu(be())[0], dout); }, "gelu");
  expect_gradient(
      x, dswiglu, [&] { return dot(swiglu(be())[0], dsw); }, "swiglu");
}

TEST_P(BackendOps, CausalAttentionWithGroupedQueriesMatchesReferenceAndItsFiniteDifferences) {
  const AttentionShape sh{2, 5, 4, 2, 3};  // batch 2, seq 5, 4 query heads sharing 2 key/value heads
  const std::size_t tokens = sh.batch * sh.seq, ctx_n = tokens * sh.heads * sh.head_dim, probs_n = sh.probs_numel();
  Vec qkv = random_vec(tokens * sh.qkv_cols(), 14);
  const Vec dctx = random_vec(ctx_n, 15);
  auto attention = [&](Backend& be) {  // ctx, probs, dqkv, probs recomputed
    Staged s(be);
    float *ctx = s.out(ctx_n), *probs = s.out(probs_n), *dqkv = s.out(qkv.size()), *again = s.out(probs_n);
    const float* in = s.in(qkv);
    be.attention_forward(ctx, probs, in, sh);
    be.attention_backward(dqkv, s.in(dctx), probs, in, sh);
    be.attention_probs(again, in, sh);
    return Outputs{s.get(ctx, ctx_n), s.get(probs, probs_n), s.get(dqkv, qkv.size()), s.get(again, probs_n)};
  };
  const Outputs got = expect_matches_reference(attention, kAttention, "attention");
  // Causality: the first token of each sequence attends only to itself.
  EXPECT_FLOAT_EQ(got[1][0], 1.0f);
  EXPECT_FLOAT_EQ(got[1][1], 0.0f);
  EXPECT_EQ(got[3], got[1]);  // selective recomputation gives the same probabilities
  expect_gradient(
      qkv, got[2], [&] { return dot(attention(be())[0], dctx); }, "dqkv");
}

TEST_P(BackendOps, AttentionThroughDropoutMatchesReferenceAndItsFiniteDifferences) {
  const AttentionShape sh{1, 6, 2, 2, 3};
  const std::size_t tokens = sh.batch * sh.seq, ctx_n = tokens * sh.heads * sh.head_dim, probs_n = sh.probs_numel();
  Vec qkv = random_vec(tokens * sh.qkv_cols(), 21);
  const Vec dctx = random_vec(ctx_n, 22);
  const float p = 0.3f, keep = 1.0f / (1.0f - p);
  auto masks = [&](Backend& be) {  // the mask, and ten of its values drawn on their own
    Staged s(be);
    std::uint8_t* mask = s.bytes(Bytes(probs_n));
    std::uint8_t* tail = s.bytes(Bytes(10));
    be.dropout_mask(mask, probs_n, 99, 1000, p);
    be.dropout_mask(tail, 10, 99, 1000 + 20, p);
    return Outputs{bytes_as_floats(s.get_bytes(mask, probs_n)), bytes_as_floats(s.get_bytes(tail, 10))};
  };
  const Outputs m = expect_matches_reference(masks, kExact, "dropout mask");
  const Bytes mask(m[0].begin(), m[0].end());
  double kept = 0;
  for (float v : m[0]) kept += v;
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, static_cast<double>(probs_n));
  // The mask depends on the position only: a sub-range drawn on its own is the same.
  for (int i = 0; i < 10; ++i) EXPECT_EQ(m[1][i], m[0][20 + i]);

  auto attention = [&](Backend& be) {  // ctx, dqkv
    Staged s(be);
    float *ctx = s.out(ctx_n), *probs = s.out(probs_n), *dropped = s.out(probs_n), *dqkv = s.out(qkv.size());
    const float* in = s.in(qkv);
    const std::uint8_t* mk = s.bytes(mask);
    be.attention_probs(probs, in, sh);
    be.apply_mask(dropped, probs, mk, probs_n, keep);
    be.attention_context(ctx, dropped, in, sh);
    be.attention_backward(dqkv, s.in(dctx), probs, dropped, mk, keep, in, sh);
    return Outputs{s.get(ctx, ctx_n), s.get(dqkv, qkv.size())};
  };
  const Outputs got = expect_matches_reference(attention, kAttention, "attention with dropout");
  expect_gradient(
      qkv, got[1], [&] { return dot(attention(be())[0], dctx); }, "dqkv");
}

// Causal attention with dropout written as the textbook loops, in double: P = softmax(QKᵀ/√d) over keys
// j ≤ i, ctx = (mask ⊙ P · keep) V, and its backward. Independent of any backend's blocking.
struct NaiveAttention {
  Vec ctx, probs, dqkv;
};
NaiveAttention naive_attention(const Vec& qkv, const Vec& dctx, const Bytes& mask, float keep,
                               const AttentionShape& sh) {
  const int S = sh.seq, D = sh.head_dim, group = sh.heads / sh.kv_heads;
  const std::size_t ld = sh.qkv_cols(), ctx_ld = static_cast<std::size_t>(sh.heads) * D;
  NaiveAttention out{Vec(sh.batch * S * ctx_ld), Vec(sh.probs_numel()), Vec(qkv.size())};
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (int b = 0; b < sh.batch; ++b)
    for (int h = 0; h < sh.heads; ++h) {
      const int g = h / group;
      auto q = [&](int i, int d) { return qkv[(b * S + i) * ld + h * D + d]; };
      auto k = [&](int i, int d) { return qkv[(b * S + i) * ld + (sh.heads + g) * D + d]; };
      auto v = [&](int i, int d) { return qkv[(b * S + i) * ld + (sh.heads + sh.kv_heads + g) * D + d]; };
      const std::size_t pbase = (static_cast<std::size_t>(b) * sh.heads + h) * S * S;
      std::vector<double> p(static_cast<std::size_t>(S) * S, 0.0);
      for (int i = 0; i < S; ++i) {
        double mx = -1e300;
        std::vector<double> sc(i + 1);
        for (int j = 0; j <= i; ++j) {
          for (int d = 0; d < D; ++d) sc[j] += q(i, d) * k(j, d);
          sc[j] *= scale;
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (int j = 0; j <= i; ++j) sum += std::exp(sc[j] - mx);
        for (int j = 0; j <= i; ++j) p[i * S + j] = std::exp(sc[j] - mx) / sum;
      }
      auto kept = [&](int i, int j) { return mask.empty() ? 1.0 : (mask[pbase + i * S + j] ? keep : 0.0); };
      for (int i = 0; i < S; ++i) {
        for (int j = 0; j < S; ++j) out.probs[pbase + i * S + j] = static_cast<float>(p[i * S + j]);
        for (int d = 0; d < D; ++d) {
          double c = 0;
          for (int j = 0; j <= i; ++j) c += p[i * S + j] * kept(i, j) * v(j, d);
          out.ctx[(b * S + i) * ctx_ld + h * D + d] = static_cast<float>(c);
        }
      }
      auto dc = [&](int i, int d) { return dctx[(b * S + i) * ctx_ld + h * D + d]; };
      for (int i = 0; i < S; ++i) {
        std::vector<double> dp(i + 1);
        double dot = 0;
        for (int j = 0; j <= i; ++j) {
          for (int d = 0; d < D; ++d) dp[j] += dc(i, d) * v(j, d);
          dp[j] *= kept(i, j);
          dot += p[i * S + j] * dp[j];
          for (int d = 0; d < D; ++d)
            out.dqkv[(b * S + j) * ld + (sh.heads + sh.kv_heads + g) * D + d] +=
                static_cast<float>(p[i * S + j] * kept(i, j) * dc(i, d));
        }
        for (int j = 0; j <= i; ++j) {
          const double ds = p[i * S + j] * (dp[j] - dot) * scale;
          for (int d = 0; d < D; ++d) {
            out.dqkv[(b * S + i) * ld + h * D + d] += static_cast<float>(ds * k(j, d));
            out.dqkv[(b * S + j) * ld + (sh.heads + g) * D + d] += static_cast<float>(ds * q(i, d));
          }
        }
      }
    }
  return out;
}

// Sequences longer than the CPU backend's query block (128 rows), with grouped queries and dropout:
// every block, the diagonal ones and the skipped ones above them, against the textbook loops.
TEST_P(BackendOps, CausalAttentionOverSeveralQueryBlocksMatchesTheTextbookLoops) {
  const AttentionShape sh{2, 300, 4, 2, 8};
  const std::size_t tokens = sh.batch * sh.seq, ctx_n = tokens * sh.heads * sh.head_dim, probs_n = sh.probs_numel();
  const Vec qkv = random_vec(tokens * sh.qkv_cols(), 31), dctx = random_vec(ctx_n, 32);
  Bytes mask(probs_n);
  std::mt19937 rng(33);
  for (auto& m : mask) m = (rng() % 10) < 8 ? 1 : 0;
  const float keep = 1.0f / 0.8f;
  for (const bool dropout : {false, true}) {
    SCOPED_TRACE(dropout ? "with dropout" : "without dropout");
    const NaiveAttention want = naive_attention(qkv, dctx, dropout ? mask : Bytes{}, keep, sh);
    Staged s(be());
    float *ctx = s.out(ctx_n), *probs = s.out(probs_n), *dropped = s.out(probs_n), *dqkv = s.out(qkv.size());
    const float* in = s.in(qkv);
    const std::uint8_t* mk = s.bytes(mask);
    be().attention_probs(probs, in, sh);
    if (dropout) be().apply_mask(dropped, probs, mk, probs_n, keep);
    be().attention_context(ctx, dropout ? dropped : probs, in, sh);
    be().attention_backward(dqkv, s.in(dctx), probs, dropout ? dropped : nullptr, dropout ? mk : nullptr, keep, in, sh);
    expect_close(s.get(probs, probs_n), want.probs, kAttention, "probs");
    expect_close(s.get(ctx, ctx_n), want.ctx, kAttention, "ctx");
    expect_close(s.get(dqkv, qkv.size()), want.dqkv, {1e-4, 1e-4}, "dqkv");
  }
}

TEST_P(BackendOps, RotaryEmbeddingMatchesReferenceAndItsBackwardIsItsTranspose) {
  const AttentionShape sh{1, 6, 2, 1, 4};
  const Vec x = random_vec(sh.seq * sh.qkv_cols(), 16), y = random_vec(x.size(), 17);
  auto rope = [&](Backend& be) {  // R x, Rᵀ y, Rᵀ R x
    Staged s(be);
    float *rx = s.in(x), *ry = s.in(y);
    be.rope(rx, sh, false);
    be.rope(ry, sh, true);
    const Vec rx_host = s.get(rx, x.size());
    be.rope(rx, sh, true);
    return Outputs{rx_host, s.get(ry, y.size()), s.get(rx, x.size())};
  };
  const Outputs got = expect_matches_reference(rope, kTranscendental, "rope");
  EXPECT_NEAR(dot(got[0], y), dot(x, got[1]), 1e-4);  // <R x, y> = <x, Rᵀ y>
  expect_close(got[2], x, {1e-5, 0}, "Rᵀ R x = x");
  // Position 0 is not rotated; v columns never are.
  for (int c = 0; c < sh.qkv_cols(); ++c) EXPECT_NEAR(got[1][c], y[c], 1e-6);
}

TEST_P(BackendOps, CrossEntropyMatchesReferenceAndIgnoresPaddedColumns) {
  const int rows = 3, cols = 7, valid = 5;
  Vec logits = random_vec(rows * cols, 18);
  const std::vector<int> targets = {0, 4, 2};
  auto pieces = [&](Backend& be) {  // max, sum of exponentials, target logit, gradient
    Staged s(be);
    float *mx = s.out(rows), *sum = s.out(rows), *target = s.out(rows), *grad = s.in(logits);
    const float* in = s.in(logits);
    const int* t = s.ints(targets);
    be.row_max(mx, in, rows, cols, valid);
    be.row_sum_exp(sum, in, mx, rows, cols, valid);
    be.target_logit(target, in, t, rows, cols, 0);
    be.cross_entropy_grad(grad, mx, sum, t, rows, cols, valid, 0, 1.0f);
    return Outputs{s.get(mx, rows), s.get(sum, rows), s.get(target, rows), s.get(grad, rows * cols)};
  };
  auto loss = [&] {
    const Outputs o = pieces(be());
    double l = 0;
    for (int r = 0; r < rows; ++r) l += std::log(static_cast<double>(o[1][r])) + o[0][r] - o[2][r];
    return l;
  };
  const Vec grad = expect_matches_reference(pieces, kReduction, "cross-entropy")[3];
  expect_gradient(logits, grad, loss, "dlogits");
  for (int r = 0; r < rows; ++r)
    for (int c = valid; c < cols; ++c) EXPECT_EQ(grad[r * cols + c], 0.0f);
}

// The max and the sum of exponentials from one read of the logits (whole rows on one rank) are the two
// passes' values: bit for bit on the CPU backend, which takes each row's two passes while it is in cache;
// within a reduction's rounding on a GPU, whose online softmax rescales its partial sums.
TEST_P(BackendOps, MaxAndSumTogetherAreTheTwoPassesValues) {
  const int rows = 5, cols = 203, valid = 200;
  const Vec logits = random_vec(rows * cols, 21);
  auto stats = [&](Backend& be) {  // max and sum in two passes, then together
    Staged s(be);
    float *mx = s.out(rows), *sum = s.out(rows), *mx1 = s.out(rows), *sum1 = s.out(rows);
    const float* in = s.in(logits);
    be.row_max(mx, in, rows, cols, valid);
    be.row_sum_exp(sum, in, mx, rows, cols, valid);
    be.row_max_sum_exp(mx1, sum1, in, rows, cols, valid);
    return Outputs{s.get(mx, rows), s.get(sum, rows), s.get(mx1, rows), s.get(sum1, rows)};
  };
  const Outputs got = expect_matches_reference(stats, kReduction, "row statistics");
  const bool host = GetParam() == "cpu";  // as backends_where (below) splits them
  for (int i : {0, 1})
    expect_close(got[2 + i], got[i], host ? kExact : kReduction, i == 0 ? "max" : "sum of exponentials");
}

TEST_P(BackendOps, EmbeddingMatchesReferenceAndItsBackwardScattersIntoHeldRows) {
  const int cols = 3, held = 4, start = 2, n = 4;
  Vec table = random_vec(held * cols, 19);
  const Vec dout = random_vec(n * cols, 20);
  const std::vector<int> tokens = {2, 9, 5, 2};  // 9 belongs to another rank
  auto embedding = [&](Backend& be) {            // out, dtable
    Staged s(be);
    float *out = s.out(n * cols), *dtable = s.out(held * cols);
    const int* t = s.ints(tokens);
    be.embedding_forward(out, s.in(table), t, n, cols, start, held);
    be.embedding_backward(dtable, s.in(dout), t, n, cols, start, held);
    return Outputs{s.get(out, n * cols), s.get(dtable, held * cols)};
  };
  const Vec dtable = expect_matches_reference(embedding, kElementwise, "embedding")[1];
  expect_gradient(
      table, dtable, [&] { return dot(embedding(be())[0], dout); }, "dtable");
}

// The mixture-of-experts row ops with host index arrays (as the MoE layer passes its routing):
// rows gathered by index, each token's k rows summed back, rows scaled by their probabilities, and
// the row dot products that are those probabilities' gradients.
TEST_P(BackendOps, MoeRowOpsFollowTheirFormulas) {
  const int rows = 5, cols = 7, k = 2, tokens = 4;
  const Vec in = random_vec(rows * cols, 31), other = random_vec(rows * cols, 32), scales = random_vec(rows, 33);
  const std::vector<int> gather = {3, 0, 3, 4, 1};          // a row may be taken twice
  const std::vector<int> pairs = {1, 4, 0, 2, 3, 3, 2, 0};  // token t sums rows pairs[2t], pairs[2t+1]
  auto ops = [&](Backend& be) {
    Staged s(be);
    float *gathered = s.out(rows * cols), *summed = s.out(tokens * cols), *scaled = s.in(in), *dots = s.out(rows);
    be.index_rows(gathered, s.in(in), gather.data(), rows, cols);
    be.sum_indexed_rows(summed, s.in(in), pairs.data(), tokens, k, cols);
    be.row_dots(dots, s.in(in), s.in(other), rows, cols);
    be.scale_rows(scaled, scaled, s.in(scales), rows, cols);  // in place
    return Outputs{s.get(gathered, rows * cols), s.get(summed, tokens * cols), s.get(scaled, rows * cols),
                   s.get(dots, rows)};
  };
  const Outputs got = expect_matches_reference(ops, kElementwise, "moe row ops");
  for (int r = 0; r < rows; ++r) {
    double dot = 0;
    for (int c = 0; c < cols; ++c) {
      EXPECT_EQ(got[0][r * cols + c], in[gather[r] * cols + c]) << r << "," << c;
      EXPECT_NEAR(got[2][r * cols + c], scales[r] * in[r * cols + c], 1e-6) << r << "," << c;
      dot += static_cast<double>(in[r * cols + c]) * other[r * cols + c];
    }
    EXPECT_NEAR(got[3][r], dot, 1e-5) << "row " << r;
  }
  for (int t = 0; t < tokens; ++t)
    for (int c = 0; c < cols; ++c)
      EXPECT_NEAR(got[1][t * cols + c], in[pairs[2 * t] * cols + c] + in[pairs[2 * t + 1] * cols + c], 1e-6)
          << t << "," << c;
  // row_dots is scale_rows' gradient: d/ds_r Σ scale_rows(in, s)·other = in_r · other_r.
  Vec s = scales;
  expect_gradient(
      s, got[3],
      [&] {
        Staged st(be());
        float* out = st.out(rows * cols);
        be().scale_rows(out, st.in(in), st.in(s), rows, cols);
        return dot(st.get(out, rows * cols), other);
      },
      "scales");
}

TEST_P(BackendOps, AdamWMatchesReferenceAndFollowsItsFormula) {
  const Vec p0 = {1.0f, -2.0f}, g = {0.5f, 0.25f}, m0 = {0.1f, 0.0f}, v0 = {0.01f, 0.0f};
  const float lr = 0.1f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  const int step = 3;
  auto adamw = [&](Backend& be) {  // param, m, v
    Staged s(be);
    float *p = s.in(p0), *m = s.in(m0), *v = s.in(v0);
    be.adamw(p, s.in(g), m, v, 2, lr, b1, b2, eps, wd, step);
    return Outputs{s.get(p, 2), s.get(m, 2), s.get(v, 2)};
  };
  const Vec p = expect_matches_reference(adamw, kTranscendental, "adamw")[0];
  for (int i = 0; i < 2; ++i) {
    const double mi = b1 * m0[i] + (1 - b1) * g[i], vi = b2 * v0[i] + (1 - b2) * g[i] * g[i];
    const double mhat = mi / (1 - std::pow(b1, step)), vhat = vi / (1 - std::pow(b2, step));
    EXPECT_NEAR(p[i], p0[i] - lr * (mhat / (std::sqrt(vhat) + eps) + wd * p0[i]), 1e-6);
  }
}

TEST_P(BackendOps, AllocationsAreChargedToTheirCategory) {
  {
    Tensor a = be().alloc(10, 10, MemoryCategory::kActivations);
    Tensor b = be().alloc(5, 2, MemoryCategory::kParams);
    EXPECT_EQ(be().memory().current_bytes(MemoryCategory::kActivations), 400);
    EXPECT_EQ(be().memory().current_bytes(MemoryCategory::kParams), 40);
  }
  EXPECT_EQ(be().memory().current_bytes(MemoryCategory::kActivations), 0);
  EXPECT_EQ(be().memory().peak_bytes(MemoryCategory::kActivations), 400);
  EXPECT_EQ(be().memory().peak_total_bytes(), 440);
}

// Eigen's GEMM, which the CPU backend uses where OpenBLAS is not linked, agrees with a naive product.
TEST(ExecCpuOps, EigenGemmMatchesNaiveProductForEveryTransposition) {
  const int m = 7, n = 5, k = 6;
  const Vec a = random_vec(m * k, 1), b = random_vec(k * n, 2);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int lda = ta ? m : k, ldb = tb ? k : n;
      Vec c(m * n, 0.0f);
      eigen_sgemm(ta, tb, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), n);
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
          double s = 0;
          for (int p = 0; p < k; ++p)
            s += static_cast<double>(ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
          EXPECT_NEAR(c[i * n + j], s, 1e-4) << ta << tb;
        }
    }
}

// Ring attention (context parallelism): each of cp ranks holds chunks r and 2·cp−1−r of every sequence;
// its queries meet every rank's key/value block in ring order, merged by the log-sum-exp rule, and the
// blocks' dK, dV are summed over the ranks that visited them. Against the textbook loops over the whole
// sequence (GQA, and dropout keyed on global positions): a wrong causal mask on the diagonal tiles, a
// wrong merge or a wrong log-sum-exp in the backward changes ctx or dqkv.
void expect_ring_matches_full_attention(CpuBackend& be, int cp, float p) {
  const int S = 24, batch = 2, heads = 4, kv_heads = 2, D = 8;
  const AttentionShape full{batch, S, heads, kv_heads, D};
  const std::size_t ld = full.qkv_cols(), ctx_ld = static_cast<std::size_t>(heads) * D, kv_cols = 2 * kv_heads * D;
  const Vec qkv = random_vec(batch * S * ld, 41), dctx = random_vec(batch * S * ctx_ld, 42);
  const AttentionDropout drop{p, 77, 5000, heads};
  Bytes mask;
  if (p > 0) {
    mask.resize(full.probs_numel());
    be.dropout_mask(mask.data(), full.probs_numel(), drop.key, drop.first, p);
  }
  const float keep = p > 0 ? 1.0f / (1.0f - p) : 1.0f;
  const NaiveAttention want = naive_attention(qkv, dctx, mask, keep, full);

  // Local rows of every rank: qkv, its K|V block, dctx; the global row of each local row.
  const int local = S / cp;
  std::vector<Vec> q(cp), kv(cp), dc(cp);
  std::vector<std::vector<std::size_t>> global(cp);
  for (int r = 0; r < cp; ++r) {
    const AttentionShape sh{batch, local, heads, kv_heads, D, cp, r};
    for (int b = 0; b < batch; ++b)
      for (int t = 0; t < local; ++t) {
        const std::size_t g = static_cast<std::size_t>(b) * S + sh.position(t);
        global[r].push_back(g);
        q[r].insert(q[r].end(), qkv.begin() + g * ld, qkv.begin() + (g + 1) * ld);
        kv[r].insert(kv[r].end(), qkv.begin() + g * ld + ctx_ld, qkv.begin() + (g + 1) * ld);
        dc[r].insert(dc[r].end(), dctx.begin() + g * ctx_ld, dctx.begin() + (g + 1) * ctx_ld);
      }
  }
  std::vector<Vec> dkv(cp, Vec(batch * local * kv_cols, 0.0f));
  Vec ctx_all(want.ctx.size(), 0.0f), dqkv_all(qkv.size(), 0.0f);
  for (int r = 0; r < cp; ++r) {
    const AttentionShape sh{batch, local, heads, kv_heads, D, cp, r};
    const std::size_t rows = static_cast<std::size_t>(batch) * heads * local;
    Vec acc(batch * local * ctx_ld, 0.0f), mx(rows, 0.0f), sum(rows, 0.0f), ctx(acc.size()), lse(rows);
    Vec dq(acc.size(), 0.0f);
    for (int step = 0; step < cp; ++step) {
      const int src = (r + cp - step) % cp;
      be.attention_block_forward(acc.data(), mx.data(), sum.data(), q[r].data(), kv[src].data(),
                                 static_cast<int>(kv_cols), src, sh, drop);
    }
    be.attention_block_finish(ctx.data(), lse.data(), acc.data(), mx.data(), sum.data(), sh);
    for (int step = 0; step < cp; ++step) {
      const int src = (r + cp - step) % cp;
      be.attention_block_backward(dq.data(), dkv[src].data(), dc[r].data(), ctx.data(), lse.data(), q[r].data(),
                                  kv[src].data(), static_cast<int>(kv_cols), src, sh, drop);
    }
    for (std::size_t i = 0; i < global[r].size(); ++i) {
      std::copy_n(ctx.begin() + i * ctx_ld, ctx_ld, ctx_all.begin() + global[r][i] * ctx_ld);
      std::copy_n(dq.begin() + i * ctx_ld, ctx_ld, dqkv_all.begin() + global[r][i] * ld);
    }
  }
  for (int r = 0; r < cp; ++r)
    for (std::size_t i = 0; i < global[r].size(); ++i)
      std::copy_n(dkv[r].begin() + i * kv_cols, kv_cols, dqkv_all.begin() + global[r][i] * ld + ctx_ld);
  expect_close(ctx_all, want.ctx, kAttention, fmt::format("ring ctx, cp {}, dropout {}", cp, p));
  expect_close(dqkv_all, want.dqkv, {1e-4, 1e-4}, fmt::format("ring dqkv, cp {}, dropout {}", cp, p));
}

TEST(ExecCpuOps, RingAttentionBlocksMergeToTheFullCausalAttention) {
  CpuBackend be;
  for (int cp : {1, 2, 3, 4})
    for (float p : {0.0f, 0.25f}) expect_ring_matches_full_attention(be, cp, p);
}

// The rows of a CP rank's chunks sit at the positions of causal load balancing: rank 1 of 3 holds
// chunks 1 and 4 of 6.
TEST(ExecCpuOps, ContextParallelRanksHoldChunksRAnd2CpMinus1MinusR) {
  const AttentionShape sh{1, 8, 1, 1, 2, 3, 1};
  std::vector<int> positions;
  for (int t = 0; t < sh.seq; ++t) positions.push_back(sh.position(t));
  EXPECT_EQ(positions, (std::vector<int>{4, 5, 6, 7, 16, 17, 18, 19}));
}

std::vector<std::string> backends_where(bool gpu) {
  std::vector<std::string> names;
  for (const auto& name : available_backends())
    if ((name != "cpu") == gpu) names.push_back(name);
  return names;
}
std::string param_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

// Host backends run everywhere; GPU backends are instantiated as Gpu/... and skip without a device.
INSTANTIATE_TEST_SUITE_P(Host, BackendOps, ::testing::ValuesIn(backends_where(false)), param_name);
INSTANTIATE_TEST_SUITE_P(Gpu, BackendOps, ::testing::ValuesIn(backends_where(true)), param_name);

}  // namespace
}  // namespace loom::exec
