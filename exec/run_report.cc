#include "exec/run_report.h"

#include <fmt/format.h>

#include "core/units.h"

namespace loom::exec {

namespace {
Json peaks_object(const double* bytes, double total) {
  Json j = Json::object();
  for (int c = 0; c < kMemoryCategories; ++c) j[to_string(static_cast<MemoryCategory>(c))] = bytes_to_gib(bytes[c]);
  j["total"] = bytes_to_gib(total);
  return j;
}
}  // namespace

Json memory_peak_gib(const StepMetrics& m) {
  double bytes[kMemoryCategories];
  for (int c = 0; c < kMemoryCategories; ++c) bytes[c] = static_cast<double>(m.peak_bytes[c]);
  return peaks_object(bytes, static_cast<double>(m.peak_total_bytes));
}

Json step_record(const StepMetrics& m) {
  Json j = {{"step", m.step},
            {"loss", m.loss},
            {"step_time_s", m.step_time_s},
            {"tokens_per_s", m.tokens_per_s},
            {"tflops_per_gpu", m.tflops_per_gpu},
            {"memory_peak_gib", memory_peak_gib(m)},
            {"grad_norm", m.grad_norm},
            {"lr", m.learning_rate}};
  if (m.mfu > 0) j["mfu"] = m.mfu;  // only where the device's peak is known
  return j;
}

std::string step_line(const StepMetrics& m, int total_steps) {
  auto mib = [&](MemoryCategory c) { return static_cast<double>(m.peak_bytes[static_cast<int>(c)]) / (1 << 20); };
  return fmt::format(
      "step {:>5}/{} | loss {:.6f} | norm {:.4f} | lr {:.3e} | {:.3f} s | {:.0f} tok/s | {:.3f} TFLOP/s/rank{} | "
      "peak MiB "
      "params {:.1f} grads {:.1f} optimizer {:.1f} activations {:.1f} buffers {:.1f} workspace {:.1f}",
      m.step, total_steps, m.loss, m.grad_norm, m.learning_rate, m.step_time_s, m.tokens_per_s, m.tflops_per_gpu,
      m.mfu > 0 ? fmt::format(" ({:.1f} % MFU)", 100 * m.mfu) : "", mib(MemoryCategory::kParams),
      mib(MemoryCategory::kGrads), mib(MemoryCategory::kOptimizer), mib(MemoryCategory::kActivations),
      mib(MemoryCategory::kBuffers), mib(MemoryCategory::kWorkspace));
}

Json ranks_memory_record(const std::vector<double>& values, int world_size) {
  Json ranks = Json::array();
  const int stride = kMemoryCategories + 3;
  for (int r = 0; r < world_size; ++r) {
    const double* row = values.data() + r * stride;
    Json rank = {{"rank", r}, {"memory_peak_gib", peaks_object(row, row[kMemoryCategories])}};
    if (row[kMemoryCategories + 1] > 0) {
      rank["moe_imbalance"] = row[kMemoryCategories + 1];
      rank["moe_imbalance_min"] = row[kMemoryCategories + 2];
    }
    ranks.push_back(std::move(rank));
  }
  return {{"event", "memory_peaks"}, {"ranks", ranks}};
}

}  // namespace loom::exec
