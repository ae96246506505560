#include "exec/communicator.h"

#include "exec/backend.h"

#include <cstring>
#include <stdexcept>

namespace loom::exec {

namespace {
class DoneRequest final : public Request {
 public:
  void wait() override {}
  bool test() override { return true; }
};
}  // namespace

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

// A group of one has no peer: the pipeline never sends within a single stage.
std::unique_ptr<Request> SelfCommunicator::isend(ConstTensorRef, std::int64_t, int, int) {
  throw std::logic_error("point-to-point send in a group of one (" + name_ + ")");
}

std::unique_ptr<Request> SelfCommunicator::irecv(TensorRef, std::int64_t, int, int) {
  throw std::logic_error("point-to-point receive in a group of one (" + name_ + ")");
}

void wait_all(std::vector<std::unique_ptr<Request>>& requests) {
  for (auto& r : requests) r->wait();
  requests.clear();
}

}  // namespace loom::exec
