// GEMM throughput of the CPU backend: OpenBLAS's sgemm (what the backend uses when linked) against
// Eigen's, on gpt-tiny's shapes (tokens × out × in for a micro-batch of 8 × 128 tokens) and on
// large squares, which give the machine's measured fp32 GEMM peak for MFU-style fractions; and
// sgemm/layouts: the three GEMMs of a linear layer (forward Y = X·Wᵀ, input gradient dX = dY·W,
// weight gradient dW += dYᵀ·X) at compare_tokens_per_s.py's hidden-256 shapes, 2,048 tokens.
#include <benchmark/benchmark.h>

#include <vector>

#include "exec/cpu/cpu_backend.h"

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

// A linear layer of `in` → `out` features over `tokens` rows: pass 0 the forward (NT), 1 the input
// gradient (NN), 2 the weight gradient (TN, accumulating into C as the backend does).
void BM_LinearLayer(benchmark::State& state) {
  const int tokens = static_cast<int>(state.range(0)), out = static_cast<int>(state.range(1)),
            in = static_cast<int>(state.range(2)), pass = static_cast<int>(state.range(3));
  loom::exec::set_cpu_threads(static_cast<int>(state.range(4)));
  std::vector<float> x(static_cast<std::size_t>(tokens) * in, 0.5f), w(static_cast<std::size_t>(out) * in, 0.25f),
      y(static_cast<std::size_t>(tokens) * out, 0.125f);
  CpuBackend backend;
  for (auto _ : state) {
    if (pass == 0)
      backend.gemm(false, true, tokens, out, in, 1.0f, x.data(), in, w.data(), in, 0.0f, y.data(), out);
    else if (pass == 1)
      backend.gemm(false, false, tokens, in, out, 1.0f, y.data(), out, w.data(), in, 0.0f, x.data(), in);
    else
      backend.gemm(true, false, out, in, tokens, 1.0f, y.data(), out, x.data(), in, 1.0f, w.data(), in);
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
BENCHMARK(BM_LinearLayer)->Name("sgemm/layouts")->Apply(Layers);
BENCHMARK_TEMPLATE(BM_Sgemm, false)->Name("sgemm/eigen")->Apply(Shapes);

}  // namespace

BENCHMARK_MAIN();
