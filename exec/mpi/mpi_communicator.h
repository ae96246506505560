// MPI communicator (built when LOOM_HAVE_MPI): collectives and non-blocking point-to-point over an
// MPI_Comm, process groups cut from MPI_COMM_WORLD with MPI_Comm_split, and MPI_CHECK. Every
// collective is counted and every blocking wait recorded in CommActivity, for the watchdog.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "exec/communicator.h"

// Reports file, line and MPI's own message, then aborts the job: an MPI error mid-collective leaves
// peers waiting, so there is no safe way to continue.
#define MPI_CHECK(call)                                                                                       \
  do {                                                                                                        \
    const int loom_mpi_status_ = (call);                                                                      \
    if (loom_mpi_status_ != MPI_SUCCESS) ::loom::exec::mpi_fail(loom_mpi_status_, #call, __FILE__, __LINE__); \
  } while (0)

namespace loom::exec {

[[noreturn]] void mpi_fail(int status, const char* call, const char* file, int line);

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed on destruction unless it is MPI_COMM_WORLD).
  MpiCommunicator(MPI_Comm comm, std::string name);
  ~MpiCommunicator() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }
  MPI_Comm comm() const { return comm_; }
  // The members' ranks in MPI_COMM_WORLD, by rank in this group.
  const std::vector<int>& world_ranks() const { return world_ranks_; }

  void all_reduce(TensorRef data, std::int64_t n, ReduceOp op) override;
  void all_reduce(double* data, std::int64_t n, ReduceOp op) override;
  std::unique_ptr<Request> all_reduce_async(TensorRef data, std::int64_t n) override;
  void reduce_scatter(ConstTensorRef send, TensorRef recv, std::int64_t recv_n) override;
  void all_gather(ConstTensorRef send, TensorRef recv, std::int64_t send_n) override;
  std::unique_ptr<Request> all_gather_async(ConstTensorRef send, TensorRef recv, std::int64_t send_n) override;
  void all_to_all(ConstTensorRef send, const std::vector<std::int64_t>& send_counts, TensorRef recv,
                  const std::vector<std::int64_t>& recv_counts) override;
  void all_to_all(const std::int64_t* send, std::int64_t* recv, std::int64_t per_peer) override;
  std::unique_ptr<Request> isend(ConstTensorRef data, std::int64_t n, int peer, int tag) override;
  std::unique_ptr<Request> irecv(TensorRef data, std::int64_t n, int peer, int tag) override;
  void barrier() override;

  // The sub-group of ranks sharing `color`, ordered by `key`.
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) const;

 private:
  MPI_Comm comm_;
  std::string name_;
  int rank_ = 0, size_ = 1;
  std::vector<int> world_ranks_;
};

}  // namespace loom::exec
