// What this process's communication is doing, for the watchdog: the step being run, the number of
// collectives issued on each process group, the operation the training thread is blocked in (which
// group, which op, since when), and the operations queued on a device that have not finished. The
// communicators record it; a watchdog thread reads it to notice an operation that makes no progress
// and to answer other ranks asking whether this one arrived. Backend-neutral: the MPI communicator
// marks the calls it blocks in; the NCCL communicator, whose calls return once the work is queued on
// the GPU, counts its collectives the same way and is asked for its oldest unfinished operation
// (a DeviceQueue).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace loom::exec {

// The exit status of a job that a communication watchdog ended: neither bad input (2), an internal
// failure (1) nor a numerical blow-up (3), so that a job script can tell a hang apart and retry.
inline constexpr int kExitCommunicationTimeout = 4;

// A running watchdog (see exec/mpi/mpi_watchdog.h); destroying it stops it.
class Watchdog {
 public:
  virtual ~Watchdog() = default;
};

class CommActivity {
 public:
  using Clock = std::chrono::steady_clock;

  // An operation the training thread is blocked in.
  struct Wait {
    std::string group;       // "tp", "dp", "pp", "world", ...
    const char* op = "";     // "all_reduce", "send", "recv", ...
    std::int64_t seq = 0;    // the group's collective number (1, 2, ...; equal on every member); 0: point-to-point
    std::vector<int> ranks;  // world ranks that must take part: the group's members, or the peer
    Clock::time_point since{};
  };
  struct Snapshot {
    int step = 0;  // the step being run (0: before the first); the queued operation's step when on_device
    bool waiting = false;
    bool on_device = false;        // `wait` is an operation queued on a device, not a call the host is in
    Wait wait;                     // when waiting
    Clock::time_point idle_since;  // when the last communication call returned (not waiting)
    std::string device_error;      // an error a device queue reported (empty: none)
  };

  // Operations queued on a device (the NCCL communicator's, one queue per communicator): the host does
  // not wait in them, so the watchdog asks each queue for its oldest unfinished one. Called from the
  // watchdog thread while the training thread queues more: implementations lock, and never block.
  class DeviceQueue {
   public:
    virtual ~DeviceQueue() = default;
    struct Pending {
      Wait wait;     // since: when it was queued
      int step = 0;  // the step it was queued in
    };
    // The oldest operation queued and not complete, if any.
    virtual std::optional<Pending> oldest_pending() = 0;
    // An error the device library reported asynchronously (NCCL's ncclCommGetAsyncError), naming the
    // group; empty when there is none.
    virtual std::string async_error() = 0;
    // Abandons everything queued (ncclCommAbort), as the job ends: nothing else is called after it.
    virtual void abort() = 0;
  };

  // The process's one record.
  static CommActivity& process();

  void set_step(int step);
  int step() const;
  // Counts a collective issued on `group` and returns its number.
  std::int64_t issue(const std::string& group);
  // Whether this process has issued collective `seq` of `group` (it "arrived" at it).
  bool arrived(const std::string& group, std::int64_t seq) const;
  // What the host is blocked in, or the oldest unfinished device operation when that is older (or
  // the host is in no call), and the first device queue's asynchronous error.
  Snapshot snapshot() const;

  // A queue is watched from attach until detach (its owner's destructor); both lock, so a queue is
  // never asked while it is being detached.
  void attach(DeviceQueue& queue);
  void detach(DeviceQueue& queue);
  // Calls abort() on every attached queue (the watchdog ending the job).
  void abort_device_queues();

  // Marks the training thread blocked in `wait` until destroyed.
  class Blocked {
   public:
    Blocked(const std::string& group, const char* op, std::int64_t seq, const std::vector<int>& ranks);
    ~Blocked();
    Blocked(const Blocked&) = delete;
    Blocked& operator=(const Blocked&) = delete;
  };

  // "step 3, waiting in tp all_reduce #57 for 31.2 s", "step 3, waiting in tp all_reduce #57 (on the GPU)
  // for 31.2 s" or "step 3, not in a communication call for 31.2 s".
  static std::string describe(const Snapshot& s, Clock::time_point now);
  // "tp all_reduce #57", "pp send to rank 3".
  static std::string describe(const Wait& w);

 private:
  CommActivity() = default;
  mutable std::mutex mutex_;
  int step_ = 0;
  bool waiting_ = false;
  Wait wait_;
  Clock::time_point idle_since_ = Clock::now();
  std::vector<std::pair<std::string, std::int64_t>> issued_;  // per group; a handful of groups
  // Apart from mutex_, which the training thread takes for every call: a queue's own lock is taken
  // under this one (the watchdog asking it), never the other way round.
  mutable std::mutex queues_mutex_;
  std::vector<DeviceQueue*> queues_;
};

}  // namespace loom::exec
