// Chrome/Perfetto trace of one rank's execution: complete ("X") slices named as in
// core/trace_names.h, so a measured step can be laid beside the simulator's trace of the same plan.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace loom::exec {

class Tracer {
 public:
  explicit Tracer(int rank = 0) : rank_(rank), start_(std::chrono::steady_clock::now()) {}
  void set_enabled(bool enabled) { enabled_ = enabled; }
  bool enabled() const { return enabled_; }
  double now_us() const;
  void add(std::string name, const char* category, double begin_us, double end_us, int lane = 0);
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
  };
  int rank_;
  bool enabled_ = false;
  std::chrono::steady_clock::time_point start_;
  std::vector<Slice> slices_;
  std::string run_description_;
};

// Records one slice from construction to destruction.
class TraceScope {
 public:
  TraceScope(Tracer* tracer, std::string name, const char* category, int lane = 0)
      : tracer_(tracer != nullptr && tracer->enabled() ? tracer : nullptr), lane_(lane), category_(category) {
    if (tracer_ != nullptr) {
      name_ = std::move(name);
      begin_us_ = tracer_->now_us();
    }
  }
  ~TraceScope() {
    if (tracer_ != nullptr) tracer_->add(std::move(name_), category_, begin_us_, tracer_->now_us(), lane_);
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  Tracer* tracer_;
  int lane_;
  const char* category_;
  std::string name_;
  double begin_us_ = 0;
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
    end();
    name_ = name;
    begin_us_ = tracer_->now_us();
  }
  void end() {
    if (tracer_ == nullptr || name_ == nullptr) return;
    tracer_->add(name_, "op", begin_us_, tracer_->now_us(), lane_);
    name_ = nullptr;
  }

 private:
  Tracer* tracer_;
  int lane_;
  const char* name_ = nullptr;
  double begin_us_ = 0;
};

inline constexpr int kComputeLane = 0;
inline constexpr int kCommLane = 1;

}  // namespace loom::exec
