// parallel_for's pool: every index runs exactly once, loop after loop on the same workers, with a loop
// started inside a loop or beside one running on another thread (both run on their caller's thread).
#include "core/parallel_for.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace loom {
namespace {

std::vector<int> counts_after(std::size_t n, int threads) {
  std::vector<std::atomic<int>> hits(n);
  parallel_for(n, threads, [&](std::size_t i) { hits[i].fetch_add(1); });
  std::vector<int> out;
  for (auto& h : hits) out.push_back(h.load());
  return out;
}

TEST(ParallelFor, EveryIndexOnceLoopAfterLoop) {
  for (int round = 0; round < 200; ++round)
    for (int threads : {1, 2, 3, 8})
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{7}, std::size_t{100}}) {
        const std::vector<int> hits = counts_after(n, threads);
        for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << "n " << n << " threads " << threads << " i " << i;
      }
}

TEST(ParallelFor, UsesMoreThanTheCallingThread) {
  // Each index waits until two distinct threads have started one: only a second thread can let it go.
  // Run on the calling thread alone, the wait gives up after 10 s and the count below fails.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::mutex mutex;
  std::set<std::thread::id> seen;
  std::atomic<bool> two{false};
  parallel_for(2, 2, [&](std::size_t) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      seen.insert(std::this_thread::get_id());
      if (seen.size() == 2) two = true;
    }
    while (!two && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
  });
  EXPECT_EQ(seen.size(), 2u);
}

TEST(ParallelFor, ALoopInsideALoopRunsWhole) {
  std::vector<std::atomic<int>> hits(16 * 16);
  parallel_for(16, 4,
               [&](std::size_t i) { parallel_for(16, 4, [&](std::size_t j) { hits[i * 16 + j].fetch_add(1); }); });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ParallelFor, LoopsFromTwoThreadsAtOnceBothRunWhole) {
  std::vector<std::atomic<int>> a(5000), b(5000);
  std::thread other([&] {
    for (int round = 0; round < 20; ++round) parallel_for(a.size(), 2, [&](std::size_t i) { a[i].fetch_add(1); });
  });
  for (int round = 0; round < 20; ++round) parallel_for(b.size(), 2, [&](std::size_t i) { b[i].fetch_add(1); });
  other.join();
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].load(), 20) << i;
    ASSERT_EQ(b[i].load(), 20) << i;
  }
}

}  // namespace
}  // namespace loom
