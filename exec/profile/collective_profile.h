// Collective measurements for `loom profile` under MPI (NCCL on GPU builds): all-reduce,
// reduce-scatter, all-gather and send/recv over a sweep of message sizes, for every group size
// the launched ranks can form, timed the way nccl-tests times them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "exec/backend.h"
#include "exec/process_groups.h"

namespace loom::exec::profile {

struct CollectiveTiming {
  std::string collective;  // a name of core/names.h's kCollectiveNames
  std::string level;       // a name of kLinkLevelNames
  int group_size = 0;
  double bytes = 0;    // nccl-tests "size": the full buffer (all-reduce), send (reduce-scatter), receive (all-gather)
  double seconds = 0;  // slowest rank of the group, mean over the iterations
};

// min, min·factor, … up to max (inclusive when it falls on the sequence).
std::vector<std::int64_t> message_sizes(std::int64_t min_bytes, std::int64_t max_bytes, int factor);

// Group sizes measured for `world` ranks: every divisor ≥ 2 (groups of consecutive ranks, the
// placement TP groups get).
std::vector<int> group_sizes(int world);

// Collective over the world: every rank must call it with the same arguments. Results are
// complete on world rank 0 (other ranks get an empty list). `progress(done, total)` runs on rank 0.
// `over_nccl`: each measured group is an NCCL communicator (exec/nccl; the CUDA backend with one rank per
// GPU, as `loom run --backend cuda` carries its messages), else the MPI communicator on host memory.
std::vector<CollectiveTiming> time_collectives(const Runtime& runtime, Backend& backend,
                                               const std::vector<std::int64_t>& sizes, double min_time_s,
                                               const std::function<void(std::size_t, std::size_t)>& progress = {},
                                               bool over_nccl = false);

}  // namespace loom::exec::profile
