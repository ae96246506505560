#include "core/stats.h"

#include <algorithm>

namespace loom {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double r_squared(const std::vector<double>& measured, const std::vector<double>& fitted) {
  if (measured.empty()) return 1.0;
  double mean = 0;
  for (double m : measured) mean += m;
  mean /= static_cast<double>(measured.size());
  double ss_res = 0, ss_tot = 0;
  for (std::size_t i = 0; i < measured.size(); ++i) {
    ss_res += (measured[i] - fitted[i]) * (measured[i] - fitted[i]);
    ss_tot += (measured[i] - mean) * (measured[i] - mean);
  }
  return ss_tot > 0 ? 1.0 - ss_res / ss_tot : 1.0;
}

}  // namespace loom
