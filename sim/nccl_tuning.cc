#include "sim/nccl_tuning.h"

#include <algorithm>
#include <limits>

namespace loom::sim {

namespace {

constexpr double kUs = 1e-6;
constexpr double kGBs = 1e9;

int index(NcclProtocol p) { return static_cast<int>(p); }

// NCCL's tuning tables (µs; LL, LL128, Simple), src/graph/tuning.cc: baseLat and hwLat for NVLink
// and the network hop.
constexpr double kBase[2][3] = {{6.6, 14.0, 8.4}, {6.8, 14.0, 8.4}};        // ring, tree
constexpr double kNvlinkHop[2][3] = {{0.6, 1.9, 3.4}, {0.6, 1.25, 4.0}};    // ring, tree
constexpr double kNetworkHop[2][3] = {{2.7, 4.0, 14.0}, {5.0, 8.5, 14.0}};  // ring, tree
// The network post overhead floors every intra-node step of a multi-node ring: 1 µs on Intel hosts,
// 2 µs on AMD ones, three times that for Simple.
double post_overhead_us(NcclProtocol p, bool amd) {
  return (amd ? 2.0 : 1.0) * (p == NcclProtocol::kSimple ? 3.0 : 1.0);
}
// Multi-node Simple ring all-reduce: latency × 1.4 on Ampere and later ("plateau").
constexpr double kRingPlateau = 1.4;
// Wire efficiency of LL128 (120 of 128 bytes, with NCCL's 0.92 factor) and LL's cap on the bus
// bandwidth (GB/s: 2 nodes, more; Intel, AMD).
constexpr double kLl128Factor = 0.92;
constexpr double kLlMaxBw[2][2] = {{39.0, 20.4}, {22.5, 19.0}};  // [amd][more than 2 nodes]
// Tree all-reduce: × 0.92 of the ring's bandwidth; its LL runs at 1/3.8 of that.
constexpr double kTreeFactor = 0.92;
constexpr double kTreeLlFactor = 1.0 / 3.8;

int floor_log2(int n) {
  int l = 0;
  while ((n >>= 1) > 0) ++l;
  return l;
}

}  // namespace

double nccl_latency_s(Collective c, NcclAlgorithm a, NcclProtocol p, const NcclGroup& g) {
  const int alg = static_cast<int>(a), pr = index(p);
  const int ranks = g.nodes * g.ranks_per_node;
  if (a == NcclAlgorithm::kTree) {
    // A chain inside each node, a double binary tree across nodes, up and down.
    const double hops = (g.ranks_per_node - 1) * kNvlinkHop[alg][pr] + floor_log2(g.nodes) * kNetworkHop[alg][pr];
    return (kBase[alg][pr] + 2.0 * hops) * kUs;
  }
  const double intra =
      g.nodes > 1 ? std::max(kNvlinkHop[alg][pr], post_overhead_us(p, g.amd_host)) : kNvlinkHop[alg][pr];
  // n − nodes steps inside nodes and nodes − 1 between them, once (all-gather, reduce-scatter) or
  // twice (all-reduce: reduce-scatter then all-gather around the ring).
  const double once = (ranks - g.nodes) * intra + (g.nodes - 1) * kNetworkHop[alg][pr];
  if (c != Collective::kAllReduce) return (kBase[alg][pr] + once) * kUs;
  double lat = kBase[alg][pr] + 2.0 * once;
  if (g.nodes > 1 && p == NcclProtocol::kSimple) lat *= kRingPlateau;
  return lat * kUs;
}

double nccl_bus_bandwidth(NcclAlgorithm a, NcclProtocol p, const NcclGroup& g) {
  // A ring through every rank crosses each node boundary once per channel: its bus bandwidth is the
  // node's NICs for this group or the GPU's NVLink, whichever is less.
  double bw = g.nodes > 1 ? std::min(g.intra_bandwidth_bytes_per_s, g.ranks_per_node * g.nic_bandwidth_bytes_per_s)
                          : g.intra_bandwidth_bytes_per_s;
  if (a == NcclAlgorithm::kTree) bw *= kTreeFactor;
  switch (p) {
    case NcclProtocol::kSimple: return bw;
    case NcclProtocol::kLL128: return bw * kLl128Factor;
    case NcclProtocol::kLL:
      if (a == NcclAlgorithm::kTree) return bw * kTreeLlFactor;
      return std::min(0.5 * bw, kLlMaxBw[g.amd_host ? 1 : 0][g.nodes > 2 ? 1 : 0] * kGBs);
  }
  return bw;
}

double nccl_time_s(Collective c, double bytes, NcclAlgorithm a, NcclProtocol p, const NcclGroup& g) {
  const int n = g.nodes * g.ranks_per_node;
  const double bus = nccl_bus_bandwidth(a, p, g);
  // Algorithm bandwidth (nccl-tests' conversion): a ring moves 2(n−1)/n of the buffer per rank for
  // an all-reduce, (n−1)/n for the others; a tree all-reduce runs at half its bus bandwidth.
  double traffic = c == Collective::kAllReduce ? 2.0 * (n - 1) / n : (n - 1.0) / n;
  if (a == NcclAlgorithm::kTree) traffic = 2.0;
  return nccl_latency_s(c, a, p, g) + traffic * bytes / bus;
}

NcclEstimate nccl_collective(Collective c, double bytes, const NcclGroup& g) {
  NcclEstimate best;
  best.seconds = std::numeric_limits<double>::infinity();
  for (NcclAlgorithm a : {NcclAlgorithm::kRing, NcclAlgorithm::kTree}) {
    if (a == NcclAlgorithm::kTree && c != Collective::kAllReduce) continue;
    for (NcclProtocol p : {NcclProtocol::kLL, NcclProtocol::kLL128, NcclProtocol::kSimple}) {
      const double t = nccl_time_s(c, bytes, a, p, g);
      if (t < best.seconds) best = {a, p, nccl_latency_s(c, a, p, g), nccl_bus_bandwidth(a, p, g), t};
    }
  }
  return best;
}

}  // namespace loom::sim
