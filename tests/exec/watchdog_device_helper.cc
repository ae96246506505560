// Run under mpirun (2 ranks) by watchdog_test.cc: the MPI watchdog (1 s timeout) over device queues that
// stand in for the NCCL communicator's, so that its reporting runs without a GPU. Mode `timeout`: rank 0
// has issued tp collective #1 and its queue holds it unfinished; rank 1 never issued it. Mode `error`:
// rank 1's queue reports an asynchronous error. Each queue prints "rank R: device queue abandoned" when
// the watchdog abandons it. Every rank then sleeps 60 s and prints "not stopped": the watchdog must end
// the job before that (exit 4).
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>

#include "exec/comm_activity.h"
#include "exec/mpi/mpi_watchdog.h"

namespace {

using loom::exec::CommActivity;

class StandInQueue final : public CommActivity::DeviceQueue {
 public:
  int rank = 0;
  bool holds_operation = false;
  bool reports_error = false;
  CommActivity::Clock::time_point since = CommActivity::Clock::now();
  std::optional<Pending> oldest_pending() override {
    if (!holds_operation) return std::nullopt;
    Pending p;
    p.wait = {"tp", "all_reduce", 1, {0, 1}, since};
    p.step = 3;
    return p;
  }
  std::string async_error() override {
    return reports_error ? "NCCL reported an error on tp: unhandled system error (injected)" : "";
  }
  void abort() override {
    std::fprintf(stderr, "rank %d: device queue abandoned\n", rank);
    std::fflush(stderr);
  }
};

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  const std::string mode = argc > 1 ? argv[1] : "";
  StandInQueue queue;
  MPI_Comm_rank(MPI_COMM_WORLD, &queue.rank);
  if (provided != MPI_THREAD_MULTIPLE || (mode != "timeout" && mode != "error")) {
    std::fprintf(stderr, "usage: mpirun -np 2 %s timeout|error (MPI_THREAD_MULTIPLE needed)\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  CommActivity& activity = CommActivity::process();
  activity.set_step(3);
  if (mode == "timeout" && queue.rank == 0) {
    activity.issue("tp");
    queue.holds_operation = true;
  }
  if (mode == "error" && queue.rank == 1) queue.reports_error = true;
  activity.attach(queue);
  {
    const loom::exec::MpiWatchdog watchdog(1.0);
    std::this_thread::sleep_for(std::chrono::seconds(60));
    std::printf("rank %d: not stopped\n", queue.rank);
  }
  activity.detach(queue);
  MPI_Finalize();
  return 0;
}
