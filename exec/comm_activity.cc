#include "exec/comm_activity.h"

#include <algorithm>
#include <string_view>

#include <fmt/format.h>

namespace loom::exec {

CommActivity& CommActivity::process() {
  static CommActivity activity;
  return activity;
}

void CommActivity::set_step(int step) {
  const std::lock_guard<std::mutex> lock(mutex_);
  step_ = step;
}

int CommActivity::step() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return step_;
}

std::int64_t CommActivity::issue(const std::string& group) {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [name, count] : issued_)
    if (name == group) return ++count;
  issued_.emplace_back(group, 1);
  return 1;
}

bool CommActivity::arrived(const std::string& group, std::int64_t seq) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [name, count] : issued_)
    if (name == group) return count >= seq;
  return false;
}

CommActivity::Snapshot CommActivity::snapshot() const {
  Snapshot s;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    s.step = step_;
    s.waiting = waiting_;
    if (waiting_) s.wait = wait_;
    s.idle_since = idle_since_;
  }
  // The training thread queues device work without this record's mutex held; asking the queues under
  // it would order the two locks both ways.
  const std::lock_guard<std::mutex> lock(queues_mutex_);
  for (DeviceQueue* q : queues_) {
    if (s.device_error.empty()) s.device_error = q->async_error();
    const std::optional<DeviceQueue::Pending> p = q->oldest_pending();
    if (p && (!s.waiting || p->wait.since < s.wait.since)) {
      s.waiting = true;
      s.on_device = true;
      s.wait = p->wait;
      s.step = p->step;
    }
  }
  return s;
}

void CommActivity::attach(DeviceQueue& queue) {
  const std::lock_guard<std::mutex> lock(queues_mutex_);
  queues_.push_back(&queue);
}

void CommActivity::detach(DeviceQueue& queue) {
  const std::lock_guard<std::mutex> lock(queues_mutex_);
  std::erase(queues_, &queue);
}

void CommActivity::abort_device_queues() {
  const std::lock_guard<std::mutex> lock(queues_mutex_);
  for (DeviceQueue* q : queues_) q->abort();
}

CommActivity::Blocked::Blocked(const std::string& group, const char* op, std::int64_t seq,
                               const std::vector<int>& ranks) {
  CommActivity& a = process();
  const std::lock_guard<std::mutex> lock(a.mutex_);
  a.waiting_ = true;
  a.wait_.group = group;
  a.wait_.op = op;
  a.wait_.seq = seq;
  a.wait_.ranks = ranks;
  a.wait_.since = Clock::now();
}

CommActivity::Blocked::~Blocked() {
  CommActivity& a = process();
  const std::lock_guard<std::mutex> lock(a.mutex_);
  a.waiting_ = false;
  a.idle_since_ = Clock::now();
}

std::string CommActivity::describe(const Wait& w) {
  if (w.seq > 0) return fmt::format("{} {} #{}", w.group, w.op, w.seq);
  const char* direction = std::string_view(w.op) == "send" ? "to" : "from";
  return fmt::format("{} {} {} rank {}", w.group, w.op, direction, w.ranks.empty() ? -1 : w.ranks.front());
}

std::string CommActivity::describe(const Snapshot& s, Clock::time_point now) {
  const std::string step = s.step > 0 ? fmt::format("step {}", s.step) : std::string("before step 1");
  if (s.waiting)
    return fmt::format("{}, waiting in {}{} for {:.1f} s", step, describe(s.wait), s.on_device ? " (on the GPU)" : "",
                       std::chrono::duration<double>(now - s.wait.since).count());
  return fmt::format("{}, not in a communication call for {:.1f} s", step,
                     std::chrono::duration<double>(now - s.idle_since).count());
}

}  // namespace loom::exec
