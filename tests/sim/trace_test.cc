// The Chrome/Perfetto trace: well-formed JSON with the executor's slice names, flows for sends,
// a memory counter per stage, and byte-identical output for the same input.
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/framework.h"
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

// DeepSpeed's ZeRO-3 over 1,536 A100s: the passes wait for gathers (CostModel::zero3_prefetch_wait_s) and are
// lengthened by the SMs the gathers hold. In the trace the waits keep their length, in the "dp" category,
// and the kernels take the lengthening: the segments still fill each pass.
TEST(Trace, ZeroThreeWaitsKeepTheirLengthWhileTheKernelsShareSms) {
  const ClusterSpec cluster = *cluster_preset("dgx-a100-80gb");
  const ModelSpec m = *model_preset("gpt3-175b");
  TrainingSpec t{.gpus = 1536, .global_batch = 1536, .seq_len = 2048};
  apply_framework(**find_framework("deepspeed"), t);
  const ParallelConfig c{.tp = 1, .pp = 1, .dp = 1536, .zero = 3, .micro_batch = 1, .recompute = Recompute::kFull};
  auto r = simulate(m, t, c, cluster, SimOptions{.record_segments = true, .keep_graph = true});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const ChunkCost& cost = r->chunk_costs[0][0];
  ASSERT_GT(cost.forward.dp_comm_exposed_s, 0.1);
  const auto j = nlohmann::json::parse(chrome_trace_json(*r, "test"));
  double waits_us = 0, forward_ts = -1, forward_us = 0, forward_kernels_us = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const std::string name = e["name"];
    const double dur = e["dur"].get<double>();
    if (name == "wait all_gather dp") {
      EXPECT_EQ(e["cat"], "dp");
      waits_us += dur;
    }
    if (name == "F0 mb0") forward_ts = e["ts"].get<double>(), forward_us = dur;
  }
  ASSERT_GE(forward_ts, 0);
  EXPECT_NEAR(waits_us, 1e6 * (cost.forward.dp_comm_exposed_s + cost.backward.dp_comm_exposed_s), 1.0);
  // The forward was lengthened (its slice outlasts its cost), all of it in its kernels.
  EXPECT_GT(forward_us, 1e6 * cost.forward.seconds * 1.05);
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X" || e["cat"] != "kernel") continue;
    const double ts = e["ts"].get<double>();
    if (ts >= forward_ts && ts < forward_ts + forward_us) forward_kernels_us += e["dur"].get<double>();
  }
  EXPECT_NEAR(forward_kernels_us + 1e6 * cost.forward.dp_comm_exposed_s, forward_us, 0.001 * forward_us);
}

TEST(Trace, SameInputSameBytes) {
  EXPECT_EQ(trace_of(Schedule::kInterleaved, 2), trace_of(Schedule::kInterleaved, 2));
  EXPECT_EQ(trace_of(Schedule::kZeroBubble, 1), trace_of(Schedule::kZeroBubble, 1));
}

}  // namespace
}  // namespace loom::sim
