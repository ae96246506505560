#include "exec/process_groups.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "exec/staged_communicator.h"

#ifdef LOOM_EXEC_MPI
#include "exec/mpi/mpi_communicator.h"
#include "exec/mpi/mpi_watchdog.h"
#endif
#ifdef LOOM_WITH_NCCL
#include "exec/nccl/nccl_communicator.h"
#endif

namespace loom::exec {

bool Runtime::has_mpi() {
#ifdef LOOM_EXEC_MPI
  return true;
#else
  return false;
#endif
}

Runtime::Runtime() {
#ifdef LOOM_EXEC_MPI
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    // The watchdog thread talks MPI while the training thread is inside a collective.
    MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    owns_mpi_ = true;
  } else {
    MPI_CHECK(MPI_Query_thread(&provided));
  }
  threads_ = provided == MPI_THREAD_MULTIPLE;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
  for (int r = 0; r < world_size_; ++r) world_ranks_.push_back(r);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank_, MPI_INFO_NULL, &node));
  MPI_CHECK(MPI_Comm_size(node, &local_size_));
  MPI_CHECK(MPI_Comm_rank(node, &local_rank_));
  MPI_Comm_free(&node);
#endif
}

std::pair<int, bool> Runtime::agree_on_failure(bool failed) const {
  int flags[2] = {failed ? 1 : 0, failed && world_rank_ == 0 ? 1 : 0};
#ifdef LOOM_EXEC_MPI
  if (world_size_ > 1) {
    const CommActivity::Blocked blocked("world", "all_reduce", CommActivity::process().issue("world"), world_ranks_);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, flags, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  }
#endif
  return {flags[0], flags[1] != 0};
}

void Runtime::abort(int status) const {
#ifdef LOOM_EXEC_MPI
  if (world_size_ > 1) MPI_Abort(MPI_COMM_WORLD, status);
#endif
  std::exit(status);
}

void Runtime::sum_over_world(double* data, int n) const {
#ifdef LOOM_EXEC_MPI
  if (world_size_ > 1) {
    const CommActivity::Blocked blocked("world", "all_reduce", CommActivity::process().issue("world"), world_ranks_);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  }
#else
  (void)data;
  (void)n;
#endif
}

int Runtime::ranks_sharing_a_device(const std::string& device_uuid) const {
  // A UUID's text (gpu_uuid_text: 40 characters), kept within the fixed record below.
  if (device_uuid.size() > 64) throw std::logic_error("Runtime::ranks_sharing_a_device: a key of more than 64 bytes");
#ifdef LOOM_EXEC_MPI
  if (world_size_ > 1) {
    // How many ranks of this node gave the same key, this one included.
    MPI_Comm node = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank_, MPI_INFO_NULL, &node));
    int size = 1;
    MPI_CHECK(MPI_Comm_size(node, &size));
    // Fixed-size records: the key's length, then its bytes.
    constexpr int kRecord = 65;
    std::vector<char> mine(kRecord, 0), all(static_cast<std::size_t>(kRecord) * size);
    mine[0] = static_cast<char>(device_uuid.size());
    std::copy(device_uuid.begin(), device_uuid.end(), mine.begin() + 1);
    MPI_CHECK(MPI_Allgather(mine.data(), kRecord, MPI_CHAR, all.data(), kRecord, MPI_CHAR, node));
    MPI_Comm_free(&node);
    int same = 0;
    for (int r = 0; r < size; ++r) same += std::equal(mine.begin(), mine.end(), all.begin() + r * kRecord) ? 1 : 0;
    // The most anywhere, so every rank decides alike.
    int most = device_uuid.empty() ? 1 : same;
    const CommActivity::Blocked blocked("world", "all_reduce", CommActivity::process().issue("world"), world_ranks_);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    return most;
  }
#endif
  return 1;
}

std::unique_ptr<Watchdog> Runtime::start_watchdog(double timeout_s) const {
  if (world_size_ == 1 || timeout_s <= 0) return nullptr;
#ifdef LOOM_EXEC_MPI
  if (!threads_) {
    if (world_rank_ == 0)
      std::fprintf(stderr,
                   "loom: warning: this MPI does not provide MPI_THREAD_MULTIPLE; running without the "
                   "communication watchdog (a hung rank will not be reported)\n");
    return nullptr;
  }
  return std::make_unique<MpiWatchdog>(timeout_s);
#else
  (void)threads_;
  (void)world_ranks_;
  return nullptr;
#endif
}

Runtime::~Runtime() {
#ifdef LOOM_EXEC_MPI
  if (owns_mpi_) MPI_Finalize();
#endif
}

ProcessGroups make_process_groups(const Runtime& runtime, const ParallelConfig& config, bool tied_embeddings) {
  ProcessGroups g;
  g.config = config;
  g.world_rank = runtime.world_rank();
  g.coords = rank_coords(config, g.world_rank);
  const RankCoords c = g.coords;
#ifdef LOOM_EXEC_MPI
  if (runtime.world_size() > 1) {
    auto world = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "world");
    // Colours: the coordinates the group's ranks share, in rank order (tp, cp, dp, pp).
    const int cp_dp = c.cp_rank + config.cp * c.dp_rank;  // a rank's place in the dp·cp group
    g.tp = world->split(cp_dp + config.cp * config.dp * c.pp_rank, c.tp_rank, "tp");
    g.dp = world->split(c.tp_rank + config.tp * (c.cp_rank + config.cp * c.pp_rank), c.dp_rank, "dp");
    g.pp = world->split(c.tp_rank + config.tp * cp_dp, c.pp_rank, "pp");
    if (config.cp > 1) {
      g.cp = world->split(c.tp_rank + config.tp * (c.dp_rank + config.dp * c.pp_rank), c.cp_rank, "cp");
      g.dp_cp = world->split(c.tp_rank + config.tp * c.pp_rank, cp_dp, "dp_cp");
    }
    const bool edge = c.pp_rank == 0 || c.pp_rank == config.pp - 1;
    MPI_Comm embedding = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD,
                             edge && config.pp > 1 && tied_embeddings ? c.tp_rank + config.tp * cp_dp : MPI_UNDEFINED,
                             c.pp_rank, &embedding));
    if (embedding != MPI_COMM_NULL) g.embedding = std::make_unique<MpiCommunicator>(embedding, "embedding");
    if (config.shard_group > 0) {
      const int group = c.dp_rank / config.shard_group, member = c.dp_rank % config.shard_group;
      // Under CP a shard group is its dp ranks' dp·cp ranks (shard_group·cp of them, in dp_cp order).
      const int place = c.cp_rank + config.cp * member;
      g.shard = world->split(c.tp_rank + config.tp * (c.pp_rank + config.pp * group), place, "shard");
      g.replica = world->split(c.tp_rank + config.tp * (c.pp_rank + config.pp * place), group, "replica");
    }
    // The expert grid (core/parallel_config.h): EP groups share a stage, an etp slice and an edp rank;
    // expert-DP groups a stage, an etp slice and an ep rank.
    const ExpertCoords e = expert_coords(config, g.world_rank);
    const int etp = config.expert_tp(), edp = config.expert_grad_ranks();
    g.ep = world->split(e.etp_rank + etp * (e.edp_rank + edp * c.pp_rank), e.ep_rank, "ep");
    g.expert_dp = world->split(e.etp_rank + etp * (e.ep_rank + config.ep * c.pp_rank), e.edp_rank, "expert_dp");
    g.world = std::move(world);
    return g;
  }
#endif
  (void)c;
  (void)tied_embeddings;
  return single_rank_groups(config);
}

ProcessGroups single_rank_groups(const ParallelConfig& config) {
  ProcessGroups g;
  g.config = config;
  g.world_rank = 0;
  g.coords = rank_coords(config, 0);
  g.world = std::make_unique<SelfCommunicator>("world");
  g.tp = std::make_unique<SelfCommunicator>("tp");
  g.dp = std::make_unique<SelfCommunicator>("dp");
  g.pp = std::make_unique<SelfCommunicator>("pp");
  g.ep = std::make_unique<SelfCommunicator>("ep");
  g.expert_dp = std::make_unique<SelfCommunicator>("expert_dp");
  return g;
}

void stage_through_host(ProcessGroups& groups) {
  for (std::unique_ptr<Communicator>* group : groups.all()) {
    if (*group == nullptr) continue;
    if ((*group)->size() > 1)
      *group = std::make_unique<StagedCommunicator>(std::move(*group));
    else if (dynamic_cast<SelfCommunicator*>(group->get()) == nullptr)
      // An MPI group of one would hand MPI the device pointers (a non-in-place all-gather copies them
      // with memcpy); a SelfCommunicator copies through the backend.
      *group = std::make_unique<SelfCommunicator>((*group)->name());
  }
}

bool has_nccl() {
#ifdef LOOM_WITH_NCCL
  return true;
#else
  return false;
#endif
}

void communicate_over_nccl(ProcessGroups& groups) {
#ifdef LOOM_WITH_NCCL
  // groups.all() lists the slots in the same order on every rank: NCCL communicators are made (and,
  // with the groups, destroyed) in one order everywhere, which neither NCCL's init nor its teardown
  // can do without.
  for (std::unique_ptr<Communicator>* group : groups.all()) {
    auto* mpi = dynamic_cast<MpiCommunicator*>(group->get());
    if (mpi == nullptr) continue;  // absent, or a world of one (SelfCommunicators already)
    if (mpi->size() == 1) {
      *group = std::make_unique<SelfCommunicator>(mpi->name());
      continue;
    }
    const bool point_to_point = group == &groups.pp || group == &groups.cp;
    std::unique_ptr<MpiCommunicator> owned(mpi);
    group->release();
    *group = std::make_unique<NcclCommunicator>(std::move(owned), point_to_point);
  }
#else
  (void)groups;
  throw std::logic_error("communicate_over_nccl: this build has no NCCL communicator");
#endif
}

}  // namespace loom::exec
