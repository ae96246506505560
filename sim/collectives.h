// Collective communication cost on a two-level topology (NVLink/NVSwitch inside a node,
// InfiniBand between nodes), following the nccl-tests conventions:
//   ring all-reduce            2(n−1)·α + 2(n−1)/n · S/B
//   reduce-scatter, all-gather  (n−1)·α +  (n−1)/n · S/B
//   tree all-reduce (small S)  2⌈log2 n⌉·α + 2(n−1)/n · S/B
// A group spanning nodes runs hierarchically (intra-node reduce-scatter, inter-node all-reduce on
// each rail, intra-node all-gather). Measured points in the cost file win over the α–β line:
// they are interpolated in size, and fitted by least squares (Eigen) to extrapolate. On a cost
// file whose collectives run on NCCL, a group spanning nodes is costed as NCCL costs it instead
// (sim/nccl_tuning.h: one ring or tree through every rank, NCCL's latencies and protocols).
#pragma once

#include <map>
#include <tuple>
#include <vector>

#include "core/cluster_spec.h"
#include "core/names.h"

namespace loom::sim {

// The enums and their names live in core/names.h, below both the simulator and the executor.
using loom::Collective;
using loom::LinkLevel;
using loom::to_string;

// Where a group's ranks sit: `size` ranks, `per_node` of them in each node.
struct GroupPlacement {
  int size = 1;
  int per_node = 1;
};

// Ring steps and bus-bandwidth factor of a collective over n ranks (nccl-tests PERFORMANCE.md).
double ring_steps(Collective c, int n);
double bus_factor(Collective c, int n);

struct AlphaBeta {
  double alpha_s = 0;  // per ring step
  double bus_bandwidth_bytes_per_s = 0;
  double r2 = 1.0;
};

// Least-squares α–β fit of measured (bytes, seconds) points for one collective and group size.
AlphaBeta fit_alpha_beta(Collective c, int n, const std::vector<std::pair<double, double>>& points);

// One α–β line per message-size regime. The size picks the protocol (MPI's eager and rendezvous
// paths; NCCL's LL, LL128 and Simple, which NCCL's own tuner costs with an α and a β each) and,
// on a host, whether the buffers live in cache or DRAM, so one line over 1 KiB..256 MiB can miss
// badly. Regimes are contiguous in size, at least `min_points` points each; their number (up to
// `max_regimes`) minimises the Bayesian information criterion of the relative residuals, so a
// regime is only added where it explains the data, not the noise.
struct AlphaBetaRegime {
  AlphaBeta ab;                         // ab.r2: of this regime's points
  double min_bytes = 0, max_bytes = 0;  // measured sizes the regime covers
};
struct RegimeFit {
  std::vector<AlphaBetaRegime> regimes;  // ascending in size
  double r2 = 0;                         // of all points, each predicted by its regime's line
};
// The regime whose sizes hold `bytes` (the nearest one outside them).
const AlphaBeta& regime_for(const std::vector<AlphaBetaRegime>& regimes, double bytes);
RegimeFit fit_alpha_beta_regimes(Collective c, int n, std::vector<std::pair<double, double>> points,
                                 int max_regimes = 3, int min_points = 4);
double alpha_beta_time(const AlphaBeta& ab, Collective c, int n, double bytes);

class CollectiveModel {
 public:
  // Copies what it needs of `cluster`: the model does not refer to it afterwards.
  explicit CollectiveModel(const ClusterSpec& cluster);

  // Time of one collective of `bytes` (the full buffer, as nccl-tests counts size) on a group.
  double time_s(Collective c, double bytes, GroupPlacement group) const;
  // Time on one link level for a flat group of n ranks.
  double flat_time_s(Collective c, double bytes, int n, LinkLevel level) const;
  // Point-to-point transfer between two ranks.
  double send_recv_s(double bytes, LinkLevel level) const;

  // The α–β line used for (collective, level, n) at `bytes`: the measured points' regime fit,
  // the file's fit for that size, or the link's figures.
  AlphaBeta line(Collective c, int n, LinkLevel level, double bytes) const;

 private:
  struct Measured {
    std::vector<std::pair<double, double>> points;  // sorted by bytes
    RegimeFit fit;
  };
  using Key = std::tuple<Collective, LinkLevel, int>;
  const Measured* measured(Collective c, int n, LinkLevel level) const;
  // The cost file holds measured points or fits of `c` between nodes (then they win over NCCL's model).
  bool measured_across_nodes(Collective c) const;

  // What the model reads of the cluster, copied: a model may outlive the spec it was built from.
  LinkSpec intra_node_, inter_node_;
  bool nccl_ = false;      // collectives run on NCCL (sim/nccl_tuning.h across nodes)
  bool amd_host_ = false;  // NCCL's AMD-host constants
  std::map<Key, Measured> measured_;
  std::map<Key, std::vector<AlphaBetaRegime>> fits_;  // ascending in size
};

}  // namespace loom::sim
