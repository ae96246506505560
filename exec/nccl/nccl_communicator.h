// NCCL communicator (built when LOOM_WITH_NCCL: CUDA, NCCL and MPI found): the collectives and messages
// of one process group on a GPU's buffers, GPU to GPU, for `loom run --backend cuda` with one rank per
// GPU. Host-only header (no CUDA or NCCL includes).
//
// Bootstrap (as nccl-tests does): rank 0 of the group's MPI communicator asks NCCL for a unique id,
// broadcasts it over that communicator, and every member calls ncclCommInitRank. Every rank makes its
// communicators in one order (process_groups.h's communicate_over_nccl), so that no init waits on a rank
// that is itself waiting in another. The MPI communicator stays inside: it carries the host-memory
// overloads (the double all-reduce, the int64 all-to-all) and the barrier, and it is the watchdog's view
// of the group (its members' world ranks).
//
// Streams: each NCCL communicator has a stream of its own. An operation records an event on the backend's
// compute stream (CudaBackend::stream(), bound by use_backend), makes its stream wait for it, queues the
// NCCL call and records a done event. A blocking call returns once the compute stream waits for that done
// event — the host does not wait — so what the compute stream queues next reads the result; an
// asynchronous one's Request::wait() does the same, and test() asks the done event (cudaEventQuery). The
// host reads device memory only through the backend's to_host/download, which wait for the compute
// stream and so for every operation it was made to wait for.
//
// Point-to-point: NCCL pairs a send with a receive by order, not by tag (MPI's notion, ignored here):
// the k-th message a rank sends to a peer is the peer's k-th receive from it. The executor's pairing is
// order-consistent: with LOOM_TEST_P2P_BY_ORDER set every MPI message carries one tag, so MPI pairs by
// order too, and the pipelines and the ring give the tagged run's losses (staged_comm_test's
// MessagesByOrder, on the CPU). A send and a receive queued on one NCCL communicator run one
// after the other, so two ranks each sending before receiving would wait for each other once a message
// is larger than NCCL's buffers; the pipeline does exactly that (1F1B: a stage's next activation goes out
// before the previous gradient comes in). Each direction between ring neighbours (rank r to r + 1 and to
// r − 1, modulo the size) therefore has an NCCL communicator of its own, of two ranks, where only one of
// them sends: made for the groups that send messages (the pipeline's and context parallelism's), on
// request (`point_to_point`). A message to another rank is refused (std::logic_error).
//
// Watchdog: each communicator is a CommActivity::DeviceQueue. Its collectives are numbered in the group
// like the MPI communicator's, and its oldest operation whose done event has not completed is what the
// MPI watchdog (exec/mpi/mpi_watchdog.h) reports once it is older than --comm-timeout; an asynchronous
// NCCL error (ncclCommGetAsyncError) ends the job at once. Before the job ends every communicator is
// abandoned with ncclCommAbort.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "exec/comm_activity.h"
#include "exec/communicator.h"
#include "exec/mpi/mpi_communicator.h"

struct CUstream_st;  // cudaStream_t
struct CUevent_st;   // cudaEvent_t

namespace loom::exec {

class NcclCommunicator final : public Communicator, private CommActivity::DeviceQueue {
 public:
  // Collective over `group`'s members, on the current device (one device per member: NCCL refuses two
  // members on one GPU). `point_to_point`: also make the channels isend/irecv/exchange use.
  NcclCommunicator(std::unique_ptr<MpiCommunicator> group, bool point_to_point);
  // Waits for the queued work and destroys the NCCL communicators (collective: every member destroys
  // its communicators in the same order).
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return mpi_->rank(); }
  int size() const override { return mpi_->size(); }
  std::string name() const override { return mpi_->name(); }

  void all_reduce(TensorRef data, std::int64_t n, ReduceOp op) override;
  void all_reduce(double* data, std::int64_t n, ReduceOp op) override { mpi_->all_reduce(data, n, op); }
  std::unique_ptr<Request> all_reduce_async(TensorRef data, std::int64_t n) override;
  void reduce_scatter(ConstTensorRef send, TensorRef recv, std::int64_t recv_n) override;
  void all_gather(ConstTensorRef send, TensorRef recv, std::int64_t send_n) override;
  std::unique_ptr<Request> all_gather_async(ConstTensorRef send, TensorRef recv, std::int64_t send_n) override;
  void all_to_all(ConstTensorRef send, const std::vector<std::int64_t>& send_counts, TensorRef recv,
                  const std::vector<std::int64_t>& recv_counts) override;
  void all_to_all(const std::int64_t* send, std::int64_t* recv, std::int64_t per_peer) override {
    mpi_->all_to_all(send, recv, per_peer);  // host integers
  }
  // `tag` is not used: NCCL matches by order (see above).
  std::unique_ptr<Request> isend(ConstTensorRef data, std::int64_t n, int peer, int tag) override;
  std::unique_ptr<Request> irecv(TensorRef data, std::int64_t n, int peer, int tag) override;
  // A group of one copies on the compute stream; otherwise a receive and a send on their channels.
  std::unique_ptr<Request> exchange(ConstTensorRef send, TensorRef recv, std::int64_t n, int to, int from,
                                    int tag) override;
  // Every member's host reaches it (MPI); device work is not waited for.
  void barrier() override { mpi_->barrier(); }
  // Must be the CUDA backend on this communicator's device: its compute stream orders every operation.
  void use_backend(Backend& backend) override;

  const MpiCommunicator& mpi() const { return *mpi_; }
  // Operations queued whose done event has not been seen complete (polls them first).
  std::size_t unfinished_operations();

 private:
  struct Op;
  struct Lane;
  class PendingRequest;

  std::unique_ptr<Lane> make_lane(int ranks, const void* unique_id, int rank);
  void make_channels();
  Lane& channel(std::map<int, std::unique_ptr<Lane>>& lanes, int peer, const char* op);
  // Queues `body` on `lane`'s stream after the compute stream's work so far, with a done event.
  std::shared_ptr<Op> enqueue(Lane& lane, const char* op, std::int64_t seq, std::vector<int> ranks,
                              const std::function<void(CUstream_st*)>& body);
  // The compute stream waits for the operation (a blocking call's return).
  void join(const Op& op);
  void check_device_memory(const void* p, std::int64_t bytes, const char* op) const;
  // Drops the finished operations at the front of a lane (its stream completes them in order).
  static void retire(Lane& lane);

  // CommActivity::DeviceQueue, asked from the watchdog's thread.
  std::optional<Pending> oldest_pending() override;
  std::string async_error() override;
  void abort() override;

  std::unique_ptr<MpiCommunicator> mpi_;
  int device_ = 0;
  Backend* backend_ = nullptr;
  CUstream_st* compute_ = nullptr;
  CUevent_st* ready_ = nullptr;  // recorded on the compute stream before each operation
  std::unique_ptr<Lane> group_;  // every member
  // Point-to-point channels to ring neighbours, by peer (this group's rank): this rank sends on the first,
  // receives on the second.
  std::map<int, std::unique_ptr<Lane>> send_to_, recv_from_;
  std::vector<Lane*> lanes_;  // in the order made, which is the order they are destroyed in
  std::mutex mutex_;          // the lanes' pending lists: the training thread queues, the watchdog asks
  std::atomic<bool> aborted_{false};
};

}  // namespace loom::exec
