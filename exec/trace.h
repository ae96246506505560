// Chrome/Perfetto trace of one rank's execution: complete ("X") slices named as in
// core/trace_names.h, so a measured step can be laid beside the simulator's trace of the same plan.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace loom::exec {

class Backend;
class TimedEvent;

class Tracer {
 public:
  explicit Tracer(int rank = 0) : rank_(rank), start_(std::chrono::steady_clock::now()) {}
  void set_enabled(bool enabled) { enabled_ = enabled; }
  bool enabled() const { return enabled_; }
  // Slices of the compute lane (passes, ops, the optimizer) timed where the backend's queue reaches
  // their ends (Backend::record_timed_event: CUDA events on a GPU, the host's clock on the CPU) rather
  // than when the host queued the work, which on a GPU runs ahead of it. Communication lanes keep the
  // host's clock: what they show is when the rank waited.
  void use_clock_of(Backend* backend) { clock_ = backend; }
  double now_us() const;
  // One end of a slice: a point in the backend's queue on the compute lane when a clock is set, else
  // the host's time.
  struct Mark {
    double us = 0;
    std::shared_ptr<TimedEvent> event;
  };
  Mark mark(int lane);
  // Prefixed to the name of every "op" slice added while set: full recomputation names the ops it runs
  // again "recompute <op>", as the simulator does (OpPrefix sets it for a scope).
  void set_op_prefix(std::string prefix) { op_prefix_ = std::move(prefix); }
  const std::string& op_prefix() const { return op_prefix_; }
  void add(std::string name, const char* category, double begin_us, double end_us, int lane = 0);
  void add(std::string name, const char* category, Mark begin, Mark end, int lane);
  // The marks of the slices added so far turned into times on the trace's timeline: waits for the device
  // to reach them. The trainer calls it after each step (whose end waits for the device anyway) so that
  // a step's events are released and timed against an anchor of their own step; to_json() wants it done.
  void resolve();
  // What was run (a JSON object: model, config, batch), kept in the trace's "otherData" so that
  // `loom calibrate` can simulate the same run from the trace alone.
  void set_run_description(std::string json_object) { run_description_ = std::move(json_object); }
  // The trace as Chrome's JSON object format ({"traceEvents": [...]}).
  std::string to_json() const;

 private:
  struct Slice {
    std::string name;
    const char* category;
    double begin_us, end_us;
    int lane;
    std::shared_ptr<TimedEvent> begin_event, end_event;  // until resolve()
  };
  double device_us(TimedEvent& event);
  int rank_;
  bool enabled_ = false;
  std::chrono::steady_clock::time_point start_;
  std::vector<Slice> slices_;
  std::size_t unresolved_ = 0;  // slices_[unresolved_..] may hold events
  std::string run_description_;
  std::string op_prefix_;
  Backend* clock_ = nullptr;
  // A point the device reached at a known time on the trace's timeline: every event is timed from it.
  std::shared_ptr<TimedEvent> anchor_;
  double anchor_us_ = 0;
};

// Records one slice from construction to destruction.
class TraceScope {
 public:
  TraceScope(Tracer* tracer, std::string name, const char* category, int lane = 0)
      : tracer_(tracer != nullptr && tracer->enabled() ? tracer : nullptr), lane_(lane), category_(category) {
    if (tracer_ != nullptr) {
      name_ = std::move(name);
      begin_ = tracer_->mark(lane_);
    }
  }
  ~TraceScope() {
    if (tracer_ != nullptr) tracer_->add(std::move(name_), category_, std::move(begin_), tracer_->mark(lane_), lane_);
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  Tracer* tracer_;
  int lane_;
  const char* category_;
  std::string name_;
  Tracer::Mark begin_;
};

// Lanes (Chrome "tid") of a rank's trace.
// Consecutive op slices inside a pass, named like the simulator's kernels ("qkv", "mlp_up_bwd"),
// so a measured and a simulated pass can be compared op by op: next() closes the running slice
// and opens the next one; end() closes it (before communication, traced on its own lane).
class OpSlices {
 public:
  OpSlices(Tracer* tracer, int lane)
      : tracer_(tracer != nullptr && tracer->enabled() ? tracer : nullptr), lane_(lane) {}
  ~OpSlices() { end(); }
  OpSlices(const OpSlices&) = delete;
  OpSlices& operator=(const OpSlices&) = delete;
  void next(const char* name) {
    if (tracer_ == nullptr) return;
    Tracer::Mark at = tracer_->mark(lane_);  // one point ends the running slice and begins the next
    if (name_ != nullptr) tracer_->add(name_, "op", std::move(begin_), at, lane_);
    name_ = name;
    begin_ = std::move(at);
  }
  void end() {
    if (tracer_ == nullptr || name_ == nullptr) return;
    tracer_->add(name_, "op", std::move(begin_), tracer_->mark(lane_), lane_);
    name_ = nullptr;
  }

 private:
  Tracer* tracer_;
  int lane_;
  const char* name_ = nullptr;
  Tracer::Mark begin_;
};

// Tracer::set_op_prefix for a scope (nothing without a tracer).
class OpPrefix {
 public:
  OpPrefix(Tracer* tracer, std::string prefix) : tracer_(tracer) {
    if (tracer_ == nullptr) return;
    previous_ = tracer_->op_prefix();
    tracer_->set_op_prefix(std::move(prefix));
  }
  ~OpPrefix() {
    if (tracer_ != nullptr) tracer_->set_op_prefix(std::move(previous_));
  }
  OpPrefix(const OpPrefix&) = delete;
  OpPrefix& operator=(const OpPrefix&) = delete;

 private:
  Tracer* tracer_;
  std::string previous_;
};

inline constexpr int kComputeLane = 0;
inline constexpr int kCommLane = 1;

}  // namespace loom::exec
