#include "exec/mpi/mpi_communicator.h"

#include <climits>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace loom::exec {

void mpi_fail(int status, const char* call, const char* file, int line) {
  char message[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, message, &length);
  std::fprintf(stderr, "loom: MPI error at %s:%d: %s: %.*s\n", file, line, call, length, message);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

namespace {

int count_of(std::int64_t n) {
  if (n > INT_MAX) throw std::length_error("MPI message of more than 2^31 elements");
  return static_cast<int>(n);
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX; }

class MpiRequest final : public Request {
 public:
  MPI_Request request = MPI_REQUEST_NULL;
  void wait() override {
    if (request != MPI_REQUEST_NULL) MPI_CHECK(MPI_Wait(&request, MPI_STATUS_IGNORE));
  }
  bool test() override {
    if (request == MPI_REQUEST_NULL) return true;
    int done = 0;
    MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    return done != 0;
  }
  ~MpiRequest() override { wait(); }
};

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name) : comm_(comm), name_(std::move(name)) {
  MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiCommunicator::all_reduce(float* data, std::int64_t n, ReduceOp op) {
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, count_of(n), MPI_FLOAT, mpi_op(op), comm_));
}

void MpiCommunicator::all_reduce(double* data, std::int64_t n, ReduceOp op) {
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, count_of(n), MPI_DOUBLE, mpi_op(op), comm_));
}

std::unique_ptr<Request> MpiCommunicator::all_reduce_async(float* data, std::int64_t n) {
  auto r = std::make_unique<MpiRequest>();
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, count_of(n), MPI_FLOAT, MPI_SUM, comm_, &r->request));
  return r;
}

void MpiCommunicator::reduce_scatter(const float* send, float* recv, std::int64_t recv_n) {
  if (recv != send + rank_ * recv_n) {
    MPI_CHECK(MPI_Reduce_scatter_block(send, recv, count_of(recv_n), MPI_FLOAT, MPI_SUM, comm_));
    return;
  }
  // In place: MPI's form reads the input from the receive buffer and leaves the result in its
  // first block, so it moves to this rank's block (host memory: this communicator serves the CPU
  // backend; a device backend would use NCCL, whose in-place form is this rank's block already).
  float* data = const_cast<float*>(send);
  MPI_CHECK(MPI_Reduce_scatter_block(MPI_IN_PLACE, data, count_of(recv_n), MPI_FLOAT, MPI_SUM, comm_));
  if (rank_ != 0) std::memmove(recv, data, static_cast<std::size_t>(recv_n) * sizeof(float));
}

void MpiCommunicator::all_gather(const float* send, float* recv, std::int64_t send_n) {
  // Sending this rank's own block of the output is the in-place form: no staging copy.
  const void* source = send == recv + rank_ * send_n ? MPI_IN_PLACE : send;
  MPI_CHECK(MPI_Allgather(source, count_of(send_n), MPI_FLOAT, recv, count_of(send_n), MPI_FLOAT, comm_));
}

std::unique_ptr<Request> MpiCommunicator::all_gather_async(const float* send, float* recv, std::int64_t send_n) {
  auto r = std::make_unique<MpiRequest>();
  const void* source = send == recv + rank_ * send_n ? MPI_IN_PLACE : send;
  MPI_CHECK(MPI_Iallgather(source, count_of(send_n), MPI_FLOAT, recv, count_of(send_n), MPI_FLOAT, comm_, &r->request));
  return r;
}

std::unique_ptr<Request> MpiCommunicator::isend(const float* data, std::int64_t n, int peer, int tag) {
  auto r = std::make_unique<MpiRequest>();
  MPI_CHECK(MPI_Isend(data, count_of(n), MPI_FLOAT, peer, tag, comm_, &r->request));
  return r;
}

std::unique_ptr<Request> MpiCommunicator::irecv(float* data, std::int64_t n, int peer, int tag) {
  auto r = std::make_unique<MpiRequest>();
  MPI_CHECK(MPI_Irecv(data, count_of(n), MPI_FLOAT, peer, tag, comm_, &r->request));
  return r;
}

void MpiCommunicator::barrier() { MPI_CHECK(MPI_Barrier(comm_)); }

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key, const std::string& name) const {
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
  return std::make_unique<MpiCommunicator>(sub, name);
}

}  // namespace loom::exec
