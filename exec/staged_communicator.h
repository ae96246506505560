// Host-staged communication: a communicator over host memory (MPI) carrying buffers that live in a
// backend's memory (a GPU's), each message copied to the host before the collective or send and back
// after it. DESIGN.md's path for runs whose ranks outnumber the GPUs, where NCCL refuses two ranks on
// one device: `loom run --backend cuda` under mpirun on a one-GPU machine runs every layout this way.
// It is slower than NCCL (each staged message waits for the stream and crosses PCIe twice) and meant
// for correctness, not speed. On the CPU the same copies are memcpy: `loom run --comm host-staged`
// runs this path there, so its tests need no GPU.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "exec/backend.h"
#include "exec/communicator.h"

namespace loom::exec {

class StagedCommunicator final : public Communicator {
 public:
  // `inner` reads and writes host memory only; the backend whose buffers are staged is the one bound by
  // use_backend (until then the buffers are taken to be host memory and pass straight through).
  explicit StagedCommunicator(std::unique_ptr<Communicator> inner);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  void all_reduce(TensorRef data, std::int64_t n, ReduceOp op) override;
  void all_reduce(double* data, std::int64_t n, ReduceOp op) override { inner_->all_reduce(data, n, op); }
  std::unique_ptr<Request> all_reduce_async(TensorRef data, std::int64_t n) override;
  void reduce_scatter(ConstTensorRef send, TensorRef recv, std::int64_t recv_n) override;
  void all_gather(ConstTensorRef send, TensorRef recv, std::int64_t send_n) override;
  std::unique_ptr<Request> all_gather_async(ConstTensorRef send, TensorRef recv, std::int64_t send_n) override;
  void all_to_all(ConstTensorRef send, const std::vector<std::int64_t>& send_counts, TensorRef recv,
                  const std::vector<std::int64_t>& recv_counts) override;
  void all_to_all(const std::int64_t* send, std::int64_t* recv, std::int64_t per_peer) override {
    inner_->all_to_all(send, recv, per_peer);  // host integers
  }
  std::unique_ptr<Request> isend(ConstTensorRef data, std::int64_t n, int peer, int tag) override;
  std::unique_ptr<Request> irecv(TensorRef data, std::int64_t n, int peer, int tag) override;
  void barrier() override { inner_->barrier(); }
  void use_backend(Backend& backend) override { backend_ = &backend; }

  // Host bytes staged so far (both directions), for tests and the run's log.
  std::int64_t staged_bytes() const { return staged_bytes_; }

 private:
  // A host copy of n values of one dtype.
  struct HostBuffer {
    std::vector<unsigned char> bytes;
    DType dtype = DType::kF32;
    TensorRef ref() { return {bytes.data(), dtype}; }
  };
  HostBuffer host_buffer(DType dtype, std::int64_t n);
  HostBuffer download(ConstTensorRef src, std::int64_t n);
  void upload(TensorRef dst, const HostBuffer& host, std::int64_t n);

  std::unique_ptr<Communicator> inner_;
  Backend* backend_ = nullptr;
  std::int64_t staged_bytes_ = 0;
};

}  // namespace loom::exec
