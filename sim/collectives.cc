#include "sim/collectives.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include <Eigen/Dense>

#include "core/stats.h"
#include "sim/nccl_tuning.h"

namespace loom::sim {

double alpha_beta_time(const AlphaBeta& ab, Collective c, int n, double bytes) {
  return ab.alpha_s * ring_steps(c, n) + bus_factor(c, n) * bytes / ab.bus_bandwidth_bytes_per_s;
}

double ring_steps(Collective c, int n) {
  switch (c) {
    case Collective::kAllReduce: return 2.0 * (n - 1);
    case Collective::kReduceScatter:
    case Collective::kAllGather: return n - 1.0;
    case Collective::kSendRecv: return 1.0;
  }
  return 1.0;
}

double bus_factor(Collective c, int n) {
  switch (c) {
    case Collective::kAllReduce: return 2.0 * (n - 1) / n;
    case Collective::kReduceScatter:
    case Collective::kAllGather: return (n - 1.0) / n;
    case Collective::kSendRecv: return 1.0;
  }
  return 1.0;
}

namespace {

// R² of predicted seconds against the measured (bytes, seconds) points.
double r2_of(const std::vector<std::pair<double, double>>& points, const std::vector<double>& predicted) {
  std::vector<double> measured;
  measured.reserve(points.size());
  for (const auto& point : points) measured.push_back(point.second);
  return r_squared(measured, predicted);
}

}  // namespace

AlphaBeta fit_alpha_beta(Collective c, int n, const std::vector<std::pair<double, double>>& points) {
  // t = steps·α + factor·S·(1/B): linear in (α, 1/B). Relative residuals, so that the small
  // messages (latency-bound) count as much as the large ones (bandwidth-bound).
  const Eigen::Index rows = static_cast<Eigen::Index>(points.size());
  Eigen::MatrixXd a(rows, 2);
  Eigen::VectorXd y(rows);
  for (Eigen::Index i = 0; i < rows; ++i) {
    const auto [bytes, seconds] = points[static_cast<std::size_t>(i)];
    a(i, 0) = ring_steps(c, n) / seconds;
    a(i, 1) = bus_factor(c, n) * bytes / seconds;
    y(i) = 1.0;
  }
  const Eigen::Vector2d x = a.colPivHouseholderQr().solve(y);
  AlphaBeta ab;
  ab.alpha_s = std::max(0.0, x(0));
  ab.bus_bandwidth_bytes_per_s = x(1) > 0 ? 1.0 / x(1) : 1e30;
  // R² of the fitted times against the measured ones.
  std::vector<double> predicted;
  predicted.reserve(points.size());
  for (const auto& point : points) predicted.push_back(alpha_beta_time(ab, c, n, point.first));
  ab.r2 = r2_of(points, predicted);
  return ab;
}

RegimeFit fit_alpha_beta_regimes(Collective c, int n, std::vector<std::pair<double, double>> points, int max_regimes,
                                 int min_points) {
  std::sort(points.begin(), points.end());
  const int total = static_cast<int>(points.size());
  using Segment = std::vector<std::pair<double, double>>;
  auto segment = [&](int from, int to) { return Segment(points.begin() + from, points.begin() + to); };
  // Sum of squared relative residuals of one line over points [from, to).
  auto sse = [&](int from, int to, AlphaBeta* fit) {
    const AlphaBeta ab = fit_alpha_beta(c, n, segment(from, to));
    double s = 0;
    for (int i = from; i < to; ++i) {
      const double r = alpha_beta_time(ab, c, n, points[i].first) / points[i].second - 1.0;
      s += r * r;
    }
    if (fit) *fit = ab;
    return s;
  };
  // Every split into k contiguous regimes (k ≤ 3 and a few dozen points: exhaustive is cheap).
  std::vector<int> best_cuts;
  double best_bic = std::numeric_limits<double>::infinity();
  auto consider = [&](const std::vector<int>& cuts) {
    double s = 0;
    int from = 0;
    for (std::size_t i = 0; i <= cuts.size(); ++i) {
      const int to = i < cuts.size() ? cuts[i] : total;
      if (!cuts.empty() && to - from < min_points) return;
      s += sse(from, to, nullptr);
      from = to;
    }
    const double k = 2.0 * static_cast<double>(cuts.size() + 1);  // α and β per regime
    // No timing is more precise than 0.1 %: residuals below that are not evidence for a regime.
    constexpr double kResolution = 1e-3;
    const double floor = total * kResolution * kResolution;
    const double bic = total * std::log(std::max(s, floor) / total) + k * std::log(static_cast<double>(total));
    if (bic < best_bic) best_bic = bic, best_cuts = cuts;
  };
  if (total < 2) return {};
  consider({});
  if (max_regimes >= 2)
    for (int a = min_points; a + min_points <= total; ++a) consider({a});
  if (max_regimes >= 3)
    for (int a = min_points; a + 2 * min_points <= total; ++a)
      for (int b = a + min_points; b + min_points <= total; ++b) consider({a, b});

  RegimeFit out;
  std::vector<double> predicted(points.size());
  int from = 0;
  for (std::size_t i = 0; i <= best_cuts.size(); ++i) {
    const int to = i < best_cuts.size() ? best_cuts[i] : total;
    AlphaBetaRegime r;
    sse(from, to, &r.ab);
    r.min_bytes = points[from].first;
    r.max_bytes = points[to - 1].first;
    for (int j = from; j < to; ++j) predicted[j] = alpha_beta_time(r.ab, c, n, points[j].first);
    out.regimes.push_back(r);
    from = to;
  }
  out.r2 = r2_of(points, predicted);
  return out;
}

const AlphaBeta& regime_for(const std::vector<AlphaBetaRegime>& regimes, double bytes) {
  // Regimes are ascending and contiguous: the last one starting at or below `bytes`.
  std::size_t i = 0;
  while (i + 1 < regimes.size() && regimes[i + 1].min_bytes <= bytes) ++i;
  return regimes[i].ab;
}

CollectiveModel::CollectiveModel(const ClusterSpec& cluster)
    : intra_node_(cluster.intra_node),
      inter_node_(cluster.inter_node),
      nccl_(cluster.collective_library == "nccl"),
      amd_host_(cluster.host_cpu_vendor == "amd") {
  std::map<Key, std::vector<std::pair<double, double>>> grouped;
  for (const auto& p : cluster.collective_points) {
    auto c = parse_collective(p.collective);
    auto l = parse_link_level(p.level);
    if (c && l && p.group_size >= 2) grouped[{*c, *l, p.group_size}].emplace_back(p.bytes, p.seconds);
  }
  for (auto& [key, points] : grouped) {
    std::sort(points.begin(), points.end());
    Measured m;
    m.fit = fit_alpha_beta_regimes(std::get<0>(key), std::get<2>(key), points);
    m.points = std::move(points);
    measured_[key] = std::move(m);
  }
  for (const auto& f : cluster.collective_fits) {
    auto c = parse_collective(f.collective);
    auto l = parse_link_level(f.level);
    if (c && l)
      fits_[{*c, *l, f.group_size}].push_back(
          {{f.alpha_s, f.bus_bandwidth_bytes_per_s, f.r2}, f.min_bytes, f.max_bytes});
  }
  for (auto& [key, regimes] : fits_)
    std::sort(regimes.begin(), regimes.end(), [](const auto& a, const auto& b) { return a.min_bytes < b.min_bytes; });
}

bool CollectiveModel::measured_across_nodes(Collective c) const {
  for (const auto& [key, m] : measured_)
    if (std::get<0>(key) == c && std::get<1>(key) == LinkLevel::kInterNode) return true;
  for (const auto& [key, f] : fits_)
    if (std::get<0>(key) == c && std::get<1>(key) == LinkLevel::kInterNode) return true;
  return false;
}

const CollectiveModel::Measured* CollectiveModel::measured(Collective c, int n, LinkLevel level) const {
  auto it = measured_.find({c, level, n});
  if (it != measured_.end()) return &it->second;
  // The smallest measured group at least as large: a conservative stand-in for sizes between.
  for (const auto& [key, m] : measured_)
    if (std::get<0>(key) == c && std::get<1>(key) == level && std::get<2>(key) >= n) return &m;
  return nullptr;
}

AlphaBeta CollectiveModel::line(Collective c, int n, LinkLevel level, double bytes) const {
  if (const Measured* m = measured(c, n, level)) return regime_for(m->fit.regimes, bytes);
  auto it = fits_.find({c, level, n});
  if (it != fits_.end()) return regime_for(it->second, bytes);
  const LinkSpec& link = level == LinkLevel::kIntraNode ? intra_node_ : inter_node_;
  return {link.latency_s, link.bandwidth_bytes_per_s, 1.0};
}

double CollectiveModel::flat_time_s(Collective c, double bytes, int n, LinkLevel level) const {
  if (n <= 1 || bytes <= 0) return 0.0;
  // Reduce-scatter and all-gather move half an all-reduce's bus traffic in half its steps; with
  // only all-reduce measured, they cost half an all-reduce of the same buffer.
  if ((c == Collective::kReduceScatter || c == Collective::kAllGather) && !measured_.count({c, level, n}) &&
      measured(Collective::kAllReduce, n, level) != nullptr && !fits_.count({c, level, n}))
    return 0.5 * flat_time_s(Collective::kAllReduce, bytes, n, level);

  if (const Measured* m = measured(c, n, level)) {
    const auto& pts = m->points;
    if (pts.size() >= 2 && bytes >= pts.front().first && bytes <= pts.back().first) {
      auto upper = std::lower_bound(pts.begin(), pts.end(), std::make_pair(bytes, 0.0));
      if (upper == pts.begin()) return upper->second;
      auto lower = upper - 1;
      const double w = (bytes - lower->first) / (upper->first - lower->first);
      return lower->second + w * (upper->second - lower->second);
    }
    return alpha_beta_time(regime_for(m->fit.regimes, bytes), c, n, bytes);
  }
  const AlphaBeta ab = line(c, n, level, bytes);
  double t = alpha_beta_time(ab, c, n, bytes);
  if (c == Collective::kAllReduce && level == LinkLevel::kInterNode) {
    // NCCL's double binary tree: logarithmic latency at the same bus bandwidth.
    const double tree =
        2.0 * std::ceil(std::log2(n)) * ab.alpha_s + bus_factor(c, n) * bytes / ab.bus_bandwidth_bytes_per_s;
    t = std::min(t, tree);
  }
  return t;
}

double CollectiveModel::time_s(Collective c, double bytes, GroupPlacement g) const {
  if (g.size <= 1 || bytes <= 0) return 0.0;
  const int per_node = std::clamp(g.per_node, 1, g.size);
  const int nodes = (g.size + per_node - 1) / per_node;
  if (nodes == 1) return flat_time_s(c, bytes, g.size, LinkLevel::kIntraNode);
  // On NCCL, one ring (or tree) through every rank, as NCCL itself costs and picks it, unless the
  // cost file measured collectives across nodes.
  if (nccl_ && c != Collective::kSendRecv && !measured_across_nodes(c))
    return nccl_collective(
               c, bytes,
               {nodes, per_node, intra_node_.bandwidth_bytes_per_s, inter_node_.bandwidth_bytes_per_s, amd_host_})
        .seconds;
  if (per_node == 1) return flat_time_s(c, bytes, g.size, LinkLevel::kInterNode);
  // Hierarchical: each of the per_node ranks drives its own NIC (rail) with 1/per_node of the data.
  const double shard = bytes / per_node;
  switch (c) {
    case Collective::kAllReduce:
      return flat_time_s(Collective::kReduceScatter, bytes, per_node, LinkLevel::kIntraNode) +
             flat_time_s(Collective::kAllReduce, shard, nodes, LinkLevel::kInterNode) +
             flat_time_s(Collective::kAllGather, bytes, per_node, LinkLevel::kIntraNode);
    case Collective::kReduceScatter:
    case Collective::kAllGather:
      return flat_time_s(c, bytes, per_node, LinkLevel::kIntraNode) +
             flat_time_s(c, shard, nodes, LinkLevel::kInterNode);
    case Collective::kSendRecv: return send_recv_s(bytes, LinkLevel::kInterNode);
  }
  return 0.0;
}

double CollectiveModel::send_recv_s(double bytes, LinkLevel level) const {
  if (bytes <= 0) return 0.0;
  // Measured pairs (a `loom profile`) win over the link's one line.
  if (measured_.count({Collective::kSendRecv, level, 2})) return flat_time_s(Collective::kSendRecv, bytes, 2, level);
  const LinkSpec& link = level == LinkLevel::kIntraNode ? intra_node_ : inter_node_;
  return link.latency_s + bytes / link.bandwidth_bytes_per_s;
}

}  // namespace loom::sim
