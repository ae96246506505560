// The NCCL communicator: bootstrap over MPI, one stream per NCCL communicator ordered after the
// compute stream by events, the operations, and what the watchdog asks (exec/nccl/nccl_communicator.h).
#include "exec/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "exec/backend.h"
#include "exec/cuda/cuda_backend.h"
#include "exec/nccl/nccl_check.h"
#include "kernels/cuda_check.h"

namespace loom::exec {

namespace {

// Set once the watchdog abandons the communicators: NCCL calls failing after that are its doing.
std::atomic<bool> g_aborting{false};

// The training thread meets a communicator the watchdog has abandoned: the watchdog is ending the job
// (exit kExitCommunicationTimeout, its own line said); reporting this as a failure would race it.
[[noreturn]] void park() {
  while (true) std::this_thread::sleep_for(std::chrono::hours(1));
}

// The MPI tag of the unique ids sent to a channel's receiver while the channels are made (before any
// other message of the group's MPI communicator: nothing else is sent on it point to point).
constexpr int kBootstrapTag = 0x4e43;

ncclDataType_t nccl_type(DType d, const std::string& group, const char* op) {
  if (d == DType::kF32) return ncclFloat32;
  if (d == DType::kBF16) return ncclBfloat16;
  // The executor trains in fp32 and bf16 (FP8 is planned, not run: core/, not exec/): no other dtype is ever
  // communicated, by any communicator.
  throw std::logic_error(fmt::format("NCCL {} {}: {} buffers are never communicated (the executor's are fp32 or bf16)",
                                     group, op, to_string(d)));
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }

std::size_t count_of(std::int64_t n) {
  if (n < 0) throw std::logic_error("NCCL operation with a negative count");
  return static_cast<std::size_t>(n);
}

// True once the work before `event` is complete; never blocks.
bool finished(cudaEvent_t event) {
  const cudaError_t status = cudaEventQuery(event);
  if (status == cudaErrorNotReady) return false;
  CUDA_CHECK(status);
  return true;
}

class DoneRequest final : public Request {
 public:
  void wait() override {}
  bool test() override { return true; }
};

}  // namespace

void nccl_fail(ncclResult_t status, const char* call, const char* file, int line) {
  if (g_aborting) park();
  const char* last = ncclGetLastError(nullptr);
  std::fprintf(stderr, "loom: NCCL error at %s:%d: %s: %s%s%s\n", file, line, call, ncclGetErrorString(status),
               last != nullptr && *last != 0 ? ": " : "", last != nullptr ? last : "");
  std::fflush(stderr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

// One operation queued on a lane: what the watchdog names it, and its done event.
struct NcclCommunicator::Op {
  const char* op = "";
  std::int64_t seq = 0;    // the group's collective number; 0: a message
  std::vector<int> ranks;  // world ranks taking part (the members, or the peer)
  CommActivity::Clock::time_point since;
  int step = 0;
  cudaEvent_t done = nullptr;
  Op() = default;
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;
  ~Op() {
    if (done != nullptr) cudaEventDestroy(done);  // released by CUDA once the work before it completes
  }
};

// An NCCL communicator with its stream and the operations queued on it that are not yet seen complete.
struct NcclCommunicator::Lane {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  std::deque<std::shared_ptr<Op>> pending;
};

// An operation in flight: wait() makes the compute stream wait for it (the host goes on); test() asks
// its done event. Destroyed unfinished, it waits as wait() does, so the memory it reads or writes is
// reused only by work queued after it.
class NcclCommunicator::PendingRequest final : public Request {
 public:
  PendingRequest(std::shared_ptr<Op> op, NcclCommunicator& owner) : op_(std::move(op)), owner_(owner) {}
  ~PendingRequest() override { wait(); }
  PendingRequest(const PendingRequest&) = delete;
  PendingRequest& operator=(const PendingRequest&) = delete;
  void wait() override {
    if (op_ == nullptr) return;
    owner_.join(*op_);
    op_.reset();
  }
  bool test() override {
    if (op_ == nullptr) return true;
    if (!finished(op_->done)) return false;
    op_.reset();  // complete: the compute stream needs no wait for it
    return true;
  }

 private:
  std::shared_ptr<Op> op_;
  NcclCommunicator& owner_;
};

// --- making and destroying ---------------------------------------------------------------------------

NcclCommunicator::NcclCommunicator(std::unique_ptr<MpiCommunicator> group, bool point_to_point)
    : mpi_(std::move(group)) {
  CUDA_CHECK(cudaGetDevice(&device_));
  CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  ncclUniqueId id{};
  if (rank() == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_CHECK(MPI_Bcast(&id, static_cast<int>(sizeof id), MPI_BYTE, 0, mpi_->comm()));
  group_ = make_lane(size(), &id, rank());
  if (point_to_point && size() > 1) make_channels();
  CommActivity::process().attach(*this);
}

std::unique_ptr<NcclCommunicator::Lane> NcclCommunicator::make_lane(int ranks, const void* unique_id, int rank) {
  auto lane = std::make_unique<Lane>();
  ncclUniqueId id;
  std::memcpy(&id, unique_id, sizeof id);
  NCCL_CHECK(ncclCommInitRank(&lane->comm, ranks, id, rank));
  CUDA_CHECK(cudaStreamCreateWithFlags(&lane->stream, cudaStreamNonBlocking));
  lanes_.push_back(lane.get());
  return lane;
}

void NcclCommunicator::make_channels() {
  // Every directed edge between ring neighbours, in one order on every rank: each rank makes the ones
  // it is an end of in that order, so the edge first in the order whose communicator is not made yet
  // always has both ends at it (ncclCommInitRank waits for both), and none waits in a cycle.
  const int n = size(), me = rank();
  std::vector<std::pair<int, int>> edges;  // (from, to)
  for (int r = 0; r < n; ++r) {
    edges.emplace_back(r, (r + 1) % n);
    edges.emplace_back(r, (r + n - 1) % n);
  }
  std::sort(edges.begin(), edges.end());
  edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
  for (const auto& [from, to] : edges) {
    if (from != me && to != me) continue;
    ncclUniqueId id{};
    if (from == me) {
      NCCL_CHECK(ncclGetUniqueId(&id));
      MPI_CHECK(MPI_Send(&id, static_cast<int>(sizeof id), MPI_BYTE, to, kBootstrapTag, mpi_->comm()));
    } else {
      MPI_CHECK(
          MPI_Recv(&id, static_cast<int>(sizeof id), MPI_BYTE, from, kBootstrapTag, mpi_->comm(), MPI_STATUS_IGNORE));
    }
    // The sender is rank 0 of the channel, the receiver rank 1.
    if (from == me)
      send_to_[to] = make_lane(2, &id, 0);
    else
      recv_from_[from] = make_lane(2, &id, 1);
  }
}

NcclCommunicator::~NcclCommunicator() {
  CommActivity::process().detach(*this);
  if (aborted_) return;  // the job is ending: what ncclCommAbort left is not touched again
  for (Lane* lane : lanes_) CUDA_CHECK(cudaStreamSynchronize(lane->stream));
  for (Lane* lane : lanes_) {
    NCCL_CHECK(ncclCommDestroy(lane->comm));
    CUDA_CHECK(cudaStreamDestroy(lane->stream));
  }
  cudaEventDestroy(ready_);
}

void NcclCommunicator::use_backend(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (cuda == nullptr)
    throw std::logic_error(
        fmt::format("NCCL communicator {}: bound to the {} backend, but NCCL reads device memory "
                    "(--backend cuda)",
                    name(), backend.name()));
  if (cuda->device() != device_)
    throw std::logic_error(fmt::format("NCCL communicator {}: made on device {}, bound to a backend on device {}",
                                       name(), device_, cuda->device()));
  backend_ = &backend;
  compute_ = cuda->stream();
}

// --- queueing ------------------------------------------------------------------------------------------

void NcclCommunicator::retire(Lane& lane) {
  while (!lane.pending.empty() && finished(lane.pending.front()->done)) lane.pending.pop_front();
}

std::shared_ptr<NcclCommunicator::Op> NcclCommunicator::enqueue(Lane& lane, const char* op, std::int64_t seq,
                                                                std::vector<int> ranks,
                                                                const std::function<void(CUstream_st*)>& body) {
  if (compute_ == nullptr)
    throw std::logic_error(
        fmt::format("NCCL communicator {}: {} before use_backend bound the CUDA backend", name(), op));
  if (aborted_) park();
  auto record = std::make_shared<Op>();
  record->op = op;
  record->seq = seq;
  record->ranks = std::move(ranks);
  record->since = CommActivity::Clock::now();
  record->step = CommActivity::process().step();
  CUDA_CHECK(cudaEventRecord(ready_, compute_));
  CUDA_CHECK(cudaStreamWaitEvent(lane.stream, ready_, 0));
  body(lane.stream);
  CUDA_CHECK(cudaEventCreateWithFlags(&record->done, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(record->done, lane.stream));
  const std::lock_guard<std::mutex> lock(mutex_);
  retire(lane);
  lane.pending.push_back(record);
  return record;
}

void NcclCommunicator::join(const Op& op) { CUDA_CHECK(cudaStreamWaitEvent(compute_, op.done, 0)); }

void NcclCommunicator::check_device_memory(const void* p, std::int64_t bytes, const char* op) const {
  if (bytes == 0) return;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    a.type = cudaMemoryTypeUnregistered;
  }
  if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
    throw std::logic_error(
        fmt::format("NCCL {} {}: a buffer is host memory; NCCL reads and writes device memory "
                    "(allocate it through the CUDA backend)",
                    name(), op));
}

NcclCommunicator::Lane& NcclCommunicator::channel(std::map<int, std::unique_ptr<Lane>>& lanes, int peer,
                                                  const char* op) {
  if (size() == 1) throw std::logic_error(fmt::format("point-to-point {} in a group of one ({})", op, name()));
  const auto it = lanes.find(peer);
  if (it != lanes.end()) return *it->second;
  if (send_to_.empty())
    throw std::logic_error(
        fmt::format("NCCL {} {} to or from rank {}: this group's communicator was made without point-to-point "
                    "channels (communicate_over_nccl makes them for the pp and cp groups)",
                    name(), op, peer));
  throw std::logic_error(
      fmt::format("NCCL {} {} to or from rank {} of {}: messages go only between ring neighbours "
                  "(rank {} sends to and receives from ranks {} and {})",
                  name(), op, peer, size(), rank(), (rank() + 1) % size(), (rank() + size() - 1) % size()));
}

// --- collectives ---------------------------------------------------------------------------------------

void NcclCommunicator::all_reduce(TensorRef data, std::int64_t n, ReduceOp op) {
  const ncclDataType_t type = nccl_type(data.dtype(), name(), "all_reduce");
  check_device_memory(data.raw(), n, "all_reduce");
  const std::int64_t seq = CommActivity::process().issue(name());
  if (n == 0) return;
  join(*enqueue(*group_, "all_reduce", seq, mpi_->world_ranks(), [&](cudaStream_t s) {
    NCCL_CHECK(ncclAllReduce(data.raw(), data.raw(), count_of(n), type, nccl_op(op), group_->comm, s));
  }));
}

std::unique_ptr<Request> NcclCommunicator::all_reduce_async(TensorRef data, std::int64_t n) {
  const ncclDataType_t type = nccl_type(data.dtype(), name(), "all_reduce");
  check_device_memory(data.raw(), n, "all_reduce");
  const std::int64_t seq = CommActivity::process().issue(name());
  if (n == 0) return std::make_unique<DoneRequest>();
  return std::make_unique<PendingRequest>(
      enqueue(*group_, "all_reduce", seq, mpi_->world_ranks(),
              [&](cudaStream_t s) {
                NCCL_CHECK(ncclAllReduce(data.raw(), data.raw(), count_of(n), type, ncclSum, group_->comm, s));
              }),
      *this);
}

// In place when recv is this rank's block of send: NCCL's own convention, so no case is needed.
void NcclCommunicator::reduce_scatter(ConstTensorRef send, TensorRef recv, std::int64_t recv_n) {
  check_dtype(recv.dtype(), send.dtype(), "reduce_scatter");
  const ncclDataType_t type = nccl_type(recv.dtype(), name(), "reduce_scatter");
  check_device_memory(send.raw(), recv_n * size(), "reduce_scatter");
  check_device_memory(recv.raw(), recv_n, "reduce_scatter");
  const std::int64_t seq = CommActivity::process().issue(name());
  if (recv_n == 0) return;
  join(*enqueue(*group_, "reduce_scatter", seq, mpi_->world_ranks(), [&](cudaStream_t s) {
    NCCL_CHECK(ncclReduceScatter(send.raw(), recv.raw(), count_of(recv_n), type, ncclSum, group_->comm, s));
  }));
}

// In place when send is this rank's block of recv: NCCL's convention too.
void NcclCommunicator::all_gather(ConstTensorRef send, TensorRef recv, std::int64_t send_n) {
  all_gather_async(send, recv, send_n)->wait();
}

std::unique_ptr<Request> NcclCommunicator::all_gather_async(ConstTensorRef send, TensorRef recv, std::int64_t send_n) {
  check_dtype(recv.dtype(), send.dtype(), "all_gather");
  const ncclDataType_t type = nccl_type(recv.dtype(), name(), "all_gather");
  check_device_memory(send.raw(), send_n, "all_gather");
  check_device_memory(recv.raw(), send_n * size(), "all_gather");
  const std::int64_t seq = CommActivity::process().issue(name());
  if (send_n == 0) return std::make_unique<DoneRequest>();
  return std::make_unique<PendingRequest>(
      enqueue(*group_, "all_gather", seq, mpi_->world_ranks(),
              [&](cudaStream_t s) {
                NCCL_CHECK(ncclAllGather(send.raw(), recv.raw(), count_of(send_n), type, group_->comm, s));
              }),
      *this);
}

void NcclCommunicator::all_to_all(ConstTensorRef send, const std::vector<std::int64_t>& send_counts, TensorRef recv,
                                  const std::vector<std::int64_t>& recv_counts) {
  check_dtype(recv.dtype(), send.dtype(), "all_to_all");
  const ncclDataType_t type = nccl_type(recv.dtype(), name(), "all_to_all");
  if (send_counts.size() != static_cast<std::size_t>(size()) || recv_counts.size() != static_cast<std::size_t>(size()))
    throw std::logic_error("all_to_all in " + name() + ": one count per rank is needed");
  std::int64_t send_total = 0, recv_total = 0;
  for (int p = 0; p < size(); ++p) {
    send_total += send_counts[p];
    recv_total += recv_counts[p];
  }
  check_device_memory(send.raw(), send_total, "all_to_all");
  check_device_memory(recv.raw(), recv_total, "all_to_all");
  const std::int64_t seq = CommActivity::process().issue(name());
  if (send_total == 0 && recv_total == 0) return;
  // One group of sends and receives (MPI_Alltoallv's meaning); a count of 0 is skipped on both sides
  // alike, since rank p's count to q is q's count from p.
  join(*enqueue(*group_, "all_to_all", seq, mpi_->world_ranks(), [&](cudaStream_t s) {
    NCCL_CHECK(ncclGroupStart());
    std::int64_t s_at = 0, r_at = 0;
    for (int p = 0; p < size(); ++p) {
      if (send_counts[p] > 0)
        NCCL_CHECK(ncclSend((send + s_at).raw(), count_of(send_counts[p]), type, p, group_->comm, s));
      if (recv_counts[p] > 0)
        NCCL_CHECK(ncclRecv((recv + r_at).raw(), count_of(recv_counts[p]), type, p, group_->comm, s));
      s_at += send_counts[p];
      r_at += recv_counts[p];
    }
    NCCL_CHECK(ncclGroupEnd());
  }));
}

// --- messages ------------------------------------------------------------------------------------------

std::unique_ptr<Request> NcclCommunicator::isend(ConstTensorRef data, std::int64_t n, int peer, int /*tag*/) {
  Lane& lane = channel(send_to_, peer, "send");
  const ncclDataType_t type = nccl_type(data.dtype(), name(), "isend");
  check_device_memory(data.raw(), n, "isend");
  if (n == 0) return std::make_unique<DoneRequest>();  // the receiver's count is 0 too: skipped there alike
  return std::make_unique<PendingRequest>(
      enqueue(lane, "send", 0, {mpi_->world_ranks().at(peer)},
              [&](cudaStream_t s) { NCCL_CHECK(ncclSend(data.raw(), count_of(n), type, 1, lane.comm, s)); }),
      *this);
}

std::unique_ptr<Request> NcclCommunicator::irecv(TensorRef data, std::int64_t n, int peer, int /*tag*/) {
  Lane& lane = channel(recv_from_, peer, "receive");
  const ncclDataType_t type = nccl_type(data.dtype(), name(), "irecv");
  check_device_memory(data.raw(), n, "irecv");
  if (n == 0) return std::make_unique<DoneRequest>();
  return std::make_unique<PendingRequest>(
      enqueue(lane, "recv", 0, {mpi_->world_ranks().at(peer)},
              [&](cudaStream_t s) { NCCL_CHECK(ncclRecv(data.raw(), count_of(n), type, 0, lane.comm, s)); }),
      *this);
}

std::unique_ptr<Request> NcclCommunicator::exchange(ConstTensorRef send, TensorRef recv, std::int64_t n, int to,
                                                    int from, int tag) {
  if (size() > 1) return Communicator::exchange(send, recv, n, to, from, tag);
  if (to != 0 || from != 0) throw std::logic_error("exchange in a group of one (" + name() + ") with another rank");
  if (backend_ == nullptr)
    throw std::logic_error(
        fmt::format("NCCL communicator {}: exchange before use_backend bound the CUDA backend", name()));
  check_dtype(recv.dtype(), send.dtype(), "exchange");
  if (send.raw() != recv.raw()) backend_->copy(recv, send, n);
  return std::make_unique<DoneRequest>();
}

// --- what the watchdog asks ------------------------------------------------------------------------------

std::size_t NcclCommunicator::unfinished_operations() {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::size_t n = 0;
  for (Lane* lane : lanes_) {
    retire(*lane);
    n += lane->pending.size();
  }
  return n;
}

std::optional<CommActivity::DeviceQueue::Pending> NcclCommunicator::oldest_pending() {
  if (aborted_) return std::nullopt;
  // The watchdog's thread: the events belong to this device (a no-op once it is current).
  CUDA_CHECK(cudaSetDevice(device_));
  const std::lock_guard<std::mutex> lock(mutex_);
  std::optional<Pending> oldest;
  for (Lane* lane : lanes_) {
    retire(*lane);
    if (lane->pending.empty()) continue;
    const Op& op = *lane->pending.front();
    if (!oldest || op.since < oldest->wait.since) {
      Pending p;
      p.wait.group = name();
      p.wait.op = op.op;
      p.wait.seq = op.seq;
      p.wait.ranks = op.ranks;
      p.wait.since = op.since;
      p.step = op.step;
      oldest = std::move(p);
    }
  }
  return oldest;
}

std::string NcclCommunicator::async_error() {
  if (aborted_) return {};
  for (Lane* lane : lanes_) {
    ncclResult_t error = ncclSuccess;
    if (ncclCommGetAsyncError(lane->comm, &error) != ncclSuccess) continue;
    if (error != ncclSuccess && error != ncclInProgress) {
      const char* last = ncclGetLastError(lane->comm);
      return fmt::format("NCCL reported an error on {}: {}{}{}", name(), ncclGetErrorString(error),
                         last != nullptr && *last != 0 ? ": " : "", last != nullptr ? last : "");
    }
  }
  return {};
}

void NcclCommunicator::abort() {
  g_aborting = true;
  if (aborted_.exchange(true)) return;
  for (Lane* lane : lanes_) ncclCommAbort(lane->comm);  // the job is ending: a failure here changes nothing
}

}  // namespace loom::exec
