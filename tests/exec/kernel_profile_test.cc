// `loom profile`'s kernel timings (exec/profile/kernel_profile.h) run in the backend's compute dtype, as
// training does: on the bf16 emulation (and so on a GPU) GEMM operands and activations are bf16, weight
// gradients and the LM head's logits fp32, and the bytes charged per memory-bound op are the simulator's
// at 2 bytes an activation; every timing is a positive, finite time by the backend's clock.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/presets.h"
#include "exec/cpu/bf16_emulation.h"
#include "exec/cpu/cpu_backend.h"
#include "exec/profile/cost_file.h"
#include "exec/profile/kernel_profile.h"

namespace loom::exec::profile {
namespace {

constexpr TimingBudget kQuick{.min_batch_s = 1e-4, .batches = 1, .sweeps = 1};

ModelSpec small_model() {
  ModelSpec m = *model_preset("gpt-tiny");
  m.layers = 1;
  return m;
}

template <class B>
void expect_profiles_in_compute_dtype() {
  B backend;
  const ModelSpec m = small_model();
  const int seq = 64;
  const auto gemms = time_gemms(backend, transformer_gemm_cases(m, seq, 1, 1), kQuick);
  ASSERT_FALSE(gemms.empty());
  for (const auto& g : gemms) EXPECT_TRUE(std::isfinite(g.seconds) && g.seconds > 0) << g.shape.op;
  const double ab = static_cast<double>(dtype_bytes(backend.compute_dtype()));
  const auto ops = time_memory_ops(backend, m, seq, {1}, kQuick);
  bool residual = false;
  for (const auto& op : ops) {
    EXPECT_TRUE(std::isfinite(op.seconds) && op.seconds > 0) << op.op;
    if (op.op == std::string("residual")) {
      residual = true;
      EXPECT_DOUBLE_EQ(op.bytes, 3 * ab * seq * m.hidden);
    }
  }
  EXPECT_TRUE(residual);
  // The first stage's embedding and the last stage's loss, by the names their trace slices carry and with the
  // bytes the simulator charges them (the loss over the padded vocabulary, in fp32 logits).
  std::map<std::string, double> bytes;
  for (const auto& op : ops) bytes[op.op] = op.bytes;
  const double cols = padded_vocab(m.vocab, 1);
  const std::map<std::string, double> head = {{"embedding", 3 * ab * seq * m.hidden},
                                              {"embedding_bwd", (ab + 4) * seq * m.hidden},
                                              {"cross_entropy", 4.0 * seq * cols},
                                              {"cross_entropy_bwd", (4.0 + ab) * seq * cols}};
  for (const auto& [op, expected] : head) {
    ASSERT_EQ(bytes.count(op), 1u) << op;
    EXPECT_DOUBLE_EQ(bytes.at(op), expected) << op;
  }
  const double optimizer = time_optimizer_step(backend, 4096, kQuick);
  EXPECT_TRUE(std::isfinite(optimizer) && optimizer > 0);
}

// A GPU of a preset's kind gets a file that starts from that preset: its datasheet peak and bandwidth,
// node, links and framework reserve stay, the measured tables and the device's name and memory replace
// the rest, and no per-op efficiency of the preset's own measurement is left to mix with this one's.
// (Timings from the emulation stand in for a GPU's: what is checked is how the file is put together.)
TEST(KernelProfile, AGpuOfAPresetsKindKeepsThePresetsDatasheetFiguresAndLinks) {
  CpuBf16Backend backend;
  const ModelSpec m = small_model();
  KernelResults k;
  k.gemms = time_gemms(backend, transformer_gemm_cases(m, 64, 1, 1), kQuick);
  k.memory_ops = time_memory_ops(backend, m, 64, {1}, kQuick);
  k.optimizer_params = 4096;
  k.optimizer_s = time_optimizer_step(backend, k.optimizer_params, kQuick);
  const std::vector<CollectiveTiming> none;
  MeasuredMachine machine{
      .kernels = &k, .collectives = &none, .optimizer_bytes_per_param = 18.0, .named_ops = {"norm", "residual"}};
  machine.gpu_preset = "dgx-h100";
  machine.gpu_name = "NVIDIA H100 80GB HBM3";
  machine.gpu_memory_bytes = 85e9;
  const ClusterSpec file = measured_cost_file(machine);
  const ClusterSpec preset = *cluster_preset("dgx-h100");
  EXPECT_EQ(file.device.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(file.device.memory_bytes, 85e9);
  EXPECT_EQ(file.device.peak_flops, preset.device.peak_flops);
  EXPECT_EQ(file.device.memory_bandwidth_bytes_per_s, preset.device.memory_bandwidth_bytes_per_s);
  EXPECT_EQ(file.gpus_per_node, preset.gpus_per_node);
  EXPECT_EQ(file.inter_node.bandwidth_bytes_per_s, preset.inter_node.bandwidth_bytes_per_s);
  EXPECT_EQ(file.framework_reserve_bytes, preset.framework_reserve_bytes);
  EXPECT_EQ(file.gemm_table.size(), k.gemms.size());
  EXPECT_EQ(file.memory_op_table.size(), 3u);  // norm, residual and the optimizer
  EXPECT_TRUE(file.compute.memory_op_efficiency.empty());
  EXPECT_NE(file.provenance.at("kept_from_preset").find("dgx-h100"), std::string::npos);

  // A clock that falls under sustained load lengthens the table's burst timings; one that does not
  // changes nothing (the raw measurements stay as they were).
  machine.sustained_slowdown = 1.25;
  const ClusterSpec slowed = measured_cost_file(machine);
  for (std::size_t i = 0; i < k.gemms.size(); ++i) {
    EXPECT_DOUBLE_EQ(slowed.gemm_table[i].seconds, 1.25 * k.gemms[i].seconds);
    EXPECT_DOUBLE_EQ(file.gemm_table[i].seconds, k.gemms[i].seconds);
  }
  machine.sustained_slowdown = 0.9;
  EXPECT_DOUBLE_EQ(measured_cost_file(machine).gemm_table[0].seconds, k.gemms[0].seconds);
  machine.sustained_slowdown = 1;

  machine.gpu_preset.clear();  // a GPU no preset describes: measured as a CPU is, under its own name
  const ClusterSpec other = measured_cost_file(machine);
  EXPECT_EQ(other.device.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(other.device.memory_bytes, 85e9);
  EXPECT_EQ(other.framework_reserve_bytes, 0);
}

TEST(KernelProfile, SustainedGemmReportsItsFirstChunkAndItsLastQuarter) {
  CpuBf16Backend backend;
  const SustainedRate r = time_sustained_gemm(backend, 64, 0.02);
  EXPECT_TRUE(std::isfinite(r.burst_flops_per_s) && r.burst_flops_per_s > 0);
  EXPECT_TRUE(std::isfinite(r.sustained_flops_per_s) && r.sustained_flops_per_s > 0);
}

TEST(KernelProfile, RunsInFp32OnTheCpuBackend) { expect_profiles_in_compute_dtype<CpuBackend>(); }
TEST(KernelProfile, RunsInBf16OnTheBf16Emulation) { expect_profiles_in_compute_dtype<CpuBf16Backend>(); }

}  // namespace
}  // namespace loom::exec::profile
