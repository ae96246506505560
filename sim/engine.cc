#include "sim/engine.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace loom::sim {

namespace {

TimeNs progress_point(TimeNs start, TimeNs duration, float fraction) {
  if (fraction >= 1.0f) return start + duration;
  return start + static_cast<TimeNs>(std::llround(static_cast<double>(duration) * fraction));
}

}  // namespace

// Every stream is in-order and every duration is known when an op starts, so an op's start time
// is fixed the moment its last predecessor starts: the engine resolves start events in
// dependency order with a worklist of streams whose head may be ready. This is the event loop of
// a discrete-event simulator specialised to in-order resources, linear in ops + dependencies.
Result<Timeline> run_engine(const StepGraph& g, const Timeline* previous, TimeNs unchanged_before) {
  const std::size_t n = g.size();
  const StepGraph::Edges& edges = g.successors();
  // Ops of each stream in insertion order, as one flat array (counting sort by stream).
  const int streams = g.streams();
  std::vector<std::int32_t> stream_begin(streams + 1, 0);
  for (std::size_t i = 0; i < n; ++i) ++stream_begin[g.op(static_cast<std::int32_t>(i)).stream + 1];
  for (int s = 0; s < streams; ++s) stream_begin[s + 1] += stream_begin[s];
  thread_local std::vector<std::int32_t> stream_order;
  stream_order.resize(n);
  {
    std::vector<std::int32_t> fill(stream_begin.begin(), stream_begin.end() - 1);
    for (std::size_t i = 0; i < n; ++i) {
      const auto op = static_cast<std::int32_t>(i);
      stream_order[fill[g.op(op).stream]++] = op;
    }
  }
  auto stream_size = [&](int s) { return static_cast<std::size_t>(stream_begin[s + 1] - stream_begin[s]); };
  auto stream_at = [&](int s, std::size_t k) { return stream_order[stream_begin[s] + k]; };

  Timeline t;
  t.start.assign(n, -1);
  t.binding.assign(n, -1);
  // Scratch reused across runs on this thread: the planner runs thousands of steps back to back.
  thread_local std::vector<std::int32_t> pending;
  thread_local std::vector<TimeNs> ready_at;
  thread_local std::vector<std::int32_t> ready_by;
  thread_local std::vector<std::size_t> position;
  thread_local std::vector<TimeNs> stream_free;
  thread_local std::vector<std::int32_t> stream_last;
  thread_local std::vector<int> worklist;
  pending.assign(edges.in_degree.begin(), edges.in_degree.end());
  ready_at.assign(n, 0);
  ready_by.assign(n, -1);
  position.assign(streams, 0);
  stream_free.assign(streams, 0);
  stream_last.assign(streams, -1);
  worklist.clear();
  worklist.reserve(2 * streams);
  for (int s = streams - 1; s >= 0; --s) worklist.push_back(s);

  std::size_t started = 0;
  // An op has started: its successors learn when they may start (`point`) and wait for one fewer.
  auto release = [&](std::int32_t op, TimeNs start, TimeNs duration, int s, bool schedule) {
    for (std::int32_t e = edges.offsets[op]; e < edges.offsets[op + 1]; ++e) {
      const auto& edge = edges.edges[e];
      const TimeNs point = progress_point(start, duration, edge.fraction);
      if (point > ready_at[edge.to] || ready_by[edge.to] < 0) {
        ready_at[edge.to] = std::max(ready_at[edge.to], point);
        if (point >= ready_at[edge.to]) ready_by[edge.to] = op;
      }
      if (--pending[edge.to] == 0 && schedule) {
        const int next = g.op(edge.to).stream;
        if (next != s && position[next] < stream_size(next) && stream_at(next, position[next]) == edge.to)
          worklist.push_back(next);
      }
    }
  };
  if (previous != nullptr) {
    // Ops that started before `unchanged_before` start where they did: what changed starts later,
    // and an op never starts before what it waits for. On each stream they are a prefix.
    for (int s = 0; s < streams; ++s) {
      while (position[s] < stream_size(s)) {
        const std::int32_t op = stream_at(s, position[s]);
        const TimeNs start = previous->start[op];
        if (start >= unchanged_before) break;
        t.start[op] = start;
        t.binding[op] = previous->binding[op];
        stream_free[s] = start + g.op(op).duration;
        stream_last[s] = op;
        t.makespan = std::max(t.makespan, stream_free[s]);
        ++position[s];
        ++started;
      }
      for (std::size_t k = 0; k < position[s]; ++k) {
        const std::int32_t op = stream_at(s, k);
        release(op, t.start[op], g.op(op).duration, s, false);
      }
    }
  }
  while (!worklist.empty()) {
    const int s = worklist.back();
    worklist.pop_back();
    while (position[s] < stream_size(s)) {
      const std::int32_t op = stream_at(s, position[s]);
      if (pending[op] > 0) break;
      TimeNs start = ready_at[op];
      t.binding[op] = ready_by[op];
      if (stream_free[s] > start) {
        start = stream_free[s];
        t.binding[op] = stream_last[s];
      }
      const TimeNs duration = g.op(op).duration;
      t.start[op] = start;
      stream_free[s] = start + duration;
      stream_last[s] = op;
      t.makespan = std::max(t.makespan, start + duration);
      ++position[s];
      ++started;
      release(op, start, duration, s, true);
    }
  }
  if (started != n) {
    for (int s = 0; s < streams; ++s) {
      if (position[s] < stream_size(s)) {
        const Op& stuck = g.op(stream_at(s, position[s]));
        return make_error(fmt::format("schedule deadlocks: {} of stage {} micro-batch {} can never start",
                                      to_string(stuck.kind), stuck.stage, stuck.micro_batch));
      }
    }
  }
  return t;
}

std::vector<std::int32_t> critical_path(const StepGraph& g, const Timeline& t) {
  if (g.size() == 0) return {};
  std::int32_t last = 0;
  for (std::int32_t i = 1; i < static_cast<std::int32_t>(g.size()); ++i)
    if (t.end(g, i) > t.end(g, last)) last = i;
  std::vector<std::int32_t> path;
  for (std::int32_t op = last; op >= 0; op = t.binding[op]) path.push_back(op);
  std::reverse(path.begin(), path.end());
  return path;
}

}  // namespace loom::sim
