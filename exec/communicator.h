// Communicator: collectives and point-to-point messages within one process group (TP, DP, PP or
// the whole world). MPI implements it here; NCCL slots in behind the same calls on GPU clusters.
// Buffers are typed views of backend memory (host memory for MPI+cpu, device memory for NCCL+cuda);
// fp32 and bf16 reduce as sums of their values (bf16 through a user-defined MPI op).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "exec/tensor.h"

namespace loom::exec {

enum class ReduceOp { kSum, kMax };

// An operation in flight; wait() completes it. Destroying an unfinished request waits for it.
class Request {
 public:
  virtual ~Request() = default;
  virtual void wait() = 0;
  // True once complete (never blocks).
  virtual bool test() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "tp", "dp", "pp", "world", "embedding"

  virtual void all_reduce(TensorRef data, std::int64_t n, ReduceOp op) = 0;
  virtual void all_reduce(double* data, std::int64_t n, ReduceOp op) = 0;
  virtual std::unique_ptr<Request> all_reduce_async(TensorRef data, std::int64_t n) = 0;
  // send holds size()·recv_n values; rank r receives the sum of everyone's block r. recv may be
  // this rank's own block of send (in place, NCCL's convention): no second buffer is needed.
  virtual void reduce_scatter(ConstTensorRef send, TensorRef recv, std::int64_t recv_n) = 0;
  // recv receives size()·send_n values, block r from rank r; send may be this rank's own block.
  virtual void all_gather(ConstTensorRef send, TensorRef recv, std::int64_t send_n) = 0;
  // The same, non-blocking: recv is complete once the request is (ZeRO-3's prefetch).
  virtual std::unique_ptr<Request> all_gather_async(ConstTensorRef send, TensorRef recv, std::int64_t send_n) = 0;
  // Personalised all-to-all (MPI_Alltoallv; expert parallelism's token dispatch and combine): `send` holds
  // one block per rank back to back in rank order, send_counts[p] values for rank p, which receives it as
  // block rank() of its `recv` (blocks back to back, recv_counts[q] values from rank q).
  virtual void all_to_all(ConstTensorRef send, const std::vector<std::int64_t>& send_counts, TensorRef recv,
                          const std::vector<std::int64_t>& recv_counts) = 0;
  // `per_peer` host integers to every rank: send[p·per_peer, +per_peer) to rank p, received from rank q
  // into recv[q·per_peer, +per_peer) (the counts an all_to_all of values needs).
  virtual void all_to_all(const std::int64_t* send, std::int64_t* recv, std::int64_t per_peer) = 0;
  virtual std::unique_ptr<Request> isend(ConstTensorRef data, std::int64_t n, int peer, int tag) = 0;
  virtual std::unique_ptr<Request> irecv(TensorRef data, std::int64_t n, int peer, int tag) = 0;
  // One step of a ring (context parallelism's key/value blocks): n values of `send` to rank `to` and n
  // values from rank `from` into `recv`, both complete once the request is. Non-blocking sends and
  // receives here; a group of one copies send to recv.
  virtual std::unique_ptr<Request> exchange(ConstTensorRef send, TensorRef recv, std::int64_t n, int to, int from,
                                            int tag);
  virtual void barrier() = 0;
  // The backend whose memory the buffers are: a group of one copies through it (device memory on a GPU).
  virtual void use_backend(Backend& /*backend*/) {}
};

// A group of one: every collective is a copy. Used for size-1 groups and for builds without MPI.
class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(std::string name) : name_(std::move(name)) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return name_; }
  void all_reduce(TensorRef, std::int64_t, ReduceOp) override {}
  void all_reduce(double*, std::int64_t, ReduceOp) override {}
  std::unique_ptr<Request> all_reduce_async(TensorRef, std::int64_t) override;
  void reduce_scatter(ConstTensorRef send, TensorRef recv, std::int64_t recv_n) override;
  void all_gather(ConstTensorRef send, TensorRef recv, std::int64_t send_n) override;
  std::unique_ptr<Request> all_gather_async(ConstTensorRef send, TensorRef recv, std::int64_t send_n) override;
  void all_to_all(ConstTensorRef send, const std::vector<std::int64_t>& send_counts, TensorRef recv,
                  const std::vector<std::int64_t>& recv_counts) override;
  void all_to_all(const std::int64_t* send, std::int64_t* recv, std::int64_t per_peer) override;
  std::unique_ptr<Request> isend(ConstTensorRef, std::int64_t, int, int) override;
  std::unique_ptr<Request> irecv(TensorRef, std::int64_t, int, int) override;
  std::unique_ptr<Request> exchange(ConstTensorRef send, TensorRef recv, std::int64_t n, int to, int from,
                                    int tag) override;
  void barrier() override {}
  void use_backend(Backend& backend) override { backend_ = &backend; }

 private:
  void copy_values(ConstTensorRef send, TensorRef recv, std::int64_t n);
  std::string name_;
  Backend* backend_ = nullptr;  // null: host memory, copied with memmove
};

// Waits for every request in the list and clears it.
void wait_all(std::vector<std::unique_ptr<Request>>& requests);

}  // namespace loom::exec
