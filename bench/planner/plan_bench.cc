// Planner and simulator speed (issues 2 and 3): enumeration + memory model throughput, one 1F1B
// step of GPT-3 175B (pp 16, 96 micro-batches), and the full `loom plan` search for GPT-3 175B
// on 1024 A100 with every memory-feasible configuration simulated.
//   build/bench/planner/bench_planner
#include <benchmark/benchmark.h>

#include "core/presets.h"
#include "planner/enumerate.h"
#include "planner/memory_model.h"
#include "planner/search.h"
#include "sim/simulator.h"

namespace {

struct Gpt3Setup {
  loom::ModelSpec model = *loom::model_preset("gpt3-175b");
  loom::ClusterSpec cluster = *loom::cluster_preset("dgx-a100-80gb");
  loom::TrainingSpec training;
  Gpt3Setup() {
    training.gpus = 1024;
    training.global_batch = 1536;
    training.seq_len = model.seq_len;
  }
};

void BM_EnumerateAndMemoryModel(benchmark::State& state) {
  Gpt3Setup s;
  std::size_t configs = 0;
  for (auto _ : state) {
    auto e = loom::enumerate_configs(s.model, s.training, s.cluster, {});
    for (const auto& c : e->legal) benchmark::DoNotOptimize(loom::estimate_memory(s.model, s.training, c, s.cluster));
    configs += e->legal.size();
  }
  state.counters["configs/s"] = benchmark::Counter(static_cast<double>(configs), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EnumerateAndMemoryModel)->Unit(benchmark::kMillisecond);

void BM_Simulate1F1B_Gpt3_pp16_m96(benchmark::State& state) {
  Gpt3Setup s;
  s.training.gpus = 8 * 16 * 1;
  s.training.global_batch = 96;
  loom::ParallelConfig c;
  c.tp = 8;
  c.pp = 16;
  c.dp = 1;
  c.micro_batch = 1;
  c.schedule = loom::Schedule::k1F1B;
  for (auto _ : state) benchmark::DoNotOptimize(loom::sim::simulate(s.model, s.training, c, s.cluster));
}
BENCHMARK(BM_Simulate1F1B_Gpt3_pp16_m96)->Unit(benchmark::kMicrosecond);

// Second argument 0: the same search with collectives beside compute costing it nothing
// (collective_sm_fraction 0, one engine run per config) — the peer that shows what charging them
// (an engine re-run from the first pass they lengthen) costs.
void BM_PlanGpt3_1024(benchmark::State& state) {
  Gpt3Setup s;
  if (state.range(1) == 0) s.cluster.compute.collective_sm_fraction = 0;
  std::size_t simulated = 0;
  for (auto _ : state) {
    loom::PlanOptions options;
    options.threads = static_cast<int>(state.range(0));
    auto r = loom::search_plans(s.model, s.training, s.cluster, {}, options);
    simulated += r->simulated;
  }
  state.counters["configs_simulated/s"] =
      benchmark::Counter(static_cast<double>(simulated), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_PlanGpt3_1024)
    ->ArgNames({"threads", "sm_share"})
    ->Args({1, 1})
    ->Args({1, 0})
    ->Args({2, 1})
    ->Args({2, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The speed bar of the every-dimension search: the same search with every dimension added since
// (context parallelism 1-8 with all three KV exchanges, ZeRO-3 shard groups, uneven pipeline splits:
// the default search already enumerates the last two). Second argument: PlanOptions::top, 0 for every
// fitting configuration simulated (the peer), 10 for `loom plan --top 10`, which simulates only what
// its lower bound cannot rule out of the ten fastest (sim/step_bound.h) and gives the full search's
// first ten rows. The counters give how many configurations were legal, simulated and skipped.
void BM_PlanGpt3_1024_EveryDimension(benchmark::State& state) {
  Gpt3Setup s;
  loom::SearchSpace space;
  space.cp = {1, 2, 4, 8};
  space.cp_comm = {loom::CpComm::kP2P, loom::CpComm::kA2A, loom::CpComm::kAllGather};
  std::size_t simulated = 0, legal = 0, skipped = 0;
  for (auto _ : state) {
    loom::PlanOptions options;
    options.threads = static_cast<int>(state.range(0));
    options.top = static_cast<std::size_t>(state.range(1));
    auto r = loom::search_plans(s.model, s.training, s.cluster, space, options);
    simulated += r->simulated;
    legal += r->enumerated;
    skipped += r->skipped;
  }
  state.counters["configs_simulated"] =
      benchmark::Counter(static_cast<double>(simulated), benchmark::Counter::kAvgIterations);
  state.counters["configs_skipped"] =
      benchmark::Counter(static_cast<double>(skipped), benchmark::Counter::kAvgIterations);
  state.counters["configs_legal"] = benchmark::Counter(static_cast<double>(legal), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_PlanGpt3_1024_EveryDimension)
    ->ArgNames({"threads", "top"})
    ->Args({2, 0})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_PlanGpt3_1024_EveryDimension)
    ->ArgNames({"threads", "top"})
    ->Args({1, 10})
    ->Args({2, 10})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
