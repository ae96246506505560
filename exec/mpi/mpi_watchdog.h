// The communication watchdog over MPI: a thread per rank that watches the operation the training
// thread is blocked in (exec/comm_activity.h). One that makes no progress for the timeout becomes an
// error: the rank asks the group's other members — through their own watchdog threads, which answer
// even when their training thread sleeps or spins — whether they arrived at that operation and what
// they are doing, prints one line naming the group, the op, the step and the ranks that did not
// arrive, tells every other rank (each prints one line with its own state and acknowledges it), and
// once all have, aborts the job with exit status kExitCommunicationTimeout: mpirun or srun then ends
// every process, the stuck one too.
//
// Device work (the NCCL communicator's operations, which the host queues and does not wait in) is
// watched the same way through CommActivity's device queues: an operation unfinished for the timeout
// is reported like a blocked call, with "(on the GPU)", and an asynchronous error a queue reports
// (ncclCommGetAsyncError) ends the job at once with the same exit status. Before the job is aborted
// every device queue is abandoned (ncclCommAbort), so that no kernel keeps waiting for a peer.
//
// This is the role of PyTorch's NCCL watchdog (TORCH_NCCL_ASYNC_ERROR_HANDLING, its timeout and the
// flight recorder's "which ranks did not join") and of Megatron-LM's --distributed-timeout-minutes,
// for Loom's MPI communicator. The watchdog's messages travel on a duplicate of MPI_COMM_WORLD, so
// they never match the training traffic; MPI must provide MPI_THREAD_MULTIPLE.
#pragma once

#include <mpi.h>

#include <condition_variable>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "exec/comm_activity.h"

namespace loom::exec {

class MpiWatchdog final : public Watchdog {
 public:
  // Collective over MPI_COMM_WORLD. timeout_s > 0.
  explicit MpiWatchdog(double timeout_s);
  ~MpiWatchdog() override;
  MpiWatchdog(const MpiWatchdog&) = delete;
  MpiWatchdog& operator=(const MpiWatchdog&) = delete;

 private:
  struct Outgoing {
    std::string text;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  struct Notice {
    int from = -1;  // -1: none
    std::string text;
  };
  void loop();
  // Answers the queries waiting for this rank; returns an abort notice if one came.
  Notice serve();
  void send(int rank, int tag, std::string text);
  std::string receive(const MPI_Status& probed);
  // The training thread's operation timed out: diagnose, tell everyone, abort.
  [[noreturn]] void fire(const CommActivity::Snapshot& stuck);
  // A device queue reported an error: tell everyone, abort.
  [[noreturn]] void fail_on_device_error(const CommActivity::Snapshot& s);
  // Prints "loom: rank R: watchdog: <line>; aborting the job (exit 4)", acknowledges the notices that
  // came while diagnosing, tells every other rank `what`, waits for their lines, abandons the device
  // queues and aborts the job.
  [[noreturn]] void end_job(const std::string& line, const std::string& what, const std::vector<int>& early_notices);
  [[noreturn]] void stop_on_notice(const Notice& notice);
  // Keeps answering queries (ranks diagnosing at the same time need answers) and acknowledging
  // notices for `seconds`, or until `wanted_acks` acknowledgements of this rank's notice came
  // (0: the whole time). Returns the acknowledgements counted.
  int linger(double seconds, int wanted_acks = 0);
  bool sleep_or_stop(std::chrono::milliseconds period);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  double timeout_s_;
  std::list<Outgoing> outgoing_;  // sends in flight; a list keeps each text where MPI reads it
  std::mutex stop_mutex_;
  std::condition_variable stop_signal_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace loom::exec
