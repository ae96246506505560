// GEMM throughput of the CPU backend: OpenBLAS's sgemm (what the backend uses when linked) against
// Eigen's, on gpt-tiny's shapes (tokens × out × in for a micro-batch of 8 × 128 tokens) and on
// large squares, which give the machine's measured fp32 GEMM peak for MFU-style fractions.
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

BENCHMARK_TEMPLATE(BM_Sgemm, true)->Name("sgemm/backend")->Apply(Shapes);
BENCHMARK_TEMPLATE(BM_Sgemm, false)->Name("sgemm/eigen")->Apply(Shapes);

}  // namespace

BENCHMARK_MAIN();
