#include "sim/jitter.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace loom::sim {

namespace {
// E[max of n standard normals] = ∫ x · n φ(x) Φ(x)^(n−1) dx, by Simpson's rule over [−12, 12] (the
// integrand is below 1e-30 outside for any n up to 2^40).
double integrate_expected_max(double n) {
  constexpr int kSteps = 4800;  // even
  constexpr double kLo = -12.0, kHi = 12.0, kH = (kHi - kLo) / kSteps;
  double sum = 0;
  for (int i = 0; i <= kSteps; ++i) {
    const double x = kLo + i * kH;
    const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    const double f = cdf > 0 ? x * n * pdf * std::exp((n - 1.0) * std::log(cdf)) : 0.0;
    sum += f * (i == 0 || i == kSteps ? 1.0 : (i % 2 == 1 ? 4.0 : 2.0));
  }
  return sum * kH / 3.0;
}

// A pass's compute: its time less the communication it waited for.
double compute_s(const PassCost& p) {
  return p.seconds - p.tp_comm_exposed_s - p.cp_comm_exposed_s - p.ep_comm_exposed_s - p.dp_comm_exposed_s -
         p.host_bound_s;
}

// A stage's compute over its m micro-batches, and Σ t² over its kernels.
struct StageCompute {
  double seconds = 0, sum_sq_s2 = 0;
};
StageCompute stage_compute(const std::vector<ChunkCost>& stage, double m) {
  StageCompute s;
  for (const ChunkCost& c : stage)
    for (const PassCost* p : {&c.forward, &c.backward, &c.weight}) {
      s.seconds += m * compute_s(*p);
      s.sum_sq_s2 += m * p->compute_sq_s2;
    }
  return s;
}
}  // namespace

double expected_max_normal(long long n) {
  if (n <= 1) return 0.0;
  thread_local std::unordered_map<long long, double> known;  // a search asks for few distinct n
  auto it = known.find(n);
  if (it == known.end()) it = known.emplace(n, integrate_expected_max(static_cast<double>(n))).first;
  return it->second;
}

double kernel_jitter_s(const std::vector<std::vector<ChunkCost>>& chunks, const ParallelConfig& config,
                       long long micro_batches, double kernel_cv) {
  if (kernel_cv <= 0) return 0.0;
  const double m = static_cast<double>(micro_batches);
  double tp_wait = 0, spread = 0;
  for (const auto& stage : chunks) {
    const StageCompute s = stage_compute(stage, m);
    tp_wait = std::max(tp_wait, expected_max_normal(config.tp) * kernel_cv * s.seconds);
    spread = std::max(spread, kernel_cv * std::sqrt(s.sum_sq_s2));
  }
  // The world's tp groups: each a path of its own up to the step's last synchronisation.
  const long long groups = static_cast<long long>(config.world_size()) / config.tp;
  return tp_wait + expected_max_normal(groups) * spread;
}

double gpu_variation_s(const std::vector<std::vector<ChunkCost>>& chunks, const ParallelConfig& config,
                       long long micro_batches, double gpu_cv) {
  if (gpu_cv <= 0) return 0.0;
  const double m = static_cast<double>(micro_batches);
  double most = 0;
  for (const auto& stage : chunks) most = std::max(most, stage_compute(stage, m).seconds);
  return expected_max_normal(config.world_size()) * gpu_cv * most;
}

double straggler_s(const std::vector<std::vector<ChunkCost>>& chunks, const ParallelConfig& config,
                   long long micro_batches, const TrainingSpec& training) {
  return kernel_jitter_s(chunks, config, micro_batches, training.kernel_cv) +
         gpu_variation_s(chunks, config, micro_batches, training.gpu_cv);
}

}  // namespace loom::sim
