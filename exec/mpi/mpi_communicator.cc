#include "exec/mpi/mpi_communicator.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "exec/comm_activity.h"
#include "kernels/numerics.h"

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

// bf16 travels as 16-bit words; its reductions are user-defined ops that widen each pair to fp32,
// combine and round back to nearest even (kernels/numerics.h), as NCCL's bf16 reductions do.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i)
    b[i] = kernels::bf16_bits_from_float(kernels::float_from_bf16_bits(a[i]) + kernels::float_from_bf16_bits(b[i]));
}
void bf16_max(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i)
    if (kernels::float_from_bf16_bits(a[i]) > kernels::float_from_bf16_bits(b[i])) b[i] = a[i];
}

MPI_Op bf16_op(ReduceOp op) {
  static MPI_Op sum = MPI_OP_NULL, max = MPI_OP_NULL;  // created once, after MPI_Init, kept until exit
  MPI_Op& o = op == ReduceOp::kSum ? sum : max;
  if (o == MPI_OP_NULL) MPI_CHECK(MPI_Op_create(op == ReduceOp::kSum ? bf16_sum : bf16_max, 1, &o));
  return o;
}

MPI_Datatype mpi_type(DType d, const char* what) {
  if (d == DType::kF32) return MPI_FLOAT;
  if (d == DType::kBF16) return MPI_UINT16_T;
  throw std::logic_error(std::string(what) + ": MPI collectives on " + to_string(d) + " are not implemented");
}

MPI_Op mpi_op(ReduceOp op, DType d = DType::kF32) {
  if (d == DType::kBF16) return bf16_op(op);
  return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX;
}

std::int64_t byte_offset(std::int64_t elements, DType d) { return elements * dtype_bytes(d); }

// LOOM_TEST_P2P_BY_ORDER (tests only): every message carries one tag, so MPI pairs a rank's sends to a
// peer with the peer's receives from it by order alone — NCCL's rule (exec/nccl/nccl_communicator.h).
// A run that gives the same losses this way pairs its messages consistently by order.
int message_tag(int tag) {
  static const bool by_order = [] {
    const char* v = std::getenv("LOOM_TEST_P2P_BY_ORDER");
    return v != nullptr && *v != 0 && std::string(v) != "0";
  }();
  return by_order ? 0 : tag;
}

// A collective numbered in its group, or a point-to-point message with one peer (seq 0), as the
// watchdog names it while the training thread waits for it.
struct OpRecord {
  std::string group;
  const char* op;
  std::int64_t seq;
  std::vector<int> ranks;
};

class MpiRequest final : public Request {
 public:
  explicit MpiRequest(OpRecord record) : record_(std::move(record)) {}
  MPI_Request request = MPI_REQUEST_NULL;
  void wait() override {
    if (request == MPI_REQUEST_NULL) return;
    const CommActivity::Blocked blocked(record_.group, record_.op, record_.seq, record_.ranks);
    MPI_CHECK(MPI_Wait(&request, MPI_STATUS_IGNORE));
  }
  bool test() override {
    if (request == MPI_REQUEST_NULL) return true;
    int done = 0;
    MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    return done != 0;
  }
  ~MpiRequest() override { wait(); }

 private:
  OpRecord record_;
};

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name) : comm_(comm), name_(std::move(name)) {
  MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  MPI_CHECK(MPI_Comm_group(comm_, &group));
  MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  std::vector<int> local(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r) local[r] = r;
  world_ranks_.resize(local.size());
  MPI_CHECK(MPI_Group_translate_ranks(group, size_, local.data(), world, world_ranks_.data()));
  MPI_Group_free(&group);
  MPI_Group_free(&world);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiCommunicator::all_reduce(TensorRef data, std::int64_t n, ReduceOp op) {
  const CommActivity::Blocked blocked(name_, "all_reduce", CommActivity::process().issue(name_), world_ranks_);
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data.raw(), count_of(n), mpi_type(data.dtype(), "all_reduce"),
                          mpi_op(op, data.dtype()), comm_));
}

void MpiCommunicator::all_reduce(double* data, std::int64_t n, ReduceOp op) {
  const CommActivity::Blocked blocked(name_, "all_reduce", CommActivity::process().issue(name_), world_ranks_);
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, count_of(n), MPI_DOUBLE, mpi_op(op), comm_));
}

std::unique_ptr<Request> MpiCommunicator::all_reduce_async(TensorRef data, std::int64_t n) {
  auto r =
      std::make_unique<MpiRequest>(OpRecord{name_, "all_reduce", CommActivity::process().issue(name_), world_ranks_});
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data.raw(), count_of(n), mpi_type(data.dtype(), "all_reduce"),
                           mpi_op(ReduceOp::kSum, data.dtype()), comm_, &r->request));
  return r;
}

void MpiCommunicator::reduce_scatter(ConstTensorRef send, TensorRef recv, std::int64_t recv_n) {
  check_dtype(recv.dtype(), send.dtype(), "reduce_scatter");
  const MPI_Datatype type = mpi_type(recv.dtype(), "reduce_scatter");
  const MPI_Op sum = mpi_op(ReduceOp::kSum, recv.dtype());
  const CommActivity::Blocked blocked(name_, "reduce_scatter", CommActivity::process().issue(name_), world_ranks_);
  if (recv.raw() != (send + rank_ * recv_n).raw()) {
    MPI_CHECK(MPI_Reduce_scatter_block(send.raw(), recv.raw(), count_of(recv_n), type, sum, comm_));
    return;
  }
  // In place: MPI's form reads the input from the receive buffer and leaves the result in its
  // first block, so it moves to this rank's block (host memory: this communicator serves the CPU
  // backend; a device backend would use NCCL, whose in-place form is this rank's block already).
  void* data = const_cast<void*>(send.raw());
  MPI_CHECK(MPI_Reduce_scatter_block(MPI_IN_PLACE, data, count_of(recv_n), type, sum, comm_));
  if (rank_ != 0) std::memmove(recv.raw(), data, static_cast<std::size_t>(byte_offset(recv_n, recv.dtype())));
}

void MpiCommunicator::all_gather(ConstTensorRef send, TensorRef recv, std::int64_t send_n) {
  check_dtype(recv.dtype(), send.dtype(), "all_gather");
  const MPI_Datatype type = mpi_type(recv.dtype(), "all_gather");
  const CommActivity::Blocked blocked(name_, "all_gather", CommActivity::process().issue(name_), world_ranks_);
  // Sending this rank's own block of the output is the in-place form: no staging copy.
  const void* source = send.raw() == (recv + rank_ * send_n).raw() ? MPI_IN_PLACE : send.raw();
  MPI_CHECK(MPI_Allgather(source, count_of(send_n), type, recv.raw(), count_of(send_n), type, comm_));
}

std::unique_ptr<Request> MpiCommunicator::all_gather_async(ConstTensorRef send, TensorRef recv, std::int64_t send_n) {
  check_dtype(recv.dtype(), send.dtype(), "all_gather");
  const MPI_Datatype type = mpi_type(recv.dtype(), "all_gather");
  auto r =
      std::make_unique<MpiRequest>(OpRecord{name_, "all_gather", CommActivity::process().issue(name_), world_ranks_});
  const void* source = send.raw() == (recv + rank_ * send_n).raw() ? MPI_IN_PLACE : send.raw();
  MPI_CHECK(MPI_Iallgather(source, count_of(send_n), type, recv.raw(), count_of(send_n), type, comm_, &r->request));
  return r;
}

void MpiCommunicator::all_to_all(ConstTensorRef send, const std::vector<std::int64_t>& send_counts, TensorRef recv,
                                 const std::vector<std::int64_t>& recv_counts) {
  check_dtype(recv.dtype(), send.dtype(), "all_to_all");
  if (send_counts.size() != static_cast<std::size_t>(size_) || recv_counts.size() != static_cast<std::size_t>(size_))
    throw std::logic_error("all_to_all in " + name_ + ": one count per rank is needed");
  std::vector<int> sc(send_counts.size()), sd(sc.size()), rc(sc.size()), rd(sc.size());
  std::int64_t s_at = 0, r_at = 0;
  for (std::size_t p = 0; p < sc.size(); ++p) {
    sc[p] = count_of(send_counts[p]);
    rc[p] = count_of(recv_counts[p]);
    sd[p] = count_of(s_at);
    rd[p] = count_of(r_at);
    s_at += send_counts[p];
    r_at += recv_counts[p];
  }
  const MPI_Datatype type = mpi_type(recv.dtype(), "all_to_all");
  const CommActivity::Blocked blocked(name_, "all_to_all", CommActivity::process().issue(name_), world_ranks_);
  MPI_CHECK(MPI_Alltoallv(send.raw(), sc.data(), sd.data(), type, recv.raw(), rc.data(), rd.data(), type, comm_));
}

void MpiCommunicator::all_to_all(const std::int64_t* send, std::int64_t* recv, std::int64_t per_peer) {
  const CommActivity::Blocked blocked(name_, "all_to_all", CommActivity::process().issue(name_), world_ranks_);
  MPI_CHECK(MPI_Alltoall(send, count_of(per_peer), MPI_INT64_T, recv, count_of(per_peer), MPI_INT64_T, comm_));
}

std::unique_ptr<Request> MpiCommunicator::isend(ConstTensorRef data, std::int64_t n, int peer, int tag) {
  auto r = std::make_unique<MpiRequest>(OpRecord{name_, "send", 0, {world_ranks_.at(peer)}});
  MPI_CHECK(
      MPI_Isend(data.raw(), count_of(n), mpi_type(data.dtype(), "isend"), peer, message_tag(tag), comm_, &r->request));
  return r;
}

std::unique_ptr<Request> MpiCommunicator::irecv(TensorRef data, std::int64_t n, int peer, int tag) {
  auto r = std::make_unique<MpiRequest>(OpRecord{name_, "recv", 0, {world_ranks_.at(peer)}});
  MPI_CHECK(
      MPI_Irecv(data.raw(), count_of(n), mpi_type(data.dtype(), "irecv"), peer, message_tag(tag), comm_, &r->request));
  return r;
}

void MpiCommunicator::barrier() {
  const CommActivity::Blocked blocked(name_, "barrier", CommActivity::process().issue(name_), world_ranks_);
  MPI_CHECK(MPI_Barrier(comm_));
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key, const std::string& name) const {
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
  return std::make_unique<MpiCommunicator>(sub, name);
}

}  // namespace loom::exec
