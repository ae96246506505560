#include "sim/trace.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "core/units.h"
#include "sim/step_metrics.h"

namespace loom::sim {

namespace {

// Thread ids inside a stage's process.
enum Thread { kCompute = 0, kTpComm = 1, kPipe = 2, kDp = 3, kCpComm = 4, kEpComm = 5 };

int thread_of(const Op& op) {
  switch (op.kind) {
    case OpKind::kPipeSend: return kPipe;
    case OpKind::kDataParallel: return kDp;
    default: return kCompute;
  }
}

// Microseconds with nanosecond resolution, formatted identically on every run.
std::string us(TimeNs ns) { return fmt::format("{}.{:03d}", ns / 1000, static_cast<int>(ns % 1000)); }

std::string escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out;
}

class TraceWriter {
 public:
  void event(const std::string& body) {
    out_ += first_ ? "\n  " : ",\n  ";
    out_ += body;
    first_ = false;
  }
  std::string finish(const std::string& title) {
    return fmt::format(
        "{{\"displayTimeUnit\": \"ms\", \"otherData\": {{\"title\": \"{}\"}}, \"traceEvents\": [{}\n]}}\n",
        escape(title), out_);
  }

 private:
  std::string out_;
  bool first_ = true;
};

// The cp and ep comm threads only under context and expert parallelism, so that other traces read as before.
void write_metadata(TraceWriter& w, int stages, bool cp, bool ep) {
  static const char* kThreadNames[] = {"compute", "tp comm", "pp send/recv", "dp comm", "cp comm", "ep comm"};
  for (int s = 0; s < stages; ++s) {
    w.event(fmt::format(R"({{"ph": "M", "pid": {}, "name": "process_name", "args": {{"name": "stage {}"}}}})", s, s));
    w.event(
        fmt::format(R"({{"ph": "M", "pid": {}, "name": "process_sort_index", "args": {{"sort_index": {}}}}})", s, s));
    for (int t = 0; t < 6; ++t) {
      if ((t == kCpComm && !cp) || (t == kEpComm && !ep)) continue;
      w.event(fmt::format(R"({{"ph": "M", "pid": {}, "tid": {}, "name": "thread_name", "args": {{"name": "{}"}}}})", s,
                          t, kThreadNames[t]));
    }
  }
}

// The kernels of a pass, laid end to end inside its slice: compute on the compute thread (nested
// under the pass), TP collectives on the TP thread, context-parallel exchanges on the CP thread. A
// `beside` segment (a ring transfer) starts with the segment after it and takes none of the
// pass's time.
void write_segments(TraceWriter& w, const PassCost& pass, int stage, TimeNs start, TimeNs duration) {
  if (pass.segments.empty() || pass.seconds <= 0) return;
  // A pass lengthened beside DP collectives (the SMs they hold) is lengthened in its kernels, not in its
  // waits for ZeRO-3 gathers (PassCost::dp_comm_exposed_s), which keep their length.
  const double waits = pass.dp_comm_exposed_s;
  const double scale =
      pass.seconds > waits ? (static_cast<double>(duration) / kNsPerS - waits) / (pass.seconds - waits) : 1.0;
  double offset = 0;  // seconds into the op
  for (const Segment& seg : pass.segments) {
    const bool wait = seg.communication && seg.lane == Lane::kCompute;
    const double length = wait ? seg.seconds : seg.seconds * scale;
    const TimeNs begin = start + static_cast<TimeNs>(offset * kNsPerS);
    const TimeNs end = std::min(start + duration, start + static_cast<TimeNs>((offset + length) * kNsPerS));
    if (!seg.beside) offset += length;
    if (end <= begin) continue;
    const int tid = seg.lane == Lane::kEpComm   ? kEpComm
                    : seg.lane == Lane::kCpComm ? kCpComm
                    : seg.lane == Lane::kTpComm ? kTpComm
                                                : kCompute;
    const char* cat = seg.lane == Lane::kEpComm   ? "ep"
                      : seg.lane == Lane::kCpComm ? "cp"
                      : seg.lane == Lane::kTpComm ? "tp"
                      : seg.communication         ? "dp"
                                                  : "kernel";
    w.event(fmt::format(R"({{"ph": "X", "pid": {}, "tid": {}, "ts": {}, "dur": {}, "name": "{}", "cat": "{}"}})", stage,
                        tid, us(begin), us(end - begin), escape(seg.name), cat));
  }
}

}  // namespace

std::string chrome_trace_json(const SimResult& r, const std::string& title) {
  TraceWriter w;
  const StepGraph& g = r.graph;
  const Timeline& t = r.timeline;
  write_metadata(w, g.stages(), r.config.cp > 1, r.config.ep > 1);

  for (std::int32_t i = 0; i < static_cast<std::int32_t>(g.size()); ++i) {
    const Op& op = g.op(i);
    const std::string name = op_label(op);
    w.event(fmt::format(
        R"({{"ph": "X", "pid": {}, "tid": {}, "ts": {}, "dur": {}, "name": "{}", "cat": "{}", "args": {{"micro_batch": {}, "chunk": {}}}}})",
        op.stage, thread_of(op), us(t.start[i]), us(op.duration), escape(name), to_string(op.kind), op.micro_batch,
        op.chunk));
    if (op.kind == OpKind::kForward || op.kind == OpKind::kBackward || op.kind == OpKind::kWeightGrad) {
      const ChunkCost& cc = r.chunk_costs[op.stage][op.local_chunk];
      const PassCost& pass = op.kind == OpKind::kForward    ? cc.forward
                             : op.kind == OpKind::kBackward ? cc.backward
                                                            : cc.weight;
      write_segments(w, pass, op.stage, t.start[i], op.duration);
    }
  }
  // Flow arrows: each send starts a flow that ends at the pass on the next stage consuming it.
  std::map<std::tuple<int, int, int>, std::int32_t> consumers;  // (kind, virtual stage, mb) → op
  for (std::int32_t i = 0; i < static_cast<std::int32_t>(g.size()); ++i) {
    const Op& op = g.op(i);
    if (op.kind == OpKind::kForward || op.kind == OpKind::kBackward)
      consumers[{static_cast<int>(op.kind), op.chunk, op.micro_batch}] = i;
  }
  int flow_id = 0;
  for (std::int32_t i = 0; i < static_cast<std::int32_t>(g.size()); ++i) {
    const Op& op = g.op(i);
    if (op.kind != OpKind::kPipeSend) continue;
    const bool forward = op.direction == SendDirection::kForward;
    auto it = consumers.find({static_cast<int>(forward ? OpKind::kForward : OpKind::kBackward),
                              forward ? op.chunk + 1 : op.chunk - 1, op.micro_batch});
    if (it == consumers.end()) continue;
    const Op& to = g.op(it->second);
    ++flow_id;
    w.event(fmt::format(R"({{"ph": "s", "id": {}, "pid": {}, "tid": {}, "ts": {}, "name": "p2p", "cat": "pp"}})",
                        flow_id, op.stage, kPipe, us(t.start[i])));
    w.event(
        fmt::format(R"({{"ph": "f", "bp": "e", "id": {}, "pid": {}, "tid": {}, "ts": {}, "name": "p2p", "cat": "pp"}})",
                    flow_id, to.stage, kCompute, us(t.start[it->second])));
  }

  // Memory in use per stage: what the stage holds all step, plus the activations of each forward
  // from its start until the backward that frees them; zero-bubble's B pass swaps them for what its
  // W pass reads, freed when that ends.
  const auto& fixed = r.options.static_bytes_per_stage;
  const auto& per_forward = r.options.activation_bytes_per_forward;
  const auto& per_w = r.options.weight_pass_bytes;
  if (fixed.size() == static_cast<std::size_t>(g.stages()) && per_forward.size() == fixed.size()) {
    const bool split = r.config.schedule == Schedule::kZeroBubble && per_w.size() == fixed.size();
    std::vector<std::vector<std::pair<TimeNs, double>>> changes(g.stages());
    for (std::int32_t i = 0; i < static_cast<std::int32_t>(g.size()); ++i) {
      const Op& op = g.op(i);
      const double kept = split ? per_w[op.stage] : 0.0;
      if (op.kind == OpKind::kForward) changes[op.stage].push_back({t.start[i], per_forward[op.stage]});
      if (op.kind == OpKind::kBackward) changes[op.stage].push_back({t.end(g, i), kept - per_forward[op.stage]});
      if (op.kind == OpKind::kWeightGrad) changes[op.stage].push_back({t.end(g, i), -kept});
    }
    for (int s = 0; s < g.stages(); ++s) {
      std::stable_sort(changes[s].begin(), changes[s].end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      double in_use = fixed[s];
      w.event(fmt::format(R"({{"ph": "C", "pid": {}, "ts": 0.000, "name": "memory", "args": {{"GiB": {:.4f}}}}})", s,
                          bytes_to_gib(in_use)));
      for (const auto& [time, delta] : changes[s]) {
        in_use += delta;
        w.event(fmt::format(R"({{"ph": "C", "pid": {}, "ts": {}, "name": "memory", "args": {{"GiB": {:.4f}}}}})", s,
                            us(time), bytes_to_gib(in_use)));
      }
    }
  }
  return w.finish(title);
}

}  // namespace loom::sim
