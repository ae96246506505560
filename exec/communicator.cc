#include "exec/communicator.h"

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

std::unique_ptr<Request> SelfCommunicator::all_reduce_async(float*, std::int64_t) {
  return std::make_unique<DoneRequest>();
}

void SelfCommunicator::reduce_scatter(const float* send, float* recv, std::int64_t recv_n) {
  if (send != recv) std::memmove(recv, send, static_cast<std::size_t>(recv_n) * sizeof(float));
}

void SelfCommunicator::all_gather(const float* send, float* recv, std::int64_t send_n) {
  if (send != recv) std::memmove(recv, send, static_cast<std::size_t>(send_n) * sizeof(float));
}

std::unique_ptr<Request> SelfCommunicator::all_gather_async(const float* send, float* recv, std::int64_t send_n) {
  all_gather(send, recv, send_n);
  return std::make_unique<DoneRequest>();
}

// A group of one has no peer: the pipeline never sends within a single stage.
std::unique_ptr<Request> SelfCommunicator::isend(const float*, std::int64_t, int, int) {
  throw std::logic_error("point-to-point send in a group of one (" + name_ + ")");
}

std::unique_ptr<Request> SelfCommunicator::irecv(float*, std::int64_t, int, int) {
  throw std::logic_error("point-to-point receive in a group of one (" + name_ + ")");
}

void wait_all(std::vector<std::unique_ptr<Request>>& requests) {
  for (auto& r : requests) r->wait();
  requests.clear();
}

}  // namespace loom::exec
