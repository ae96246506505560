#include "exec/staged_communicator.h"

#include <cstring>
#include <functional>
#include <numeric>
#include <utility>

namespace loom::exec {

namespace {

std::int64_t total(const std::vector<std::int64_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
}

}  // namespace

// A staged operation in flight: the inner request over the host copy, and what runs once it completes
// (the upload of received values; for a send nothing). `finish` holds the host copy, which must outlive
// the inner request, and is dropped with it.
class StagedRequest final : public Request {
 public:
  using Finish = std::function<void()>;
  StagedRequest(std::unique_ptr<Request> inner, Finish finish) : inner_(std::move(inner)), finish_(std::move(finish)) {}
  ~StagedRequest() override { wait(); }
  void wait() override {
    if (done_) return;
    inner_->wait();
    complete();
  }
  bool test() override {
    if (done_) return true;
    if (!inner_->test()) return false;
    complete();
    return true;
  }

 private:
  void complete() {
    done_ = true;
    finish_();
    finish_ = nullptr;
  }
  std::unique_ptr<Request> inner_;
  Finish finish_;
  bool done_ = false;
};

StagedCommunicator::StagedCommunicator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}

StagedCommunicator::HostBuffer StagedCommunicator::host_buffer(DType dtype, std::int64_t n) {
  HostBuffer b;
  b.dtype = dtype;
  b.bytes.resize(static_cast<std::size_t>(n) * dtype_bytes(dtype));
  return b;
}

StagedCommunicator::HostBuffer StagedCommunicator::download(ConstTensorRef src, std::int64_t n) {
  HostBuffer b = host_buffer(src.dtype(), n);
  if (backend_ != nullptr)
    backend_->download(b.bytes.data(), src, n);
  else if (n > 0)
    std::memcpy(b.bytes.data(), src.raw(), b.bytes.size());
  staged_bytes_ += static_cast<std::int64_t>(b.bytes.size());
  return b;
}

void StagedCommunicator::upload(TensorRef dst, const HostBuffer& host, std::int64_t n) {
  check_dtype(dst.dtype(), host.dtype, "staged upload");
  if (backend_ != nullptr)
    backend_->upload(dst, host.bytes.data(), n);
  else if (n > 0)
    std::memcpy(dst.raw(), host.bytes.data(), static_cast<std::size_t>(n) * dtype_bytes(dst.dtype()));
  staged_bytes_ += static_cast<std::int64_t>(n) * dtype_bytes(dst.dtype());
}

void StagedCommunicator::all_reduce(TensorRef data, std::int64_t n, ReduceOp op) {
  HostBuffer h = download(data, n);
  inner_->all_reduce(h.ref(), n, op);
  upload(data, h, n);
}

std::unique_ptr<Request> StagedCommunicator::all_reduce_async(TensorRef data, std::int64_t n) {
  auto h = std::make_shared<HostBuffer>(download(data, n));
  auto inner = inner_->all_reduce_async(h->ref(), n);
  return std::make_unique<StagedRequest>(std::move(inner), [this, data, n, h] { upload(data, *h, n); });
}

void StagedCommunicator::reduce_scatter(ConstTensorRef send, TensorRef recv, std::int64_t recv_n) {
  // `recv` may be this rank's block of `send` (the in-place form): the host copies are apart.
  HostBuffer hs = download(send, recv_n * size());
  HostBuffer hr = host_buffer(recv.dtype(), recv_n);
  inner_->reduce_scatter(hs.ref(), hr.ref(), recv_n);
  upload(recv, hr, recv_n);
}

void StagedCommunicator::all_gather(ConstTensorRef send, TensorRef recv, std::int64_t send_n) {
  HostBuffer hs = download(send, send_n);
  HostBuffer hr = host_buffer(recv.dtype(), send_n * size());
  inner_->all_gather(hs.ref(), hr.ref(), send_n);
  upload(recv, hr, send_n * size());
}

std::unique_ptr<Request> StagedCommunicator::all_gather_async(ConstTensorRef send, TensorRef recv,
                                                              std::int64_t send_n) {
  struct Buffers {
    HostBuffer send, recv;
  };
  auto b = std::make_shared<Buffers>();
  b->send = download(send, send_n);
  b->recv = host_buffer(recv.dtype(), send_n * size());
  auto inner = inner_->all_gather_async(b->send.ref(), b->recv.ref(), send_n);
  const std::int64_t n = send_n * size();
  return std::make_unique<StagedRequest>(std::move(inner), [this, recv, n, b] { upload(recv, b->recv, n); });
}

void StagedCommunicator::all_to_all(ConstTensorRef send, const std::vector<std::int64_t>& send_counts, TensorRef recv,
                                    const std::vector<std::int64_t>& recv_counts) {
  HostBuffer hs = download(send, total(send_counts));
  HostBuffer hr = host_buffer(recv.dtype(), total(recv_counts));
  inner_->all_to_all(hs.ref(), send_counts, hr.ref(), recv_counts);
  upload(recv, hr, total(recv_counts));
}

std::unique_ptr<Request> StagedCommunicator::isend(ConstTensorRef data, std::int64_t n, int peer, int tag) {
  auto h = std::make_shared<HostBuffer>(download(data, n));
  auto inner = inner_->isend(h->ref(), n, peer, tag);
  return std::make_unique<StagedRequest>(std::move(inner), [h] {});
}

std::unique_ptr<Request> StagedCommunicator::irecv(TensorRef data, std::int64_t n, int peer, int tag) {
  auto h = std::make_shared<HostBuffer>(host_buffer(data.dtype(), n));
  auto inner = inner_->irecv(h->ref(), n, peer, tag);
  return std::make_unique<StagedRequest>(std::move(inner), [this, data, n, h] { upload(data, *h, n); });
}

}  // namespace loom::exec
