// The process groups of one parallel layout: world, TP, CP, DP (and DP×CP), PP, the embedding group (first and
// last pipeline stage, which share the tied word embedding), HSDP's shard and replica groups and expert
// parallelism's ep and expert_dp groups. Rank placement is
// core's rank_coords: TP fastest, then CP, then DP, then PP — the placement the simulator assumes.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/parallel_config.h"
#include "exec/comm_activity.h"
#include "exec/communicator.h"

namespace loom::exec {

// Starts MPI when the build has it (and finalizes it on destruction); otherwise a world of one.
class Runtime {
 public:
  Runtime();
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  int local_size() const { return local_size_; }  // ranks on this node
  int local_rank() const { return local_rank_; }  // this rank among them
  static bool has_mpi();
  // Every rank reports whether it failed; returns {ranks that failed, whether rank 0 did}. Used to
  // agree on bad input before any other collective, so every rank exits and none hangs.
  std::pair<int, bool> agree_on_failure(bool failed) const;
  // Ends every rank of the job (an internal error on one rank would leave the others waiting in a
  // collective); without MPI, exits this process.
  [[noreturn]] void abort(int status) const;
  // Sums n doubles over the world (every rank's peaks at the end of a run).
  void sum_over_world(double* data, int n) const;
  // The most ranks driving one GPU on any node, counted by the GPUs' UUIDs (Backend::device_uuid; empty
  // off a GPU counts 1): collective over the world, so every rank gets the same answer.
  int ranks_sharing_a_device(const std::string& device_uuid) const;
  // Starts the communication watchdog (exec/mpi/mpi_watchdog.h) on every rank: collective. Null
  // when there is nothing to watch (one rank, no MPI, timeout_s 0) or when MPI cannot run it (no
  // MPI_THREAD_MULTIPLE: rank 0 says so in one line and the run goes on unwatched).
  std::unique_ptr<Watchdog> start_watchdog(double timeout_s) const;

 private:
  int world_rank_ = 0;
  int world_size_ = 1;
  int local_size_ = 1;
  int local_rank_ = 0;
  bool owns_mpi_ = false;
  bool threads_ = false;  // MPI_THREAD_MULTIPLE provided
  std::vector<int> world_ranks_;
};

struct ProcessGroups {
  ParallelConfig config;
  RankCoords coords;
  int world_rank = 0;
  std::unique_ptr<Communicator> world, tp, dp, pp;
  // Context parallelism: the cp ranks splitting each sequence (the attention ring), and the dp·cp ranks
  // holding the same weights (Megatron-core's dp_cp group: gradients reduce and ZeRO shards over it;
  // null when cp = 1, where it is dp).
  std::unique_ptr<Communicator> cp, dp_cp;
  Communicator& grads() { return dp_cp != nullptr ? *dp_cp : *dp; }
  std::unique_ptr<Communicator> embedding;  // null unless pp > 1 and this rank is on the first or last stage
  // HSDP (config.shard_group > 0): the dp ranks of this rank's shard group, and the dp ranks holding
  // the same shard in the other groups. Null without a shard group (ZeRO shards over all of dp).
  std::unique_ptr<Communicator> shard, replica;
  Communicator& zero_shards() { return shard != nullptr ? *shard : grads(); }
  // Expert parallelism (the expert grid etp-ep-edp of core/parallel_config.h; with expert TP = TP, ep
  // consecutive dp ranks): the ranks whose MoE layers split the routed experts (tokens are dispatched
  // among them), and the ranks holding the same experts, which reduce and shard their gradients.
  std::unique_ptr<Communicator> ep, expert_dp;
  int ep_rank() const { return expert_coords(config, world_rank).ep_rank; }
  bool first_stage() const { return coords.pp_rank == 0; }
  bool last_stage() const { return coords.pp_rank == config.pp - 1; }
  // Every group slot above, null ones included: what binds a backend to, or wraps, all of them.
  std::vector<std::unique_ptr<Communicator>*> all() {
    return {&world, &tp, &dp, &pp, &cp, &dp_cp, &embedding, &shard, &replica, &ep, &expert_dp};
  }
};

// Puts every group of more than one rank behind a StagedCommunicator (exec/staged_communicator.h):
// buffers in a GPU's memory travel through host copies over the host-memory communicator (MPI). Groups
// of one become SelfCommunicators, which copy through the backend.
void stage_through_host(ProcessGroups& groups);

// Whether this build has the NCCL communicator (CUDA, NCCL and MPI found: LOOM_WITH_NCCL).
bool has_nccl();
// Puts every group of more than one rank on NCCL (exec/nccl/nccl_communicator.h): one NCCL communicator
// per group, bootstrapped over the group's MPI communicator, which it keeps for host buffers; the
// pipeline and context-parallel groups also get point-to-point channels to their ring neighbours.
// Groups of one become SelfCommunicators, which copy through the backend. Collective over the world
// (every rank makes its communicators in the same order); the GPU of this rank must be current
// (make_cuda_backend makes it so), and the trainer binds the CUDA backend (use_backend). Throws
// std::logic_error in a build without NCCL.
void communicate_over_nccl(ProcessGroups& groups);

// Collective over the world: every rank must call it with the same config, whose world size must
// equal the launched ranks (checked by the caller beforehand). The embedding group exists only for
// tied embeddings split over more than one stage.
ProcessGroups make_process_groups(const Runtime& runtime, const ParallelConfig& config, bool tied_embeddings);

// The groups of rank 0 in a world of one: world, tp, dp, pp, ep and expert_dp are SelfCommunicators, the
// others null (what make_process_groups gives without MPI, and what single-process tests train on).
ProcessGroups single_rank_groups(const ParallelConfig& config);

}  // namespace loom::exec
