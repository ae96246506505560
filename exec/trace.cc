#include "exec/trace.h"

#include <nlohmann/json.hpp>

namespace loom::exec {

double Tracer::now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_).count();
}

void Tracer::add(std::string name, const char* category, double begin_us, double end_us, int lane) {
  if (enabled_) slices_.push_back({std::move(name), category, begin_us, end_us, lane});
}

std::string Tracer::to_json() const {
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
