#include "exec/trace.h"

#include <cstring>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "exec/backend.h"

namespace loom::exec {

double Tracer::now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_).count();
}

void Tracer::add(std::string name, const char* category, double begin_us, double end_us, int lane) {
  add(std::move(name), category, Mark{begin_us, nullptr}, Mark{end_us, nullptr}, lane);
}

Tracer::Mark Tracer::mark(int lane) {
  if (!enabled_ || clock_ == nullptr || lane != kComputeLane) return {now_us(), nullptr};
  if (anchor_ == nullptr) {  // the device catches up once, so that its clock meets the host's here
    anchor_ = clock_->record_timed_event();
    anchor_->synchronize();
    anchor_us_ = now_us();
  }
  return {0.0, clock_->record_timed_event()};
}

void Tracer::add(std::string name, const char* category, Mark begin, Mark end, int lane) {
  if (!enabled_) return;
  if (!op_prefix_.empty() && std::strcmp(category, "op") == 0) name.insert(0, op_prefix_);
  slices_.push_back({std::move(name), category, begin.us, end.us, lane, std::move(begin.event), std::move(end.event)});
}

double Tracer::device_us(TimedEvent& event) { return anchor_us_ + event.microseconds_since(*anchor_); }

void Tracer::resolve() {
  for (; unresolved_ < slices_.size(); ++unresolved_) {
    Slice& s = slices_[unresolved_];
    if (s.begin_event != nullptr) s.begin_us = device_us(*s.begin_event);
    if (s.end_event != nullptr) s.end_us = device_us(*s.end_event);
    s.begin_event.reset();
    s.end_event.reset();
  }
  anchor_.reset();  // the next step's events are timed from an anchor of their own (fp32 milliseconds)
}

std::string Tracer::to_json() const {
  for (std::size_t i = unresolved_; i < slices_.size(); ++i)
    if (slices_[i].begin_event != nullptr || slices_[i].end_event != nullptr)
      throw std::logic_error("Tracer::to_json: device-timed slices not resolved");
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  events.push_back(
      {{"name", "process_name"}, {"ph", "M"}, {"pid", rank_}, {"args", {{"name", "rank " + std::to_string(rank_)}}}});
  events.push_back(
      {{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", kComputeLane}, {"args", {{"name", "compute"}}}});
  events.push_back({{"name", "thread_name"},
                    {"ph", "M"},
                    {"pid", rank_},
                    {"tid", kCommLane},
                    {"args", {{"name", "communication"}}}});
  for (const Slice& s : slices_)
    events.push_back({{"name", s.name},
                      {"cat", s.category},
                      {"ph", "X"},
                      {"pid", rank_},
                      {"tid", s.lane},
                      {"ts", s.begin_us},
                      {"dur", s.end_us - s.begin_us}});
  nlohmann::ordered_json root = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  if (!run_description_.empty()) root["otherData"] = {{"loom_run", nlohmann::ordered_json::parse(run_description_)}};
  return root.dump();
}

}  // namespace loom::exec
