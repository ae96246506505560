// The Chrome/Perfetto trace: well-formed JSON with the executor's slice names, flows for sends,
// a memory counter per stage, and byte-identical output for the same input.
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/presets.h"
#include "sim/trace.h"

namespace loom::sim {
namespace {

std::string trace_of(Schedule schedule, int vpp) {
  const ClusterSpec cluster = *cluster_preset("dgx-a100-80gb");
  const ModelSpec m = *model_preset("llama2-7b");
  TrainingSpec t{.gpus = 16, .global_batch = 16, .seq_len = 4096};
  ParallelConfig c{.tp = 2, .pp = 4, .dp = 2, .vpp = vpp, .schedule = schedule};
  SimOptions o;
  o.keep_graph = true;
  o.record_segments = true;
  o.static_bytes_per_stage = {10e9, 10e9, 10e9, 10e9};
  o.activation_bytes_per_forward = {1e9, 1e9, 1e9, 1e9};
  auto r = simulate(m, t, c, cluster, o);
  EXPECT_TRUE(r.ok());
  return chrome_trace_json(*r, "test");
}

TEST(Trace, IsPerfettoJsonWithNamedSlicesFlowsAndMemory) {
  const std::string text = trace_of(Schedule::k1F1B, 1);
  const auto j = nlohmann::json::parse(text);
  ASSERT_TRUE(j.contains("traceEvents"));
  std::set<std::string> names;
  std::set<int> pids;
  int flows_start = 0, flows_end = 0, counters = 0;
  for (const auto& e : j["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "X") {
      names.insert(e["name"].get<std::string>());
      pids.insert(e["pid"].get<int>());
      EXPECT_GE(e["dur"].get<double>(), 0.0);
    }
    flows_start += ph == "s";
    flows_end += ph == "f";
    counters += ph == "C";
  }
  EXPECT_EQ(pids.size(), 4u);  // one process per stage
  for (const char* n : {"F0 mb0", "B3 mb3", "F3 mb3", "optimizer", "all_reduce dp", "send F0 mb0", "mlp_up"})
    EXPECT_TRUE(names.count(n)) << n;
  // 16 sequences over dp 2 with micro-batch 1: 8 micro-batches, each crossing 3 stage
  // boundaries forward and 3 backward; a memory sample per forward and per backward.
  EXPECT_EQ(flows_start, 48);
  EXPECT_EQ(flows_end, 48);
  EXPECT_EQ(counters, 4 * (1 + 2 * 8));
}

TEST(Trace, SameInputSameBytes) {
  EXPECT_EQ(trace_of(Schedule::kInterleaved, 2), trace_of(Schedule::kInterleaved, 2));
  EXPECT_EQ(trace_of(Schedule::kZeroBubble, 1), trace_of(Schedule::kZeroBubble, 1));
}

}  // namespace
}  // namespace loom::sim
