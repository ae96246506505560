// What this process's communication is doing, for the watchdog: the step being run, the number of
// collectives issued on each process group, and the operation the training thread is blocked in
// (which group, which op, since when). The communicators record it; a watchdog thread reads it to
// notice an operation that makes no progress and to answer other ranks asking whether this one
// arrived. Backend-neutral: the MPI communicator records it today, NCCL's will record the same.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
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
    int step = 0;  // the step being run (0: before the first)
    bool waiting = false;
    Wait wait;                     // when waiting
    Clock::time_point idle_since;  // when the last communication call returned (not waiting)
  };

  // The process's one record.
  static CommActivity& process();

  void set_step(int step);
  // Counts a collective issued on `group` and returns its number.
  std::int64_t issue(const std::string& group);
  // Whether this process has issued collective `seq` of `group` (it "arrived" at it).
  bool arrived(const std::string& group, std::int64_t seq) const;
  Snapshot snapshot() const;

  // Marks the training thread blocked in `wait` until destroyed.
  class Blocked {
   public:
    Blocked(const std::string& group, const char* op, std::int64_t seq, const std::vector<int>& ranks);
    ~Blocked();
    Blocked(const Blocked&) = delete;
    Blocked& operator=(const Blocked&) = delete;
  };

  // "step 3, waiting in tp all_reduce #57 for 31.2 s" or "step 3, not in a communication call for 31.2 s".
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
};

}  // namespace loom::exec
