// StepGraph: one training step as a dependency graph of ops, each bound to a resource (a stream
// of one pipeline stage: compute, pipeline send, data-parallel channel). Built by sim/step_builder,
// executed by sim/engine, drawn by sim/trace.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/units.h"
#include "sim/collectives.h"

namespace loom::sim {

enum class OpKind : std::uint8_t {
  kForward,       // F: forward of a model chunk for one micro-batch (TP communication included)
  kBackward,      // B: backward (input grads; weight grads too unless the schedule splits them)
  kWeightGrad,    // W: weight-gradient half of the backward (zero-bubble)
  kPipeSend,      // activation or gradient to the neighbouring stage
  kDataParallel,  // gradient reduction, parameter gathers (ZeRO)
  kOptimizer,
};

// Per stage: the compute stream (TP collectives run inside its ops, as Megatron issues them),
// the pipeline send channel, and the data-parallel channel. Gradient reductions and ZeRO
// parameter gathers share the DP channel because they share the same network links.
enum class StreamKind : std::uint8_t { kCompute, kPipe, kDataParallel };
inline constexpr int kStreamsPerStage = 3;

// Which way a pipeline send goes: a forward's activation to the next virtual stage, or a
// backward's input gradient to the previous one.
enum class SendDirection : std::uint8_t { kForward, kBackward };

const char* to_string(OpKind kind);
const char* to_string(StreamKind kind);

// Fields are ordered to pack: the planner builds millions of ops.
struct Op {
  TimeNs duration = 0;
  std::int32_t stream = 0;
  OpKind kind = OpKind::kForward;
  SendDirection direction = SendDirection::kForward;  // kPipeSend only
  std::int16_t stage = 0;
  std::int16_t chunk = 0;         // virtual pipeline chunk (global model-chunk index)
  std::int16_t local_chunk = -1;  // F/B/W: the chunk's index on its stage (into its chunk costs); else -1
  std::int32_t micro_batch = -1;
  Collective collective = Collective::kAllReduce;  // kDataParallel only
};
static_assert(sizeof(Op) <= 32, "Op is built millions of times by the planner: keep it within 32 bytes");

// `op` may start once `predecessor` has progressed `fraction` of its duration (1: finished).
struct Dependency {
  std::int32_t predecessor = 0;
  float fraction = 1.0f;
};

class StepGraph {
 public:
  explicit StepGraph(int stages) : stages_(stages) {}

  // Empties the graph for a step of `stages` stages, keeping its storage.
  void reset(int stages) {
    stages_ = stages;
    ops_.clear();
    deps_.clear();
    edges_built_ = false;
  }
  int stages() const { return stages_; }
  int streams() const { return stages_ * kStreamsPerStage; }
  static int stream_of(int stage, StreamKind kind) { return stage * kStreamsPerStage + static_cast<int>(kind); }

  // Appends an op to its stream; ops on one stream run in the order they were added.
  std::int32_t add(const Op& op) {
    edges_built_ = false;
    ops_.push_back(op);
    return static_cast<std::int32_t>(ops_.size() - 1);
  }
  void depend(std::int32_t op, std::int32_t predecessor, float fraction = 1.0f) {
    edges_built_ = false;
    deps_.push_back({op, {predecessor, fraction}});
  }
  void reserve(std::size_t ops) {
    ops_.reserve(ops);
    deps_.reserve(ops * 2);
  }

  std::size_t size() const { return ops_.size(); }
  const Op& op(std::int32_t i) const { return ops_[i]; }
  Op& op(std::int32_t i) { return ops_[i]; }
  const std::vector<Op>& ops() const { return ops_; }

  // Successor lists in compressed form and each stream's ops in order, built on the first call
  // after the last add/depend (a graph run twice with changed durations builds them once).
  struct Edge {
    std::int32_t to;
    float fraction;
  };
  struct Edges {
    std::vector<std::int32_t> offsets;  // size()+1
    std::vector<Edge> edges;
    std::vector<std::int32_t> in_degree;
    std::vector<std::int32_t> stream_head;  // per stream: its first op (-1: none)
    std::vector<std::int32_t> stream_next;  // per op: the next op on its stream (-1: last)
  };
  const Edges& successors() const;

 private:
  struct RawDependency {
    std::int32_t op;
    Dependency dep;
  };
  int stages_;
  std::vector<Op> ops_;
  std::vector<RawDependency> deps_;
  mutable Edges edges_;
  mutable bool edges_built_ = false;
};

}  // namespace loom::sim
