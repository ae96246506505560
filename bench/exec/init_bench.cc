// Parameter initialisation (exec/model/gpt_layout.cc's initialize_slot): every weight's values drawn from
// a counter-based normal, once per run before the first step. A 1.3B GPT's 1.3 G values took about a
// minute on one thread of an H200 machine's host (each gpt-1.3b run of scripts/gpu-validate.sh spent
// 65 s before its first step, 2026-11-28); the rows now split over the OpenMP team. Reported: values per
// second on 1 thread and on every core, the same process.
//   build/bench/exec/exec_init_bench
#include <benchmark/benchmark.h>

#include <thread>
#include <vector>

#include "exec/cpu/cpu_backend.h"
#include "exec/model/gpt_layout.h"

namespace {

void BM_InitializeSlot(benchmark::State& state) {
  loom::exec::set_cpu_threads(static_cast<int>(state.range(0)));
  loom::exec::ParamSlot slot;
  slot.id = 7;
  slot.rows = 2048 * 3;  // a 1.3B layer's qkv weight
  slot.cols = 2048;
  slot.full_cols = slot.cols;
  slot.init = loom::exec::ParamInit::kNormal;
  slot.init_std = 0.02f;
  slot.row_blocks = {loom::exec::RowBlock{0, 0, slot.rows}};
  std::vector<float> data(static_cast<std::size_t>(slot.numel()));
  for (auto _ : state) {
    loom::exec::initialize_slot(data.data(), slot, 1234);
    benchmark::DoNotOptimize(data.data());
  }
  state.SetItemsProcessed(state.iterations() * slot.numel());
}
BENCHMARK(BM_InitializeSlot)
    ->Arg(1)
    ->Arg(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())))
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
