// The NCCL communicator (exec/nccl/nccl_communicator.h).
//
// Everywhere: `loom --version` lists nccl exactly when it is built in.
//
// On GPUs (each test skips, saying why, without NCCL in the build, without mpirun or without a device):
// - GpuNccl.EveryOperationMatchesMpiOnEveryGpu runs this program under mpirun with one rank per visible
//   GPU (LOOM_NCCL_TEST_ROLE=ranks), where the GpuNcclRanks tests compare every operation on device buffers
//   with the same operation of the MPI communicator on host copies — all-reduce (sum, max, async),
//   reduce-scatter and all-gather (out of place, in place, async), all-to-all with uneven and empty
//   blocks, messages and exchanges between ring neighbours, the host overloads — in fp32 and bf16, for
//   0, 1, odd and large counts, bit for bit (summed values are sixteenths whose sums are exact in any
//   order); check that an operation waits for the compute stream and the compute stream for it; and that
//   host memory, another backend and non-neighbour messages are refused by name. On a one-GPU machine
//   that is a world of one: NCCL communicators of one rank, which still run NCCL's init, the streams,
//   the events and what the watchdog polls.
// - GpuNccl.WatchdogEndsAnOperationThatMakesNoProgress holds the compute stream (a host function that
//   sleeps) behind an all-reduce, with a 1 s timeout (LOOM_NCCL_TEST_ROLE=hang): the watchdog must name
//   the operation and end the job with exit 4 long before the hold ends.
// - GpuNcclLoomRun.* (two GPUs or more) train under `loom run --backend cuda --comm direct` and compare the
//   losses with the same run host-staged.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "run_util.h"

#ifdef LOOM_WITH_NCCL
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <cmath>
#include <cstring>
#include <random>
#include <regex>
#include <stdexcept>
#include <thread>

#include "exec/backend.h"
#include "exec/comm_activity.h"
#include "exec/cpu/cpu_backend.h"
#include "exec/cuda/cuda_backend.h"
#include "exec/mpi/mpi_communicator.h"
#include "exec/mpi/mpi_watchdog.h"
#include "exec/nccl/nccl_communicator.h"
#include "exec/process_groups.h"
#include "kernels/cuda_check.h"
#include "kernels/numerics.h"
#endif

namespace loom::exec {
namespace {

using testing::ProcessResult;
using testing::run_shell;

#ifdef LOOM_WITH_NCCL
constexpr bool kBuiltWithNccl = true;
#else
constexpr bool kBuiltWithNccl = false;
#endif

TEST(NcclBuild, VersionListsNcclExactlyWhenBuiltIn) {
  const ProcessResult r = run_shell(testing::loom_binary() + " --version", 30);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto at = r.out.find("backends:");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("nccl", at) != std::string::npos, kBuiltWithNccl) << r.out;
}

#ifdef LOOM_WITH_NCCL

// Which side this process is: "" under ctest, "ranks" or "hang" when GpuNccl.* runs it under mpirun.
std::string role() {
  const char* r = std::getenv("LOOM_NCCL_TEST_ROLE");
  return r != nullptr ? r : "";
}

// --- the rank side: GpuNcclRanks, under mpirun ---------------------------------------------------------------

// What every GpuNcclRanks test uses, made once per rank before the tests run.
struct Ranks {
  std::unique_ptr<Runtime> runtime;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<MpiCommunicator> reference;  // the same group over MPI, on host copies
  std::unique_ptr<NcclCommunicator> nccl;      // the world, with point-to-point channels
};
Ranks* g_ranks = nullptr;

using Bytes = std::vector<unsigned char>;

MPI_Comm dup_world() {
  MPI_Comm c = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
  return c;
}

// Host values in a dtype's bytes.
Bytes encode(const std::vector<float>& v, DType d) {
  Bytes b(v.size() * static_cast<std::size_t>(dtype_bytes(d)));
  if (d == DType::kF32) {
    if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  } else {
    for (std::size_t i = 0; i < v.size(); ++i) {
      const std::uint16_t bits = kernels::bf16_bits_from_float(v[i]);
      std::memcpy(b.data() + 2 * i, &bits, 2);
    }
  }
  return b;
}

// Values for a sum: sixteenths small enough that every partial sum over the ranks is exact in bf16 (8
// significant bits) and fp32, whatever order NCCL adds them in.
std::vector<float> sixteenths(std::int64_t n, int seed, int ranks) {
  std::mt19937 gen(static_cast<unsigned>(seed));
  std::uniform_int_distribution<int> k(-255 / ranks, 255 / ranks);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = static_cast<float>(k(gen)) / 16.0f;
  return v;
}

// Any values (a max, or values that are only moved).
std::vector<float> anything(std::int64_t n, int seed) {
  std::mt19937 gen(static_cast<unsigned>(seed));
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = d(gen);
  return v;
}

class GpuNcclRanks : public ::testing::Test {
 protected:
  void SetUp() override {
    if (g_ranks == nullptr)
      GTEST_SKIP() << "runs under mpirun, one rank per GPU, started by GpuNccl.EveryOperationMatchesMpiOnEveryGpu";
  }
  Backend& backend() { return *g_ranks->backend; }
  NcclCommunicator& nccl() { return *g_ranks->nccl; }
  MpiCommunicator& reference() { return *g_ranks->reference; }
  int rank() { return nccl().rank(); }
  int size() { return nccl().size(); }

  Tensor device(const Bytes& host, DType d, std::int64_t n) {
    Tensor t = backend().empty(std::max<std::int64_t>(n, 1), 1, MemoryCategory::kBuffers, d);
    backend().upload(t.ref(), host.data(), n);
    return t;
  }
  Bytes host(ConstTensorRef t, std::int64_t n) {
    Bytes b(static_cast<std::size_t>(n * dtype_bytes(t.dtype())));
    backend().download(b.data(), t, n);  // waits for the compute stream
    return b;
  }
  static TensorRef ref(Bytes& b, DType d, std::int64_t offset = 0) { return {b.data() + offset * dtype_bytes(d), d}; }

  // The first difference, or "" when the bytes are equal.
  static std::string compare(const Bytes& got, const Bytes& want, DType d) {
    if (got.size() != want.size()) return fmt::format("{} bytes, {} expected", got.size(), want.size());
    const std::size_t w = static_cast<std::size_t>(dtype_bytes(d));
    for (std::size_t i = 0; i < got.size(); i += w)
      if (std::memcmp(got.data() + i, want.data() + i, w) != 0) {
        auto value = [&](const Bytes& b) {
          if (d == DType::kF32) {
            float f;
            std::memcpy(&f, b.data() + i, 4);
            return static_cast<double>(f);
          }
          std::uint16_t bits;
          std::memcpy(&bits, b.data() + i, 2);
          return static_cast<double>(kernels::float_from_bf16_bits(bits));
        };
        return fmt::format("element {} is {} where MPI gives {}", i / w, value(got), value(want));
      }
    return "";
  }
};

const std::vector<std::int64_t> kCounts = {0, 1, 37, 1001, (1 << 20) + 3};
const std::vector<DType> kDtypes = {DType::kF32, DType::kBF16};

std::string label(DType d, std::int64_t n) { return fmt::format("{} n {}", to_string(d), n); }

TEST_F(GpuNcclRanks, AllReduceSumAndMaxEqualMpisBitForBit) {
  for (DType d : kDtypes)
    for (std::int64_t n : kCounts)
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        SCOPED_TRACE(label(d, n) + (op == ReduceOp::kSum ? " sum" : " max"));
        Bytes want = encode(op == ReduceOp::kSum ? sixteenths(n, rank(), size()) : anything(n, rank()), d);
        Tensor t = device(want, d, n);
        nccl().all_reduce(t.ref(), n, op);
        reference().all_reduce(ref(want, d), n, op);
        EXPECT_EQ(compare(host(t.ref(), n), want, d), "");
      }
}

TEST_F(GpuNcclRanks, AsynchronousAllReduceEqualsMpisOnceWaited) {
  for (DType d : kDtypes)
    for (std::int64_t n : kCounts) {
      SCOPED_TRACE(label(d, n));
      Bytes want = encode(sixteenths(n, 100 + rank(), size()), d);
      Tensor t = device(want, d, n);
      std::unique_ptr<Request> request = nccl().all_reduce_async(t.ref(), n);
      request->wait();
      reference().all_reduce(ref(want, d), n, ReduceOp::kSum);
      EXPECT_EQ(compare(host(t.ref(), n), want, d), "");
      EXPECT_TRUE(request->test()) << "complete once the compute stream waited for it";
    }
}

TEST_F(GpuNcclRanks, ReduceScatterOutOfPlaceAndInPlaceEqualsMpis) {
  for (DType d : kDtypes)
    for (std::int64_t n : kCounts) {
      SCOPED_TRACE(label(d, n));
      Bytes input = encode(sixteenths(n * size(), 200 + rank(), size()), d);
      Bytes want(static_cast<std::size_t>(n * dtype_bytes(d)));
      reference().reduce_scatter(ref(input, d), ref(want, d), n);
      Tensor send = device(input, d, n * size());
      Tensor recv = backend().empty(std::max<std::int64_t>(n, 1), 1, MemoryCategory::kBuffers, d);
      nccl().reduce_scatter(send.ref(), recv.ref(), n);
      EXPECT_EQ(compare(host(recv.ref(), n), want, d), "") << "out of place";
      Tensor in_place = device(input, d, n * size());
      nccl().reduce_scatter(in_place.ref(), in_place.ref() + rank() * n, n);
      EXPECT_EQ(compare(host(in_place.ref() + rank() * n, n), want, d), "") << "in place";
    }
}

TEST_F(GpuNcclRanks, AllGatherOutOfPlaceInPlaceAndAsynchronousEqualsMpis) {
  for (DType d : kDtypes)
    for (std::int64_t n : kCounts) {
      SCOPED_TRACE(label(d, n));
      Bytes mine = encode(anything(n, 300 + rank()), d);
      Bytes want(static_cast<std::size_t>(n * size() * dtype_bytes(d)));
      reference().all_gather(ref(mine, d), ref(want, d), n);
      Tensor send = device(mine, d, n);
      Tensor recv = backend().empty(std::max<std::int64_t>(n * size(), 1), 1, MemoryCategory::kBuffers, d);
      nccl().all_gather(send.ref(), recv.ref(), n);
      EXPECT_EQ(compare(host(recv.ref(), n * size()), want, d), "") << "out of place";
      // In place: this rank's block of the output is the input.
      Bytes block_in_place(want.size(), 0);
      std::memcpy(block_in_place.data() + rank() * n * dtype_bytes(d), mine.data(), mine.size());
      Tensor in_place = device(block_in_place, d, n * size());
      nccl().all_gather(in_place.ref() + rank() * n, in_place.ref(), n);
      EXPECT_EQ(compare(host(in_place.ref(), n * size()), want, d), "") << "in place";
      Tensor later = backend().empty(std::max<std::int64_t>(n * size(), 1), 1, MemoryCategory::kBuffers, d);
      nccl().all_gather_async(send.ref(), later.ref(), n)->wait();
      EXPECT_EQ(compare(host(later.ref(), n * size()), want, d), "") << "asynchronous";
    }
}

TEST_F(GpuNcclRanks, AllToAllWithUnevenAndEmptyBlocksEqualsMpis) {
  // count(from, to): 0 to 3 units of `unit` values, some blocks empty; unit 0 makes every block empty.
  for (DType d : kDtypes)
    for (std::int64_t unit : {std::int64_t{0}, std::int64_t{1}, std::int64_t{37}, std::int64_t{4099}}) {
      SCOPED_TRACE(label(d, unit));
      auto count = [&](int from, int to) { return ((3 * from + to + 1) % 4) * unit; };
      std::vector<std::int64_t> send_counts(static_cast<std::size_t>(size())), recv_counts(send_counts.size());
      std::int64_t send_n = 0, recv_n = 0;
      for (int p = 0; p < size(); ++p) {
        send_counts[p] = count(rank(), p);
        recv_counts[p] = count(p, rank());
        send_n += send_counts[p];
        recv_n += recv_counts[p];
      }
      Bytes input = encode(anything(send_n, 400 + rank()), d);
      Bytes want(static_cast<std::size_t>(recv_n * dtype_bytes(d)));
      reference().all_to_all(ref(input, d), send_counts, ref(want, d), recv_counts);
      Tensor send = device(input, d, send_n);
      Tensor recv = backend().empty(std::max<std::int64_t>(recv_n, 1), 1, MemoryCategory::kBuffers, d);
      nccl().all_to_all(send.ref(), send_counts, recv.ref(), recv_counts);
      EXPECT_EQ(compare(host(recv.ref(), recv_n), want, d), "");
    }
}

// What rank `from` sends as its k-th message: distinct per sender and message, so a message paired with
// the wrong receive shows.
std::vector<float> message(int from, int k, std::int64_t n) { return anything(n, 1000 * from + k); }

TEST_F(GpuNcclRanks, MessagesBetweenRingNeighboursArriveInOrder) {
  if (size() == 1) {
    // A group of one has no peer; an exchange with itself is a copy on the compute stream.
    Bytes b = encode(anything(1001, 7), DType::kBF16);
    Tensor send = device(b, DType::kBF16, 1001);
    Tensor recv = backend().empty(1001, 1, MemoryCategory::kBuffers, DType::kBF16);
    EXPECT_THROW(nccl().isend(send.ref(), 1001, 0, 0), std::logic_error);
    EXPECT_THROW(nccl().irecv(recv.ref(), 1001, 0, 0), std::logic_error);
    nccl().exchange(send.ref(), recv.ref(), 1001, 0, 0, 0)->wait();
    EXPECT_EQ(compare(host(recv.ref(), 1001), b, DType::kBF16), "");
    return;
  }
  const int next = (rank() + 1) % size(), prev = (rank() + size() - 1) % size();
  for (DType d : kDtypes) {
    SCOPED_TRACE(to_string(d));
    // Every rank first sends all its messages, large ones included, then receives: a send and a receive
    // on one NCCL communicator would wait for each other here; the channels keep them apart.
    std::vector<Tensor> out, in;
    std::vector<std::unique_ptr<Request>> requests;
    for (std::size_t k = 0; k < kCounts.size(); ++k) {
      out.push_back(device(encode(message(rank(), static_cast<int>(k), kCounts[k]), d), d, kCounts[k]));
      requests.push_back(nccl().isend(out.back().ref(), kCounts[k], next, static_cast<int>(k)));
    }
    for (std::size_t k = 0; k < kCounts.size(); ++k) {
      in.push_back(backend().empty(std::max<std::int64_t>(kCounts[k], 1), 1, MemoryCategory::kBuffers, d));
      requests.push_back(nccl().irecv(in.back().ref(), kCounts[k], prev, static_cast<int>(k)));
    }
    wait_all(requests);
    for (std::size_t k = 0; k < kCounts.size(); ++k)
      EXPECT_EQ(compare(host(in[k].ref(), kCounts[k]), encode(message(prev, static_cast<int>(k), kCounts[k]), d), d),
                "")
          << "message " << k;
    // One step of a ring: to the next rank, from the previous one.
    const std::int64_t n = 4099;
    Tensor block = device(encode(message(rank(), 99, n), d), d, n);
    Tensor arrived = backend().empty(n, 1, MemoryCategory::kBuffers, d);
    nccl().exchange(block.ref(), arrived.ref(), n, next, prev, 5)->wait();
    EXPECT_EQ(compare(host(arrived.ref(), n), encode(message(prev, 99, n), d), d), "") << "exchange";
  }
}

TEST_F(GpuNcclRanks, HostOverloadsGoThroughMpi) {
  double values[2] = {static_cast<double>(rank() + 1), static_cast<double>(rank())};
  nccl().all_reduce(values, 2, ReduceOp::kSum);
  EXPECT_EQ(values[0], size() * (size() + 1) / 2.0);
  double top = rank();
  nccl().all_reduce(&top, 1, ReduceOp::kMax);
  EXPECT_EQ(top, size() - 1);
  std::vector<std::int64_t> send(static_cast<std::size_t>(2 * size())), recv(send.size());
  for (int p = 0; p < size(); ++p) {
    send[2 * p] = 100 * rank() + p;
    send[2 * p + 1] = -rank();
  }
  nccl().all_to_all(send.data(), recv.data(), 2);
  for (int q = 0; q < size(); ++q) {
    EXPECT_EQ(recv[2 * q], 100 * q + rank());
    EXPECT_EQ(recv[2 * q + 1], -q);
  }
  nccl().barrier();
}

// Holds the compute stream for `ms` (a host function that sleeps): what is queued after it waits.
void hold(cudaStream_t stream, int ms) {
  static int held_ms = 0;
  held_ms = ms;
  CUDA_CHECK(cudaLaunchHostFunc(
      stream, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(held_ms)); }, nullptr));
}

TEST_F(GpuNcclRanks, AnOperationWaitsForTheComputeStreamAndTheComputeStreamForIt) {
  auto& cuda = static_cast<CudaBackend&>(backend());
  const std::int64_t n = 4099;
  const std::vector<float> ones(static_cast<std::size_t>(n), static_cast<float>(rank() + 1));
  Tensor x = device(encode(ones, DType::kF32), DType::kF32, n);
  CommActivity::process().set_step(42);
  // The scale kernel runs once before the hold: CUDA loads a module's kernels lazily, at their first
  // launch, and that load waits for the device, which would sit out the hold on the host and leave nothing
  // held by the time the all-reduce is queued (seen on an H200, CUDA 13.0: the all-reduce was complete
  // at once).
  backend().scale(x.ref(), 1.0f, n);
  backend().synchronize();
  hold(cuda.stream(), 500);
  backend().scale(x.ref(), 3.0f, n);  // queued behind the hold: the all-reduce must see it
  std::unique_ptr<Request> request = nccl().all_reduce_async(x.ref(), n);
  EXPECT_FALSE(request->test()) << "the compute stream is held: the all-reduce cannot have run";
  EXPECT_GE(nccl().unfinished_operations(), 1u);
  // What the watchdog sees meanwhile: this operation, unfinished, on the GPU.
  const CommActivity::Snapshot s = CommActivity::process().snapshot();
  EXPECT_TRUE(s.waiting && s.on_device) << CommActivity::describe(s, CommActivity::Clock::now());
  EXPECT_EQ(s.wait.group, nccl().name());
  EXPECT_EQ(std::string(s.wait.op), "all_reduce");
  EXPECT_EQ(s.step, 42);
  request->wait();                    // the compute stream waits for the sum...
  backend().scale(x.ref(), 0.5f, n);  // ...so this scales the sum, not the input
  std::vector<float> got(static_cast<std::size_t>(n));
  backend().to_host(got.data(), x.ref(), n);
  const float want = 1.5f * static_cast<float>(size() * (size() + 1) / 2);
  for (std::int64_t i = 0; i < n; i += 1000) EXPECT_EQ(got[static_cast<std::size_t>(i)], want) << i;
  EXPECT_TRUE(request->test());
  EXPECT_EQ(nccl().unfinished_operations(), 0u);
  EXPECT_FALSE(CommActivity::process().snapshot().on_device);
}

TEST_F(GpuNcclRanks, HostMemoryAnotherBackendAndUnboundUseAreRefusedByName) {
  std::vector<float> on_host(64, 1.0f);
  try {
    nccl().all_reduce(TensorRef{on_host.data(), DType::kF32}, 64, ReduceOp::kSum);
    ADD_FAILURE() << "host memory accepted";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce: a buffer is host memory"), std::string::npos) << e.what();
  }
  CpuBackend cpu;
  EXPECT_THROW(nccl().use_backend(cpu), std::logic_error);
  // A communicator nothing bound yet (collective: every rank makes it).
  NcclCommunicator unbound(std::make_unique<MpiCommunicator>(dup_world(), "unbound"), false);
  Tensor t = backend().alloc(16, 1, MemoryCategory::kBuffers);
  try {
    unbound.all_reduce(t.ref(), 16, ReduceOp::kSum);
    ADD_FAILURE() << "used before use_backend";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("before use_backend"), std::string::npos) << e.what();
  }
  if (size() > 1) {
    EXPECT_THROW(unbound.isend(t.ref(), 16, (rank() + 1) % size(), 0), std::logic_error);
  }
}

TEST_F(GpuNcclRanks, MessagesToRanksOtherThanRingNeighboursAreRefused) {
  if (size() < 4) GTEST_SKIP() << "needs 4 ranks for a rank that is neither next nor previous";
  Tensor t = backend().alloc(16, 1, MemoryCategory::kBuffers);
  EXPECT_THROW(nccl().isend(t.ref(), 16, (rank() + 2) % size(), 0), std::logic_error);
}

int run_ranks(int argc, char** argv) {
  Ranks ranks;
  ranks.runtime = std::make_unique<Runtime>();
  std::string why;
  ranks.backend = make_backend("cuda", &why, {ranks.runtime->local_rank(), ranks.runtime->local_size()});
  if (!ranks.backend) {
    std::fprintf(stderr, "rank %d: %s\n", ranks.runtime->world_rank(), why.c_str());
    ranks.runtime->abort(1);
  }
  ranks.reference = std::make_unique<MpiCommunicator>(dup_world(), "reference");
  ranks.nccl = std::make_unique<NcclCommunicator>(std::make_unique<MpiCommunicator>(dup_world(), "world"), true);
  ranks.nccl->use_backend(*ranks.backend);
  g_ranks = &ranks;
  int version = 0;
  if (ncclGetVersion(&version) == ncclSuccess && ranks.runtime->world_rank() == 0)
    std::printf("NCCL %d on %d rank(s), one GPU each\n", version, ranks.runtime->world_size());
  GTEST_FLAG_SET(filter, "GpuNcclRanks.*");
  (void)argc;
  (void)argv;
  int failed = RUN_ALL_TESTS();
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  g_ranks = nullptr;
  ranks.nccl.reset();  // before the backend whose stream it orders after, and before MPI ends
  ranks.reference.reset();
  ranks.backend.reset();
  return failed;
}

// An all-reduce queued behind a compute stream held for 30 s, watched with a 1 s timeout: the watchdog
// must end the job (exit 4) with one line naming it; "not stopped" otherwise.
int run_hang() {
  Runtime runtime;
  std::string why;
  std::unique_ptr<Backend> backend = make_backend("cuda", &why, {runtime.local_rank(), runtime.local_size()});
  if (!backend) {
    std::fprintf(stderr, "%s\n", why.c_str());
    return 1;
  }
  NcclCommunicator world(std::make_unique<MpiCommunicator>(dup_world(), "world"), false);
  world.use_backend(*backend);
  CommActivity::process().set_step(7);
  const MpiWatchdog watchdog(1.0);
  Tensor x = backend->alloc(1024, 1, MemoryCategory::kBuffers);
  hold(static_cast<CudaBackend&>(*backend).stream(), 30000);
  world.all_reduce(x.ref(), 1024, ReduceOp::kSum);  // returns: only the streams wait
  backend->synchronize();                           // the host waits here, for 30 s
  std::printf("not stopped\n");
  return 0;
}

// --- the launching side: under ctest ---------------------------------------------------------------------

int visible_devices(std::string* why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    *why = fmt::format("no CUDA device ({})",
                       status != cudaSuccess ? cudaGetErrorString(status) : "cudaGetDeviceCount found 0 devices");
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

std::string self_on_ranks(int ranks, const std::string& role) {
  // Without colour: Open MPI hands its ranks a pseudo-terminal, and the launcher reads their "[       OK ]".
  return fmt::format("LOOM_NCCL_TEST_ROLE={} {} {} --gtest_color=no", role, testing::mpirun_prefix(ranks),
                     std::filesystem::read_symlink("/proc/self/exe").string());
}

TEST(GpuNccl, EveryOperationMatchesMpiOnEveryGpu) {
  if (!testing::have_mpirun()) GTEST_SKIP() << "no mpirun: the NCCL communicator is bootstrapped over MPI";
  std::string why;
  const int devices = visible_devices(&why);
  if (devices == 0) GTEST_SKIP() << why;
  const ProcessResult r = run_shell(self_on_ranks(devices, "ranks"), 600);
  std::printf("%s", r.out.c_str());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("[  PASSED  ]"), std::string::npos) << r.out << r.err;
  EXPECT_EQ(r.out.find("[  FAILED  ]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[       OK ] GpuNcclRanks.AllReduceSumAndMaxEqualMpisBitForBit"), std::string::npos)
      << "the rank tests ran (not skipped)";
}

TEST(GpuNccl, WatchdogEndsAnOperationThatMakesNoProgress) {
  if (!testing::have_mpirun()) GTEST_SKIP() << "no mpirun: the watchdog runs over MPI";
  std::string why;
  if (visible_devices(&why) == 0) GTEST_SKIP() << why;
  const auto start = std::chrono::steady_clock::now();
  const ProcessResult r = run_shell(self_on_ranks(1, "hang"), 120);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, kExitCommunicationTimeout) << r.out << r.err;
  EXPECT_EQ(r.out.find("not stopped"), std::string::npos) << r.out;
  EXPECT_LT(elapsed, 28) << "the compute stream is held 30 s; the watchdog has a 1 s timeout\n" << r.err;
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex(R"(loom: rank 0: watchdog: world all_reduce #1 \(on the GPU\) at step 7 made no progress for )"
                        R"(\d+ s \(--comm-timeout 1\); every rank of world arrived \(0\): the transfer itself is )"
                        R"(stuck; aborting the job \(exit 4\))")))
      << r.err;
}

// --- loom run over NCCL: two GPUs or more ----------------------------------------------------------------

using testing::RunLayout;

std::vector<double> train(const RunLayout& layout, const std::string& comm, std::string* out) {
  static const std::string data = testing::make_token_file(testing::scratch_dir("nccl_data"), 20000);
  const std::string log = fmt::format("{}/{}_{}.jsonl", testing::scratch_dir("nccl_run"), layout.name, comm);
  const ProcessResult r = run_shell(
      fmt::format("{} --model {} --data {} --steps 4 --global-batch 8 --micro-batch 1 --lr 3e-3 --warmup 2 "
                  "--backend cuda --comm {} {} --log {}",
                  testing::loom_run(layout.ranks), testing::test_model(layout.model), data, comm, layout.flags, log),
      300);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  *out = r.out;
  return testing::losses(log);
}

class GpuNcclLoomRun : public ::testing::TestWithParam<RunLayout> {};

TEST_P(GpuNcclLoomRun, FollowsTheHostStagedRun) {
  if (!testing::have_mpirun()) GTEST_SKIP() << "no mpirun";
  std::string why;
  const int devices = visible_devices(&why);
  if (devices == 0) GTEST_SKIP() << why;
  if (devices < GetParam().ranks)
    GTEST_SKIP() << fmt::format("needs {} GPUs, one per rank; {} visible", GetParam().ranks, devices);
  std::string banner, staged_banner;
  const std::vector<double> nccl = train(GetParam(), "direct", &banner);
  const std::vector<double> staged = train(GetParam(), "host-staged", &staged_banner);
  EXPECT_NE(banner.find("messages over NCCL, GPU to GPU"), std::string::npos) << banner;
  ASSERT_EQ(nccl.size(), 4u);
  ASSERT_EQ(staged.size(), 4u);
  // bf16 messages summed in another order (NCCL's ring, MPI's pairs): within bf16's rounding.
  for (std::size_t i = 0; i < nccl.size(); ++i) EXPECT_NEAR(nccl[i], staged[i], 2e-3 * std::fabs(staged[i])) << i;
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, GpuNcclLoomRun,
    ::testing::Values(RunLayout{"DP2_ZeRO1", 2, "--dp 2 --zero 1"}, RunLayout{"TP2_SP", 2, "--tp 2 --sp on"},
                      RunLayout{"PP2_VPP2_Interleaved", 2, "--pp 2 --vpp 2 --schedule interleaved"},
                      RunLayout{"DP2_ZeRO3", 2, "--dp 2 --zero 3"}, RunLayout{"EP2", 2, "--dp 2 --ep 2", "micro_moe"},
                      RunLayout{"TP2xPP2xDP2", 8, "--tp 2 --pp 2 --dp 2 --zero 1"}),
    [](const auto& info) { return std::string(info.param.name); });

#endif  // LOOM_WITH_NCCL

}  // namespace
}  // namespace loom::exec

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
#ifdef LOOM_WITH_NCCL
  const std::string r = loom::exec::role();
  if (r == "ranks") return loom::exec::run_ranks(argc, argv);
  if (r == "hang") return loom::exec::run_hang();
#endif
  return RUN_ALL_TESTS();
}
