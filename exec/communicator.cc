#include "exec/communicator.h"

#include "exec/backend.h"

#include <cstring>
#include <stdexcept>
#include <utility>

namespace loom::exec {

namespace {
class DoneRequest final : public Request {
 public:
  void wait() override {}
  bool test() override { return true; }
};

// A send and a receive that complete together.
class PairRequest final : public Request {
 public:
  PairRequest(std::unique_ptr<Request> send, std::unique_ptr<Request> recv)
      : send_(std::move(send)), recv_(std::move(recv)) {}
  void wait() override {
    send_->wait();
    recv_->wait();
  }
  bool test() override { return send_->test() && recv_->test(); }

 private:
  std::unique_ptr<Request> send_, recv_;
};
}  // namespace

std::unique_ptr<Request> Communicator::exchange(ConstTensorRef send, TensorRef recv, std::int64_t n, int to, int from,
                                                int tag) {
  auto r = irecv(recv, n, from, tag);  // posted first, so the peer's send finds it
  return std::make_unique<PairRequest>(isend(send, n, to, tag), std::move(r));
}

std::unique_ptr<Request> SelfCommunicator::all_reduce_async(TensorRef, std::int64_t) {
  return std::make_unique<DoneRequest>();
}

void SelfCommunicator::copy_values(ConstTensorRef send, TensorRef recv, std::int64_t n) {
  check_dtype(recv.dtype(), send.dtype(), "collective");
  if (send.raw() == recv.raw()) return;
  if (backend_ != nullptr)
    backend_->copy(recv, send, n);
  else
    std::memmove(recv.raw(), send.raw(), static_cast<std::size_t>(n * dtype_bytes(recv.dtype())));
}

void SelfCommunicator::reduce_scatter(ConstTensorRef send, TensorRef recv, std::int64_t recv_n) {
  copy_values(send, recv, recv_n);
}

void SelfCommunicator::all_gather(ConstTensorRef send, TensorRef recv, std::int64_t send_n) {
  copy_values(send, recv, send_n);
}

std::unique_ptr<Request> SelfCommunicator::all_gather_async(ConstTensorRef send, TensorRef recv, std::int64_t send_n) {
  all_gather(send, recv, send_n);
  return std::make_unique<DoneRequest>();
}

void SelfCommunicator::all_to_all(ConstTensorRef send, const std::vector<std::int64_t>& send_counts, TensorRef recv,
                                  const std::vector<std::int64_t>& recv_counts) {
  if (send_counts.size() != 1 || recv_counts.size() != 1 || send_counts[0] != recv_counts[0])
    throw std::logic_error("all_to_all in a group of one (" + name_ + "): counts do not match");
  copy_values(send, recv, send_counts[0]);
}

void SelfCommunicator::all_to_all(const std::int64_t* send, std::int64_t* recv, std::int64_t per_peer) {
  std::memmove(recv, send, static_cast<std::size_t>(per_peer) * sizeof(std::int64_t));
}

// A group of one has no peer: the pipeline never sends within a single stage.
std::unique_ptr<Request> SelfCommunicator::isend(ConstTensorRef, std::int64_t, int, int) {
  throw std::logic_error("point-to-point send in a group of one (" + name_ + ")");
}

std::unique_ptr<Request> SelfCommunicator::irecv(TensorRef, std::int64_t, int, int) {
  throw std::logic_error("point-to-point receive in a group of one (" + name_ + ")");
}

std::unique_ptr<Request> SelfCommunicator::exchange(ConstTensorRef send, TensorRef recv, std::int64_t n, int to,
                                                    int from, int /*tag*/) {
  if (to != 0 || from != 0) throw std::logic_error("exchange in a group of one (" + name_ + ") with another rank");
  copy_values(send, recv, n);
  return std::make_unique<DoneRequest>();
}

void wait_all(std::vector<std::unique_ptr<Request>>& requests) {
  for (auto& r : requests) r->wait();
  requests.clear();
}

}  // namespace loom::exec
