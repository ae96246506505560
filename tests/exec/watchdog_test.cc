// The communication watchdog, as real `loom run` processes under mpirun: one rank stops answering
// mid-step (it sleeps, alive) and every other rank reports it and the job ends with exit 4 within
// the timeout, no process left behind; the runs without a hang are every other multi-rank test.
// Also what the watchdog reads — CommActivity — on its own, in one process, and the watchdog over
// device queues (the NCCL communicator's unfinished operations and asynchronous errors), with queues
// that stand in for NCCL's so that it runs without a GPU (watchdog_device_helper.cc under mpirun).
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <regex>
#include <sstream>

#include <fmt/format.h>

#include "exec/comm_activity.h"
#include "run_util.h"

namespace loom::exec::testing {
namespace {

// The lines of `err` that rank `rank`'s watchdog printed.
std::vector<std::string> watchdog_lines(const std::string& err, int rank) {
  std::vector<std::string> lines;
  std::istringstream in(err);
  const std::string prefix = fmt::format("loom: rank {}: watchdog: ", rank);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) lines.push_back(line);
  return lines;
}

// Runs the micro model for 4 steps with `layout` on `ranks` ranks, world rank `hung` sleeping from
// step 2 on, a 5 s timeout; checks what every such run must show and returns its output.
ProcessResult run_with_hang(const std::string& layout, int ranks, int hung) {
  const std::string dir = scratch_dir(fmt::format("watchdog_hang_{}", ranks));
  const std::string data = make_token_file(dir, 5000);
  const auto start = std::chrono::steady_clock::now();
  const ProcessResult r = run_shell(fmt::format("LOOM_TEST_HANG={}:2 {} --model {} --data {} --steps 4 {} "
                                                "--global-batch 4 --threads 1 --comm-timeout 5",
                                                hung, loom_run(ranks), test_model("micro"), data, layout),
                                    120);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.exit_code, 124) << "the job hung: the watchdog did not end it\n" << r.err;
  EXPECT_EQ(r.exit_code, kExitCommunicationTimeout) << r.err;
  // The timeout, the answers (a poll period each) and start-up: far below the 120 s of a hang.
  EXPECT_LT(elapsed, 60) << r.err;
  EXPECT_NE(r.out.find("step     1/4"), std::string::npos) << "step 1 runs before the hang:\n" << r.out;
  EXPECT_EQ(r.out.find("step     2/4"), std::string::npos) << r.out;
  // Every rank says exactly one line; the stuck one too (its watchdog thread is alive).
  for (int rank = 0; rank < ranks; ++rank)
    EXPECT_EQ(watchdog_lines(r.err, rank).size(), 1u) << "rank " << rank << "\n" << r.err;
  // mpirun ended every process, the sleeping one too.
  const ProcessResult left = run_shell(fmt::format("pgrep -f -- \"[l]oom run.*{}\" || true", data), 10);
  EXPECT_EQ(left.out, "") << "processes left behind";
  return r;
}

// A rank told by another rank's watchdog says its own state.
const std::regex kTold(R"(loom: rank \d: watchdog: stopping: rank \d reports .* at step 2 made no progress .*; )"
                       R"(this rank: step 2, .*)");

TEST(ExecWatchdog, HungRankIsNamedByTheRanksWaitingInCollectives) {
  if (!have_mpirun()) GTEST_SKIP() << "built without MPI: the watchdog runs over MPI";
  // TP 2 × DP 2: ranks {0,1} and {2,3} are TP pairs, {0,2} and {1,3} DP pairs. Rank 3 sleeps before
  // its first backward of step 2: its TP partner 2 waits in a TP all-reduce of that backward, rank 1
  // in the DP gradient reduction with 3, and rank 0 in the DP reduction with 2, which is itself stuck.
  const ProcessResult r = run_with_hang("--tp 2 --dp 2", 4, 3);
  // A rank reports its own timed-out op (group, op and number, the step, and who did not arrive).
  const std::regex reported(
      R"(loom: rank \d: watchdog: (tp|dp) all_reduce #\d+ at step 2 made no progress for \d+ s \(--comm-timeout 5\); )"
      R"(did not arrive: rank (\d) \(step 2, (not in a communication call|waiting in tp all_reduce #\d+) for [\d.]+ s\); )"
      R"(aborting the job \(exit 4\))");
  int naming_rank_3 = 0;
  for (int rank = 0; rank < 4; ++rank)
    for (const std::string& line : watchdog_lines(r.err, rank)) {
      std::smatch m;
      if (!std::regex_match(line, m, reported)) {
        EXPECT_TRUE(std::regex_match(line, kTold)) << line;
        continue;
      }
      // Who did not arrive is right: rank 3 is the stuck one, rank 2 is stuck behind it.
      if (m[2] == "3") {
        EXPECT_EQ(m[3].str(), "not in a communication call") << line;
        ++naming_rank_3;
      } else {
        EXPECT_EQ(m[2].str(), "2") << line;
        EXPECT_EQ(rank, 0) << "only rank 0 waits for rank 2: " << line;
        EXPECT_EQ(m[1].str(), "dp") << line;
      }
    }
  // Ranks 1 and 2 wait for rank 3 directly; at least one of them times out before another's notice.
  EXPECT_GE(naming_rank_3, 1) << r.err;
}

TEST(ExecWatchdog, HungPipelineStageIsNamedByItsPeer) {
  if (!have_mpirun()) GTEST_SKIP() << "built without MPI: the watchdog runs over MPI";
  // PP 2: the last stage sleeps before its first backward; the first stage waits for that
  // backward's gradient (or for its own activation send to complete) from rank 1.
  const ProcessResult r = run_with_hang("--pp 2", 2, 1);
  const std::vector<std::string> first = watchdog_lines(r.err, 0);
  ASSERT_EQ(first.size(), 1u) << r.err;
  EXPECT_TRUE(std::regex_match(
      first[0], std::regex(R"(loom: rank 0: watchdog: pp (recv from|send to) rank 1 at step 2 made no progress )"
                           R"(for \d+ s \(--comm-timeout 5\); the peer: rank 1 \(step 2, not in a communication )"
                           R"(call for [\d.]+ s\); aborting the job \(exit 4\))")))
      << first[0];
  const std::vector<std::string> stuck = watchdog_lines(r.err, 1);
  ASSERT_EQ(stuck.size(), 1u) << r.err;
  EXPECT_TRUE(std::regex_match(stuck[0], kTold)) << stuck[0];
}

TEST(ExecWatchdog, BadTimeoutIsRefusedInOneLine) {
  const std::string dir = scratch_dir("watchdog_bad");
  const std::string data = make_token_file(dir, 5000);
  const ProcessResult r = run_shell(
      fmt::format("{} --model {} --data {} --steps 1 --comm-timeout -3", loom_run(1), test_model("micro"), data), 60);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(count_lines_starting(r.err, "loom:"), 1) << r.err;
  EXPECT_NE(r.err.find("--comm-timeout: -3"), std::string::npos) << r.err;
}

TEST(CommActivity, CountsCollectivesPerGroupAndRecordsTheWait) {
  CommActivity& a = CommActivity::process();
  const std::int64_t first = a.issue("test-x");
  EXPECT_EQ(a.issue("test-x"), first + 1);
  const std::int64_t other = a.issue("test-y");  // each group counts on its own
  EXPECT_EQ(a.issue("test-y"), other + 1);
  EXPECT_EQ(a.issue("test-x"), first + 2);
  EXPECT_TRUE(a.arrived("test-x", first + 2));
  EXPECT_FALSE(a.arrived("test-x", first + 3));
  EXPECT_FALSE(a.arrived("test-never", 1));

  a.set_step(7);
  EXPECT_FALSE(a.snapshot().waiting);
  {
    const CommActivity::Blocked blocked("test-x", "all_reduce", first + 1, {4, 5});
    const CommActivity::Snapshot s = a.snapshot();
    ASSERT_TRUE(s.waiting);
    EXPECT_EQ(s.wait.ranks, (std::vector<int>{4, 5}));
    const std::string text = CommActivity::describe(s, s.wait.since + std::chrono::milliseconds(2500));
    EXPECT_EQ(text, fmt::format("step 7, waiting in test-x all_reduce #{} for 2.5 s", first + 1));
  }
  const CommActivity::Snapshot idle = a.snapshot();
  EXPECT_FALSE(idle.waiting);
  EXPECT_EQ(CommActivity::describe(idle, idle.idle_since + std::chrono::seconds(3)),
            "step 7, not in a communication call for 3.0 s");
  const CommActivity::Blocked send("pp", "send", 0, {3});
  EXPECT_EQ(CommActivity::describe(a.snapshot().wait), "pp send to rank 3");
}

// A device queue standing in for an NCCL communicator.
class FakeQueue final : public CommActivity::DeviceQueue {
 public:
  std::optional<Pending> pending;
  std::string error;
  int aborts = 0;
  std::optional<Pending> oldest_pending() override { return pending; }
  std::string async_error() override { return error; }
  void abort() override { ++aborts; }
};

// Attached to the process's CommActivity for a scope: an assertion that ends a test early leaves none behind.
class Attached {
 public:
  explicit Attached(FakeQueue& q) : q_(q) { CommActivity::process().attach(q_); }
  ~Attached() { CommActivity::process().detach(q_); }
  Attached(const Attached&) = delete;
  Attached& operator=(const Attached&) = delete;

 private:
  FakeQueue& q_;
};

TEST(CommActivity, ReportsTheOldestUnfinishedDeviceOperationWhenTheHostIsInNoOlderCall) {
  CommActivity& a = CommActivity::process();
  a.set_step(9);
  FakeQueue older, newer;
  const auto now = CommActivity::Clock::now();
  newer.pending = FakeQueue::Pending{{"dp", "all_gather", 4, {0, 2}, now - std::chrono::seconds(1)}, 8};
  older.pending = FakeQueue::Pending{{"tp", "all_reduce", 12, {0, 1}, now - std::chrono::seconds(5)}, 8};
  CommActivity::Snapshot s;
  {
    const Attached attach_newer(newer), attach_older(older);
    s = a.snapshot();
    ASSERT_TRUE(s.waiting);
    EXPECT_TRUE(s.on_device);
    EXPECT_EQ(s.wait.group, "tp");
    EXPECT_EQ(s.wait.seq, 12);
    EXPECT_EQ(s.step, 8) << "the step the operation was queued in";
    EXPECT_EQ(CommActivity::describe(s, s.wait.since + std::chrono::milliseconds(31200)),
              "step 8, waiting in tp all_reduce #12 (on the GPU) for 31.2 s");
    EXPECT_TRUE(s.device_error.empty());
    {
      // Whichever is older, a host call or a device operation, is what the watchdog reports.
      const CommActivity::Blocked blocked("world", "all_reduce", 1, {0, 1});
      s = a.snapshot();
      EXPECT_TRUE(s.on_device);
      EXPECT_EQ(s.wait.group, "tp") << "queued 5 s before the host call began";
      older.pending->wait.since = newer.pending->wait.since = CommActivity::Clock::now() + std::chrono::seconds(1);
      s = a.snapshot();
      EXPECT_FALSE(s.on_device);
      EXPECT_EQ(s.wait.group, "world");
      EXPECT_EQ(s.step, 9);
    }
    newer.error = "NCCL reported an error on dp: remote process exited or there was a network error";
    EXPECT_EQ(a.snapshot().device_error, newer.error);
    a.abort_device_queues();
    EXPECT_EQ(older.aborts, 1);
    EXPECT_EQ(newer.aborts, 1);
  }
  s = a.snapshot();
  EXPECT_FALSE(s.waiting) << "detached queues are not asked";
  EXPECT_TRUE(s.device_error.empty());
  a.abort_device_queues();
  EXPECT_EQ(older.aborts, 1);
}

// The watchdog over device queues, 2 ranks: an operation queued on rank 0 that never finishes, which rank 1
// never issued; then an asynchronous error on rank 1. Each ends the job with exit 4 and one line per rank,
// every rank's queues abandoned first.
ProcessResult run_device_helper(const std::string& mode) {
  const std::string command = fmt::format("{} {} {}", mpirun_prefix(2), LOOM_WATCHDOG_DEVICE_HELPER, mode);
  const auto start = std::chrono::steady_clock::now();
  ProcessResult r = run_shell(command, 120);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, kExitCommunicationTimeout) << r.out << r.err;
  EXPECT_EQ(r.out.find("not stopped"), std::string::npos) << r.out;
  EXPECT_LT(elapsed, 25) << "the helper sleeps 60 s unless the watchdog ends it\n" << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(watchdog_lines(r.err, rank).size(), 1u) << "rank " << rank << "\n" << r.err;
    EXPECT_NE(r.err.find(fmt::format("rank {}: device queue abandoned", rank)), std::string::npos) << r.err;
  }
  return r;
}

TEST(ExecWatchdog, UnfinishedDeviceOperationIsReportedWithTheRankThatDidNotArrive) {
  if (!have_mpirun()) GTEST_SKIP() << "built without MPI: the watchdog runs over MPI";
  const ProcessResult r = run_device_helper("timeout");
  const std::vector<std::string> first = watchdog_lines(r.err, 0);
  ASSERT_EQ(first.size(), 1u) << r.err;
  EXPECT_TRUE(std::regex_match(
      first[0],
      std::regex(R"(loom: rank 0: watchdog: tp all_reduce #1 \(on the GPU\) at step 3 made no progress for )"
                 R"(\d+ s \(--comm-timeout 1\); did not arrive: rank 1 \(step 3, not in a communication call )"
                 R"(for [\d.]+ s\); aborting the job \(exit 4\))")))
      << first[0];
  const std::vector<std::string> second = watchdog_lines(r.err, 1);
  ASSERT_EQ(second.size(), 1u) << r.err;
  EXPECT_TRUE(
      std::regex_match(second[0], std::regex(R"(loom: rank 1: watchdog: stopping: rank 0 reports tp all_reduce )"
                                             R"(#1 \(on the GPU\) at step 3 made no progress .*)")))
      << second[0];
}

TEST(ExecWatchdog, AsynchronousDeviceErrorEndsTheJobAtOnce) {
  if (!have_mpirun()) GTEST_SKIP() << "built without MPI: the watchdog runs over MPI";
  const ProcessResult r = run_device_helper("error");
  const std::vector<std::string> reporting = watchdog_lines(r.err, 1);
  ASSERT_EQ(reporting.size(), 1u) << r.err;
  EXPECT_EQ(reporting[0],
            "loom: rank 1: watchdog: NCCL reported an error on tp: unhandled system error (injected), at step 3; "
            "aborting the job (exit 4)");
  const std::vector<std::string> told = watchdog_lines(r.err, 0);
  ASSERT_EQ(told.size(), 1u) << r.err;
  EXPECT_EQ(told[0].rfind("loom: rank 0: watchdog: stopping: rank 1 reports NCCL reported an error on tp", 0), 0u)
      << told[0];
}

}  // namespace
}  // namespace loom::exec::testing
