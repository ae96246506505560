#include "sim/nic_sharing.h"

#include <algorithm>

namespace loom::sim {

bool NicCrossings::any() const {
  const bool sends = std::any_of(forward_send.begin(), forward_send.end(), [](char c) { return c != 0; }) ||
                     std::any_of(backward_send.begin(), backward_send.end(), [](char c) { return c != 0; });
  return sends && (all_reduce || reduce_scatter || all_gather);
}

namespace {

struct Interval {
  TimeNs begin, end;
};

// The transfers of one stream, in stream order (so sorted by start and never overlapping each other).
using Stream = std::vector<std::int32_t>;

// Appends the parts of `stream`'s transfers inside [begin, end). Queries must come in order of begin:
// `cursor` skips what ended before.
void clip(const StepGraph& g, const Timeline& t, const Stream& stream, std::size_t& cursor, TimeNs begin, TimeNs end,
          std::vector<Interval>& out) {
  while (cursor < stream.size() && t.end(g, stream[cursor]) <= begin) ++cursor;
  for (std::size_t j = cursor; j < stream.size() && t.start[stream[j]] < end; ++j)
    out.push_back({std::max(begin, t.start[stream[j]]), std::min(end, t.end(g, stream[j]))});
}

// The time covered by the union of `parts`.
TimeNs covered(std::vector<Interval>& parts) {
  std::sort(parts.begin(), parts.end(), [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  TimeNs sum = 0, reach = -1;
  for (const Interval& p : parts) {
    const TimeNs from = std::max(p.begin, reach);
    if (p.end > from) sum += p.end - from;
    reach = std::max(reach, p.end);
  }
  return sum;
}

bool crosses(const NicCrossings& x, Collective c) {
  switch (c) {
    case Collective::kAllReduce: return x.all_reduce;
    case Collective::kReduceScatter: return x.reduce_scatter;
    case Collective::kAllGather: return x.all_gather;
    case Collective::kSendRecv: return false;
  }
  return false;
}

}  // namespace

bool share_nics(StepGraph& g, Timeline& t, const NicCrossings& x) {
  if (!x.any()) return false;
  const int stages = g.stages();
  // Per stage: its crossing sends to the next and to the previous stage, and its crossing collectives.
  // Scratch reused across calls on this thread (the planner simulates thousands of steps).
  thread_local std::vector<Stream> to_next, to_previous, collectives;
  for (auto* list : {&to_next, &to_previous, &collectives}) {
    if (static_cast<int>(list->size()) < stages) list->resize(stages);
    for (int s = 0; s < stages; ++s) (*list)[s].clear();
  }
  for (std::int32_t i = 0; i < static_cast<std::int32_t>(g.size()); ++i) {
    const Op& op = g.op(i);
    if (op.kind == OpKind::kPipeSend) {
      const bool forward = op.direction == SendDirection::kForward;
      if ((forward ? x.forward_send : x.backward_send)[op.stage])
        (forward ? to_next : to_previous)[op.stage].push_back(i);
    } else if (op.kind == OpKind::kDataParallel && crosses(x, op.collective)) {
      collectives[op.stage].push_back(i);
    }
  }
  auto next = [stages](int s) { return (s + 1) % stages; };
  auto previous = [stages](int s) { return (s + stages - 1) % stages; };

  // Every extension from the schedule as it stands, then one update of it.
  thread_local std::vector<std::pair<std::int32_t, TimeNs>> grow;
  thread_local std::vector<Interval> parts;
  grow.clear();
  parts.clear();
  auto want = [&](std::int32_t op) {
    const TimeNs shared = covered(parts);
    if (shared > 0) grow.emplace_back(op, shared);
    parts.clear();
  };
  for (int s = 0; s < stages; ++s) {
    // A send shares its sender's NIC with the sender's collectives and its receiver's with the receiver's.
    for (auto [sends, receiver] : {std::pair{&to_next[s], next(s)}, std::pair{&to_previous[s], previous(s)}}) {
      std::size_t own = 0, theirs = 0;
      for (const std::int32_t op : *sends) {
        const TimeNs b = t.start[op], e = t.end(g, op);
        clip(g, t, collectives[s], own, b, e, parts);
        if (receiver != s) clip(g, t, collectives[receiver], theirs, b, e, parts);
        want(op);
      }
    }
    // A collective shares with the stage's own sends and the sends into it.
    std::size_t out_next = 0, out_previous = 0, in_forward = 0, in_backward = 0;
    for (const std::int32_t op : collectives[s]) {
      const TimeNs b = t.start[op], e = t.end(g, op);
      clip(g, t, to_next[s], out_next, b, e, parts);
      clip(g, t, to_previous[s], out_previous, b, e, parts);
      if (previous(s) != s) clip(g, t, to_next[previous(s)], in_forward, b, e, parts);
      if (next(s) != s) clip(g, t, to_previous[next(s)], in_backward, b, e, parts);
      want(op);
    }
  }
  if (grow.empty()) return false;
  thread_local std::vector<std::int32_t> lengthened;
  lengthened.clear();
  for (auto [op, extra] : grow) {
    g.op(op).duration += extra;
    lengthened.push_back(op);
  }
  run_engine_again(g, t, lengthened);
  return true;
}

}  // namespace loom::sim
