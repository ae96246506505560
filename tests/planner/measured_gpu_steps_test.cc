// Simulator accuracy on real GPU steps: whole training steps of Megatron-style GPTs measured on one
// H100 and one H200 (bench/gpu/megatron_step.py, results in bench/gpu/results/*-step-*.json), set
// against `loom sim` with the dgx-h100 / dgx-h200 cost files, which were measured on those GPUs
// kernel by kernel (never fitted to these steps). One GPU: compute and the optimizer, no
// communication.
#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "core/json_io.h"
#include "core/presets.h"
#include "sim/simulator.h"

namespace loom {
namespace {

TEST(MeasuredGpuSteps, SimulatorAgreesWithH100AndH200Steps) {
  const std::filesystem::path dir = std::filesystem::path(LOOM_SOURCE_DIR) / "bench/gpu/results";
  int runs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.find("-step-") == std::string::npos) continue;
    auto json = read_json_file(entry.path().string());
    ASSERT_TRUE(json.ok()) << json.error().message;
    auto model = model_from_json((*json)["model"]);
    ASSERT_TRUE(model.ok()) << name << ": " << model.error().message;
    const std::string cluster_name = name.starts_with("h200") ? "dgx-h200" : "dgx-h100";
    const ClusterSpec cluster = *cluster_preset(cluster_name);
    TrainingSpec t;  // as megatron_step.py runs it: fp32 main grads, unfused attention, dropout
    t.gpus = 1;
    t.global_batch = (*json)["micro_batch"].get<int>();
    t.seq_len = model->seq_len;
    t.grad_bytes = 4;
    t.attention = AttentionKernel::kUnfused;
    ParallelConfig c{.micro_batch = static_cast<int>(t.global_batch)};
    auto sim = sim::simulate(*model, t, c, cluster);
    ASSERT_TRUE(sim.ok()) << name << ": " << sim.error().message;
    const double measured_s = (*json)["step_ms"].get<double>() / 1e3;
    const double error = sim->step_time_s / measured_s - 1.0;
    RecordProperty(name, std::to_string(100 * error));
    // Measured 2026-11-22: +3.0 % to +6.1 % (the cost files' GEMM ceiling is the rate under
    // back-to-back GEMMs at the 700 W limit; a real step, with memory-bound phases, throttles less).
    EXPECT_LE(std::abs(error), 0.08) << name << ": loom " << sim->step_time_s << " s, measured " << measured_s << " s";
    ++runs;
  }
  EXPECT_EQ(runs, 4) << "expected the four step measurements in " << dir;
}

}  // namespace
}  // namespace loom
