#include "core/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace loom {

unsigned thread_count(int threads) {
  return threads > 0 ? static_cast<unsigned>(threads) : std::max(1u, std::thread::hardware_concurrency());
}

namespace {

// Workers started once and kept: a bounded plan search runs a loop per batch of a few configurations,
// and starting and joining threads for each cost more than the batches' own work on a 2-core VM
// (bench_planner EveryDimension). One loop runs at a time; a loop started from a worker, or while
// another runs, runs on its caller's thread alone. The workers wait for the next loop until the
// process exits, where the pool's destructor stops and joins them (threads left running at exit are
// reported as leaks by LeakSanitizer); no loop may run then (the GUI waits for its searches first).
class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  // False (nothing run) when the pool is busy or the caller is one of its workers.
  bool run(std::size_t n, std::size_t helpers, const std::function<void(std::size_t)>& fn) {
    if (in_worker_) return false;
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      while (threads_.size() < helpers) threads_.emplace_back([this] { work(); });
      fn_ = &fn;
      n_ = n;
      next_.store(0);
      wanted_ = helpers;
      running_ = 0;
      ++generation_;
    }
    wake_.notify_all();
    drain(fn, n);
    std::unique_lock<std::mutex> lock(mutex_);
    // Every helper that took this loop has finished its last index; the others never will take it.
    done_.wait(lock, [this] { return running_ == 0; });
    wanted_ = 0;
    fn_ = nullptr;
    return true;
  }

 private:
  void drain(const std::function<void(std::size_t)>& fn, std::size_t n) {
    for (std::size_t i = next_++; i < n; i = next_++) fn(i);
  }

  void work() {
    in_worker_ = true;
    std::uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || (generation_ != seen && wanted_ > 0); });
      if (stopping_) return;
      seen = generation_;
      --wanted_;
      ++running_;
      const std::function<void(std::size_t)>& fn = *fn_;
      const std::size_t n = n_;
      lock.unlock();
      drain(fn, n);
      lock.lock();
      if (--running_ == 0) done_.notify_all();
    }
  }

  static thread_local bool in_worker_;
  std::mutex busy_;   // held by the loop running
  std::mutex mutex_;  // guards what follows
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  const std::function<void(std::size_t)>* fn_ = nullptr;
  std::size_t n_ = 0;
  std::atomic<std::size_t> next_{0};
  std::size_t wanted_ = 0;   // helpers still to join the current loop
  std::size_t running_ = 0;  // helpers inside it
  std::uint64_t generation_ = 0;
  bool stopping_ = false;
};

thread_local bool Pool::in_worker_ = false;

}  // namespace

void parallel_for(std::size_t n, int threads, const std::function<void(std::size_t)>& fn) {
  const std::size_t workers = std::min<std::size_t>(thread_count(threads), n);
  if (workers <= 1) {
    for (std::size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  static Pool pool;
  if (pool.run(n, workers - 1, fn)) return;
  for (std::size_t i = 0; i < n; ++i) fn(i);
}

}  // namespace loom
