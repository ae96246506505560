// NCCL's own cost model for a collective over several nodes, as NCCL uses it to choose an
// algorithm and a protocol (src/graph/tuning.cc, ncclTopoGetAlgoTime: time = latency + bytes / bw,
// the minimum over ring and tree and over LL, LL128 and Simple). The constants are NCCL's (the
// values of its tuning tables, shared/reference/collectives-at-scale.md §1.2–1.4, NVIDIA/nccl
// @ 5067397c); the bandwidths are the cost file's links. What the α–β line with one per-hop latency
// misses at scale, this keeps: a ring's latency grows with its ranks (2(n−1) hops for an
// all-reduce, n−1 for an all-gather or reduce-scatter; ~4.8 ms for a Simple ring all-gather over
// 1,024 ranks), a multi-node Simple ring all-reduce pays NCCL's 1.4× "plateau", small messages
// choose LL or LL128, which give up bandwidth (50 %, 93.75 % of the wire) for latency, and the
// all-reduce may run as a double binary tree with logarithmic latency.
#pragma once

#include "core/names.h"

namespace loom::sim {

enum class NcclAlgorithm { kRing, kTree };
enum class NcclProtocol { kLL, kLL128, kSimple };

// A group of `nodes` × `ranks_per_node` GPUs on NVLink inside a node and one NIC per GPU between
// nodes (DGX/HGX: NCCL keeps each ring on one NIC index, so the group's ranks of a node use as
// many NICs as they are).
struct NcclGroup {
  int nodes = 1;
  int ranks_per_node = 1;
  double intra_bandwidth_bytes_per_s = 0;  // per GPU, NVLink
  double nic_bandwidth_bytes_per_s = 0;    // per GPU, achievable on one NIC
  bool amd_host = false;                   // NCCL's network post overhead and LL cap differ by CPU vendor
};

struct NcclEstimate {
  NcclAlgorithm algorithm = NcclAlgorithm::kRing;
  NcclProtocol protocol = NcclProtocol::kSimple;
  double latency_s = 0;
  double bus_bandwidth_bytes_per_s = 0;
  double seconds = 0;
};

// NCCL's latency for one algorithm and protocol (seconds), and its bus bandwidth.
double nccl_latency_s(Collective c, NcclAlgorithm a, NcclProtocol p, const NcclGroup& g);
double nccl_bus_bandwidth(NcclAlgorithm a, NcclProtocol p, const NcclGroup& g);
// The time of each choice: its latency plus the bytes at its algorithm bandwidth.
double nccl_time_s(Collective c, double bytes, NcclAlgorithm a, NcclProtocol p, const NcclGroup& g);
// What NCCL picks for a collective of `bytes` (the whole buffer, as nccl-tests counts size) on a
// group spanning nodes: the fastest choice. Tree only for all-reduce.
NcclEstimate nccl_collective(Collective c, double bytes, const NcclGroup& g);

}  // namespace loom::sim
