#include "sim/zero3_prefetch.h"

#include <algorithm>
#include <vector>

namespace loom::sim {

double zero3_prefetch_wait_s(std::span<const Zero3Step> layer, int layers, double prefetch_elements) {
  const int k = static_cast<int>(layer.size());
  const int n = k * std::max(0, layers);
  if (n == 0) return 0.0;
  std::vector<double> arrived(static_cast<std::size_t>(n), 0.0);  // unit 0: prefetched before the pass
  int issued = 0;
  double channel = 0, t = 0, compute = 0, gathers = 0;
  for (int i = 0; i < n; ++i) {
    const double start = std::max(t, arrived[static_cast<std::size_t>(i)]);
    // The hook of unit i: the next units' gathers, queued behind those in flight.
    double fresh = 0;
    while (issued + 1 < n && (fresh == 0 || fresh < prefetch_elements)) {
      const Zero3Step& u = layer[static_cast<std::size_t>(++issued % k)];
      channel = std::max(channel, start) + u.gather_s;
      arrived[static_cast<std::size_t>(issued)] = channel;
      fresh += std::max(u.elements, 1.0);
      gathers += u.gather_s;
    }
    const double c = layer[static_cast<std::size_t>(i % k)].compute_s;
    t = start + c;
    compute += c;
  }
  return std::max(0.0, t - std::max(compute, gathers));
}

}  // namespace loom::sim
