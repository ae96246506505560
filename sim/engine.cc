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
Result<Timeline> run_engine(const StepGraph& g) {
  const std::size_t n = g.size();
  const StepGraph::Edges& edges = g.successors();
  const int streams = g.streams();
  Timeline t;
  t.start.assign(n, -1);
  t.binding.assign(n, -1);
  t.order.reserve(n);
  // Scratch reused across runs on this thread: the planner runs thousands of steps back to back.
  thread_local std::vector<std::int32_t> pending;
  thread_local std::vector<TimeNs> ready_at;
  thread_local std::vector<std::int32_t> ready_by;
  thread_local std::vector<std::int32_t> head;  // per stream: its next op to start (-1: done)
  thread_local std::vector<TimeNs> stream_free;
  thread_local std::vector<std::int32_t> stream_last;
  thread_local std::vector<int> worklist;
  pending.assign(edges.in_degree.begin(), edges.in_degree.end());
  ready_at.assign(n, 0);
  ready_by.assign(n, -1);
  head.assign(edges.stream_head.begin(), edges.stream_head.end());
  stream_free.assign(streams, 0);
  stream_last.assign(streams, -1);
  worklist.clear();
  worklist.reserve(2 * streams);
  for (int s = streams - 1; s >= 0; --s) worklist.push_back(s);

  // `op` has started: its successors learn when they may (`point`) and wait for one fewer; a
  // successor at the head of its stream with nothing left to wait for is worked on next.
  auto release = [&](std::int32_t op, int s) {
    const TimeNs start = t.start[op], duration = g.op(op).duration;
    for (std::int32_t e = edges.offsets[op]; e < edges.offsets[op + 1]; ++e) {
      const auto& edge = edges.edges[e];
      const TimeNs point = progress_point(start, duration, edge.fraction);
      if (point > ready_at[edge.to] || ready_by[edge.to] < 0) {
        ready_at[edge.to] = std::max(ready_at[edge.to], point);
        if (point >= ready_at[edge.to]) ready_by[edge.to] = op;
      }
      if (--pending[edge.to] == 0) {
        const int next = g.op(edge.to).stream;
        if (next != s && head[next] == edge.to) worklist.push_back(next);
      }
    }
  };

  std::size_t started = 0;
  while (!worklist.empty()) {
    const int s = worklist.back();
    worklist.pop_back();
    while (head[s] >= 0) {
      const std::int32_t op = head[s];
      if (pending[op] > 0) break;
      TimeNs start = ready_at[op];
      t.binding[op] = ready_by[op];
      if (stream_free[s] > start) {
        start = stream_free[s];
        t.binding[op] = stream_last[s];
      }
      t.start[op] = start;
      t.order.push_back(op);
      stream_free[s] = start + g.op(op).duration;
      stream_last[s] = op;
      t.makespan = std::max(t.makespan, stream_free[s]);
      head[s] = edges.stream_next[op];
      ++started;
      release(op, s);
    }
  }
  if (started != n) {
    for (int s = 0; s < streams; ++s) {
      if (head[s] >= 0) {
        const Op& stuck = g.op(head[s]);
        return make_internal_error(fmt::format("schedule deadlocks: {} of stage {} micro-batch {} can never start",
                                               to_string(stuck.kind), stuck.stage, stuck.micro_batch));
      }
    }
  }
  return t;
}

void run_engine_again(const StepGraph& g, Timeline& t, const std::vector<std::int32_t>& lengthened) {
  if (lengthened.empty()) return;
  const StepGraph::Edges& edges = g.successors();
  // The timeline is a longest path over a fixed DAG (dependencies and stream order) whose weights
  // only grew: an op starts at max(old start, new progress of the predecessors that moved).
  // In the old start order (topological) from the first lengthened op on, push what moved.
  thread_local std::vector<std::uint8_t> moved;  // per op: its start or duration changed
  moved.assign(g.size(), 0);
  for (const std::int32_t op : lengthened) moved[op] = 1;
  std::size_t first = 0;  // nothing before the first lengthened op moves
  while (!moved[t.order[first]]) ++first;
  auto push = [&](std::int32_t to, TimeNs point, std::int32_t from) {
    if (point <= t.start[to]) return;
    t.start[to] = point;
    t.binding[to] = from;
    moved[to] = 1;
  };
  for (std::size_t k = first; k < t.order.size(); ++k) {
    const std::int32_t op = t.order[k];
    if (!moved[op]) continue;
    const TimeNs start = t.start[op], duration = g.op(op).duration;
    t.makespan = std::max(t.makespan, start + duration);
    for (std::int32_t e = edges.offsets[op]; e < edges.offsets[op + 1]; ++e)
      push(edges.edges[e].to, progress_point(start, duration, edges.edges[e].fraction), op);
    if (edges.stream_next[op] >= 0) push(edges.stream_next[op], start + duration, op);
  }
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
