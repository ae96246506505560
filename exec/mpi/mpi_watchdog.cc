#include "exec/mpi/mpi_watchdog.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "exec/mpi/mpi_communicator.h"

namespace loom::exec {

namespace {

using Clock = CommActivity::Clock;

constexpr int kQueryTag = 1;   // "GROUP\nSEQ": did you arrive at collective SEQ of GROUP, and what are you doing?
constexpr int kAnswerTag = 2;  // "1 STATE" (arrived) or "0 STATE"
constexpr int kNoticeTag = 3;  // why the job stops, from the rank whose operation timed out
constexpr int kAckTag = 4;     // "printed": a rank has said its line about a notice

// How often the thread looks: a timeout is noticed at most this late, and a query answered within it.
// PyTorch's NCCL watchdog wakes as often (kWatchdogThreadSleepMillis = 100, ProcessGroupNCCL.hpp).
constexpr auto kPollPeriod = std::chrono::milliseconds(100);
// How long a diagnosing rank waits for the other members' answers. A live watchdog answers within
// a poll period; one that does not answer in this long belongs to a process that is itself frozen.
constexpr double kAnswerWindowS = 5.0;
// After telling every rank, the longest the reporting rank waits for each to print its line (they
// answer at once; one that does not is frozen) before it aborts the job.
constexpr double kAckWindowS = 10.0;
// The longest the device queues' abort (ncclCommAbort) may take before the job is ended without it.
constexpr double kDeviceAbortWindowS = 10.0;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

// Abandons the work queued on devices (NCCL: ncclCommAbort on every communicator, so that no kernel
// keeps waiting for a peer that is going away) on a thread of its own, waiting at most
// kDeviceAbortWindowS: an abort that hangs must not keep the job from ending.
void abort_device_work() {
  struct Done {
    std::mutex mutex;
    std::condition_variable signal;
    bool done = false;
  };
  auto done = std::make_shared<Done>();
  std::thread([done] {
    CommActivity::process().abort_device_queues();
    const std::lock_guard<std::mutex> lock(done->mutex);
    done->done = true;
    done->signal.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(done->mutex);
  done->signal.wait_for(lock, std::chrono::duration<double>(kDeviceAbortWindowS), [&] { return done->done; });
}

}  // namespace

MpiWatchdog::MpiWatchdog(double timeout_s) : timeout_s_(timeout_s) {
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
  thread_ = std::thread([this] { loop(); });
}

MpiWatchdog::~MpiWatchdog() {
  {
    const std::lock_guard<std::mutex> lock(stop_mutex_);
    stop_ = true;
  }
  stop_signal_.notify_all();
  thread_.join();
  // Answers still in flight go to ranks that stopped asking; MPI_Finalize reclaims them and the
  // duplicate communicator (freeing it here would be a collective every rank must reach).
  for (Outgoing& o : outgoing_)
    if (o.request != MPI_REQUEST_NULL) {
      MPI_Cancel(&o.request);
      MPI_Request_free(&o.request);
    }
}

bool MpiWatchdog::sleep_or_stop(std::chrono::milliseconds period) {
  std::unique_lock<std::mutex> lock(stop_mutex_);
  return stop_signal_.wait_for(lock, period, [this] { return stop_; });
}

void MpiWatchdog::loop() {
  while (!sleep_or_stop(kPollPeriod)) {
    const Notice notice = serve();
    if (notice.from >= 0) stop_on_notice(notice);
    const CommActivity::Snapshot s = CommActivity::process().snapshot();
    if (!s.device_error.empty()) fail_on_device_error(s);
    if (s.waiting && seconds_since(s.wait.since) > timeout_s_) fire(s);
  }
}

void MpiWatchdog::send(int rank, int tag, std::string text) {
  Outgoing& o = outgoing_.emplace_back();
  o.text = std::move(text);
  MPI_CHECK(MPI_Isend(o.text.data(), static_cast<int>(o.text.size()), MPI_CHAR, rank, tag, comm_, &o.request));
}

std::string MpiWatchdog::receive(const MPI_Status& probed) {
  int count = 0;
  MPI_CHECK(MPI_Get_count(&probed, MPI_CHAR, &count));
  std::string text(static_cast<std::size_t>(count), '\0');
  MPI_CHECK(MPI_Recv(text.data(), count, MPI_CHAR, probed.MPI_SOURCE, probed.MPI_TAG, comm_, MPI_STATUS_IGNORE));
  return text;
}

MpiWatchdog::Notice MpiWatchdog::serve() {
  int pending = 0;
  MPI_Status status;
  while (true) {
    MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, kQueryTag, comm_, &pending, &status));
    if (pending == 0) break;
    const std::string query = receive(status);
    const auto newline = query.find('\n');
    const std::string group = query.substr(0, newline);
    const std::int64_t seq = newline == std::string::npos ? 0 : std::atoll(query.c_str() + newline + 1);
    const CommActivity& activity = CommActivity::process();
    const bool arrived = seq > 0 && activity.arrived(group, seq);
    send(status.MPI_SOURCE, kAnswerTag,
         fmt::format("{} {}", arrived ? 1 : 0, CommActivity::describe(activity.snapshot(), Clock::now())));
  }
  outgoing_.remove_if([](Outgoing& o) {
    int done = 0;
    MPI_CHECK(MPI_Test(&o.request, &done, MPI_STATUS_IGNORE));
    return done != 0;
  });
  MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, kNoticeTag, comm_, &pending, &status));
  if (pending == 0) return {};
  Notice notice;
  notice.text = receive(status);
  notice.from = status.MPI_SOURCE;
  return notice;
}

int MpiWatchdog::linger(double seconds, int wanted_acks) {
  const auto start = Clock::now();
  int acks = 0;
  while (seconds_since(start) < seconds && (wanted_acks == 0 || acks < wanted_acks)) {
    // Another rank's notice changes nothing (this one has said its line already): it is acknowledged.
    if (const Notice other = serve(); other.from >= 0) send(other.from, kAckTag, "printed");
    int pending = 0;
    MPI_Status status;
    MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, kAckTag, comm_, &pending, &status));
    if (pending != 0) {
      receive(status);
      ++acks;
      continue;
    }
    std::this_thread::sleep_for(kPollPeriod);
  }
  return acks;
}

void MpiWatchdog::fire(const CommActivity::Snapshot& stuck) {
  const CommActivity::Wait& w = stuck.wait;
  // Ask the members (a collective) or the peer (a send or receive) what they are doing.
  std::vector<int> asked;
  for (int r : w.ranks)
    if (r != rank_) asked.push_back(r);
  for (int r : asked) send(r, kQueryTag, fmt::format("{}\n{}", w.group, w.seq));
  std::vector<std::pair<int, std::string>> answers;  // (rank, "1 state" / "0 state")
  std::vector<int> early_notices;
  const auto asked_at = Clock::now();
  while (answers.size() < asked.size() && seconds_since(asked_at) < kAnswerWindowS) {
    // A rank diagnosing at the same time must get our answer; its notice is acknowledged once
    // our own line is out (below).
    if (const Notice other = serve(); other.from >= 0) early_notices.push_back(other.from);
    int pending = 0;
    MPI_Status status;
    MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, kAnswerTag, comm_, &pending, &status));
    if (pending != 0)
      answers.emplace_back(status.MPI_SOURCE, receive(status));
    else
      std::this_thread::sleep_for(kPollPeriod);
  }
  std::vector<std::string> missing;
  for (int r : asked) {
    const auto a = std::find_if(answers.begin(), answers.end(), [r](const auto& x) { return x.first == r; });
    if (a == answers.end())
      missing.push_back(fmt::format("rank {} (its watchdog did not answer within {:.0f} s)", r, kAnswerWindowS));
    else if (w.seq == 0 || a->second.compare(0, 1, "0") == 0)
      missing.push_back(fmt::format("rank {} ({})", r, a->second.substr(2)));
  }
  const std::string what = fmt::format("{}{} at step {} made no progress for {:.0f} s", CommActivity::describe(w),
                                       stuck.on_device ? " (on the GPU)" : "", stuck.step, seconds_since(w.since));
  std::string who;
  if (w.seq == 0)
    who = missing.empty() ? std::string() : "; the peer: " + missing.front();
  else if (missing.empty())
    who = fmt::format("; every rank of {} arrived ({}): the transfer itself is stuck", w.group, rank_list(w.ranks));
  else
    who = "; did not arrive: " + [&] {
      std::string s;
      for (const std::string& m : missing) s += (s.empty() ? "" : ", ") + m;
      return s;
    }();
  end_job(fmt::format("{} (--comm-timeout {:g}){}", what, timeout_s_, who), what, early_notices);
}

void MpiWatchdog::fail_on_device_error(const CommActivity::Snapshot& s) {
  const std::string what =
      fmt::format("{}, at step {}{}", s.device_error, s.step,
                  s.waiting ? fmt::format(" (oldest unfinished: {})", CommActivity::describe(s.wait)) : std::string());
  end_job(what, what, {});
}

void MpiWatchdog::end_job(const std::string& line, const std::string& what, const std::vector<int>& early_notices) {
  std::fprintf(stderr, "loom: rank %d: watchdog: %s; aborting the job (exit %d)\n", rank_, line.c_str(),
               kExitCommunicationTimeout);
  std::fflush(stderr);
  for (int r : early_notices) send(r, kAckTag, "printed");
  for (int r = 0; r < size_; ++r)
    if (r != rank_) send(r, kNoticeTag, fmt::format("rank {} reports {}", rank_, what));
  if (size_ > 1) linger(kAckWindowS, size_ - 1);  // every rank has said its line, or one is frozen
  abort_device_work();
  MPI_Abort(MPI_COMM_WORLD, kExitCommunicationTimeout);
  std::_Exit(kExitCommunicationTimeout);
}

void MpiWatchdog::stop_on_notice(const Notice& notice) {
  std::fprintf(stderr, "loom: rank %d: watchdog: stopping: %s; this rank: %s\n", rank_, notice.text.c_str(),
               CommActivity::describe(CommActivity::process().snapshot(), Clock::now()).c_str());
  std::fflush(stderr);
  // This rank's device work is abandoned before the acknowledgement: the reporting rank ends the job as
  // soon as every rank has acknowledged, which leaves no time after it.
  abort_device_work();
  send(notice.from, kAckTag, "printed");
  // The reporting rank aborts the job once every rank has printed; should it be gone, this one does.
  linger(kAckWindowS + kAnswerWindowS);
  MPI_Abort(MPI_COMM_WORLD, kExitCommunicationTimeout);
  std::_Exit(kExitCommunicationTimeout);
}

}  // namespace loom::exec
