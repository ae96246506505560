// GEMM throughput of the CPU backend: OpenBLAS's sgemm (what the backend uses when linked) against
// Eigen's, on gpt-tiny's shapes (tokens × out × in for a micro-batch of 8 × 128 tokens) and on
// large squares, which give the machine's measured fp32 GEMM peak for MFU-style fractions; and
// sgemm/layouts: the three GEMMs of a linear layer (forward Y = X·Wᵀ, input gradient dX = dY·W,
// weight gradient dW += dYᵀ·X) at compare_tokens_per_s.py's hidden-256 shapes, 2,048 tokens, beside
// sgemm/layouts_openblas_threads, the same GEMMs as one sgemm on OpenBLAS's own threads (the backend's
// fixed panels against it: exec/README.md, "Threads and speed").
#include <benchmark/benchmark.h>

#include <vector>

#include "exec/cpu/cpu_backend.h"

#ifdef LOOM_BENCH_CBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int num_threads);
#endif

namespace {

using loom::exec::CpuBackend;

template <bool kBlas>
void BM_Sgemm(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0)), n = static_cast<int>(state.range(1)),
            k = static_cast<int>(state.range(2));
  loom::exec::set_cpu_threads(static_cast<int>(state.range(3)));
  std::vector<float> a(static_cast<std::size_t>(m) * k, 0.5f), b(static_cast<std::size_t>(k) * n, 0.25f),
      c(static_cast<std::size_t>(m) * n);
  CpuBackend backend;
  for (auto _ : state) {
    // C = A · Bᵀ, the layout of every forward linear layer (weights are [out, in]).
    if (kBlas)
      backend.gemm(false, true, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, c.data(), n);
    else
      loom::exec::eigen_sgemm(false, true, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * m * n * k * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

void Shapes(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    b->Args({1024, 384, 128, threads});    // QKV projection
    b->Args({1024, 512, 128, threads});    // MLP up
    b->Args({1024, 128, 512, threads});    // MLP down
    b->Args({1024, 1024, 1024, threads});  // peak
  }
  b->ArgNames({"m", "n", "k", "threads"})->UseRealTime();
}

// The peer of the backend's GEMM in panels: one sgemm over the whole of C on OpenBLAS's own threads, which the
// backend called before its result was made independent of the thread count (CpuBackend::gemm).
void openblas_threaded_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                            const float* b, int ldb, float beta, float* c, int ldc) {
#ifdef LOOM_BENCH_CBLAS
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha,
              a, lda, b, ldb, beta, c, ldc);
#else
  loom::exec::eigen_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#endif
}

// A linear layer of `in` → `out` features over `tokens` rows: pass 0 the forward (NT), 1 the input
// gradient (NN), 2 the weight gradient (TN, accumulating into C as the backend does). kPeer: the same
// GEMMs through openblas_threaded_gemm.
template <bool kPeer>
void BM_LinearLayer(benchmark::State& state) {
  const int tokens = static_cast<int>(state.range(0)), out = static_cast<int>(state.range(1)),
            in = static_cast<int>(state.range(2)), pass = static_cast<int>(state.range(3));
  const int threads = static_cast<int>(state.range(4));
  loom::exec::set_cpu_threads(threads);
#ifdef LOOM_BENCH_CBLAS
  if (kPeer) openblas_set_num_threads(threads);
#endif
  std::vector<float> x(static_cast<std::size_t>(tokens) * in, 0.5f), w(static_cast<std::size_t>(out) * in, 0.25f),
      y(static_cast<std::size_t>(tokens) * out, 0.125f);
  CpuBackend backend;
  const auto gemm = [&](bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                        float beta, float* c, int ldc) {
    if (kPeer)
      openblas_threaded_gemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
    else
      backend.gemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  };
  for (auto _ : state) {
    if (pass == 0)
      gemm(false, true, tokens, out, in, x.data(), in, w.data(), in, 0.0f, y.data(), out);
    else if (pass == 1)
      gemm(false, false, tokens, in, out, y.data(), out, w.data(), in, 0.0f, x.data(), in);
    else
      gemm(true, false, out, in, tokens, y.data(), out, x.data(), in, 1.0f, w.data(), in);
    benchmark::DoNotOptimize(x.data());
    benchmark::DoNotOptimize(w.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * tokens * out * in * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

void Layers(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2})
    for (int pass : {0, 1, 2}) {
      b->Args({2048, 768, 256, pass, threads});   // QKV
      b->Args({2048, 256, 256, pass, threads});   // attention output; LM head (vocabulary 256)
      b->Args({2048, 1024, 256, pass, threads});  // MLP up
      b->Args({2048, 256, 1024, pass, threads});  // MLP down
    }
  b->ArgNames({"tokens", "out", "in", "pass", "threads"})->UseRealTime();
}

BENCHMARK_TEMPLATE(BM_Sgemm, true)->Name("sgemm/backend")->Apply(Shapes);
BENCHMARK_TEMPLATE(BM_LinearLayer, false)->Name("sgemm/layouts")->Apply(Layers);
BENCHMARK_TEMPLATE(BM_LinearLayer, true)->Name("sgemm/layouts_openblas_threads")->Apply(Layers);
BENCHMARK_TEMPLATE(BM_Sgemm, false)->Name("sgemm/eigen")->Apply(Shapes);

}  // namespace

BENCHMARK_MAIN();
