// Collective measurements: each (collective, group size, message size) is warmed up once, its
// iteration count agreed over the world from one timed call, then timed between barriers; the
// slowest rank of the group is kept (a collective is done when its last rank is).
#include "exec/profile/collective_profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "core/names.h"
#ifdef LOOM_WITH_NCCL
#include "exec/mpi/mpi_communicator.h"
#include "exec/nccl/nccl_communicator.h"
#endif

namespace loom::exec::profile {

std::vector<std::int64_t> message_sizes(std::int64_t min_bytes, std::int64_t max_bytes, int factor) {
  std::vector<std::int64_t> sizes;
  for (std::int64_t s = std::max<std::int64_t>(min_bytes, 4); s <= max_bytes; s *= std::max(2, factor))
    sizes.push_back(s);
  return sizes;
}

std::vector<int> group_sizes(int world) {
  std::vector<int> sizes;
  for (int g = 2; g <= world; ++g)
    if (world % g == 0) sizes.push_back(g);
  return sizes;
}

namespace {

using clock = std::chrono::steady_clock;
double since(clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); }

constexpr int kRepeats = 5;  // timed batches per point; the fastest is kept
// One call of `collective` on `n` floats (the nccl-tests size) in `group`.
void run_once(Collective collective, Communicator& group, float* a, float* b, std::int64_t n) {
  const int g = group.size(), r = group.rank();
  switch (collective) {
    case Collective::kAllReduce: group.all_reduce(a, n, ReduceOp::kSum); break;
    case Collective::kReduceScatter: group.reduce_scatter(a, b, n / g); break;
    case Collective::kAllGather: group.all_gather(a, b, n / g); break;
    case Collective::kSendRecv:
      // Neighbouring pairs (0→1, 2→3, …), one direction: a pipeline stage handing on its activations.
      if (r % 2 == 0 && r + 1 < g) group.isend(a, n, r + 1, 0)->wait();
      if (r % 2 == 1) group.irecv(b, n, r - 1, 0)->wait();
      break;
  }
}

// The measured group over NCCL, with point-to-point channels where the pair's send/recv is timed.
// Collective over the group's members.
void use_nccl(std::unique_ptr<Communicator>& group, Backend& backend, bool point_to_point) {
#ifdef LOOM_WITH_NCCL
  auto* mpi = dynamic_cast<MpiCommunicator*>(group.get());
  if (mpi == nullptr || mpi->size() == 1) return;
  std::unique_ptr<MpiCommunicator> owned(mpi);
  (void)group.release();
  group = std::make_unique<NcclCommunicator>(std::move(owned), point_to_point);
  group->use_backend(backend);
#else
  (void)group, (void)backend, (void)point_to_point;
  throw std::logic_error("time_collectives: this build has no NCCL communicator");
#endif
}

}  // namespace

std::vector<CollectiveTiming> time_collectives(const Runtime& runtime, Backend& backend,
                                               const std::vector<std::int64_t>& sizes, double min_time_s,
                                               const std::function<void(std::size_t, std::size_t)>& progress,
                                               bool over_nccl) {
  std::vector<CollectiveTiming> out;
  if (sizes.empty()) return out;
  const int world = runtime.world_size();
  const std::int64_t max_floats = sizes.back() / 4;
  Tensor a = backend.alloc(1, max_floats, MemoryCategory::kBuffers);
  Tensor b = backend.alloc(1, max_floats, MemoryCategory::kBuffers);
  const std::vector<int> groups_to_measure = group_sizes(world);
  std::size_t total = 0, done = 0;
  for (int g : groups_to_measure) total += sizes.size() * (g == 2 ? 4 : 3);
  for (int g : groups_to_measure) {
    ParallelConfig layout;
    layout.tp = g;
    layout.dp = world / g;
    ProcessGroups groups = make_process_groups(runtime, layout, false);
    if (over_nccl) use_nccl(groups.tp, backend, g == 2);
    Communicator& group = *groups.tp;
    Communicator& all = *groups.world;
    // Consecutive ranks share a node when the group fits in the ranks one node runs.
    const LinkLevel level = g <= runtime.local_size() ? LinkLevel::kIntraNode : LinkLevel::kInterNode;
    for (const auto& [collective, name] : kCollectiveNames) {
      // Point-to-point is measured between pairs only.
      if (collective == Collective::kSendRecv && g != 2) continue;
      for (std::int64_t bytes : sizes) {
        const std::int64_t n = std::max<std::int64_t>(g, bytes / 4 / g * g);
        all.barrier();
        run_once(collective, group, a.data(), b.data(), n);  // warm-up: connection set-up, first touch
        backend.synchronize();
        all.barrier();
        auto t0 = clock::now();
        run_once(collective, group, a.data(), b.data(), n);
        backend.synchronize();
        double one = since(t0);
        all.all_reduce(&one, 1, ReduceOp::kMax);
        const int iters = std::clamp(static_cast<int>(std::ceil(min_time_s / kRepeats / std::max(one, 1e-9))), 1, 1000);
        // The fastest of kRepeats timed batches: a shared host's other processes only add time.
        std::vector<double> batches;
        for (int rep = 0; rep < kRepeats; ++rep) {
          all.barrier();
          t0 = clock::now();
          for (int i = 0; i < iters; ++i) run_once(collective, group, a.data(), b.data(), n);
          backend.synchronize();
          double batch = since(t0) / iters;
          group.all_reduce(&batch, 1, ReduceOp::kMax);
          batches.push_back(batch);
        }
        const double per_call = *std::min_element(batches.begin(), batches.end());
        if (runtime.world_rank() == 0) out.push_back({name, to_string(level), g, 4.0 * n, per_call});
        ++done;
        if (progress && runtime.world_rank() == 0) progress(done, total);
      }
    }
  }
  return out;
}

}  // namespace loom::exec::profile
