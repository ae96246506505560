#include "sim/step_graph.h"

namespace loom::sim {

const char* to_string(OpKind kind) {
  switch (kind) {
    case OpKind::kForward: return "forward";
    case OpKind::kBackward: return "backward";
    case OpKind::kWeightGrad: return "weight_grad";
    case OpKind::kPipeSend: return "pp";
    case OpKind::kDataParallel: return "dp";
    case OpKind::kOptimizer: return "optimizer";
  }
  return "?";
}

const char* to_string(StreamKind kind) {
  switch (kind) {
    case StreamKind::kCompute: return "compute";
    case StreamKind::kPipe: return "pp send/recv";
    case StreamKind::kDataParallel: return "dp comm";
  }
  return "?";
}

const StepGraph::Edges& StepGraph::successors() const {
  if (edges_built_) return edges_;
  Edges& e = edges_;
  const std::size_t n = ops_.size();
  e.offsets.assign(n + 1, 0);
  e.in_degree.assign(n, 0);
  for (const auto& d : deps_) {
    ++e.offsets[d.dep.predecessor + 1];
    ++e.in_degree[d.op];
  }
  for (std::size_t i = 0; i < n; ++i) e.offsets[i + 1] += e.offsets[i];
  e.edges.resize(deps_.size());
  std::vector<std::int32_t> cursor(e.offsets.begin(), e.offsets.end() - 1);
  for (const auto& d : deps_) e.edges[cursor[d.dep.predecessor]++] = {d.op, d.dep.fraction};
  e.stream_head.assign(static_cast<std::size_t>(streams()), -1);
  e.stream_next.assign(n, -1);
  std::vector<std::int32_t> last(static_cast<std::size_t>(streams()), -1);
  for (std::size_t i = 0; i < n; ++i) {
    const int s = ops_[i].stream;
    (last[s] >= 0 ? e.stream_next[last[s]] : e.stream_head[s]) = static_cast<std::int32_t>(i);
    last[s] = static_cast<std::int32_t>(i);
  }
  edges_built_ = true;
  return e;
}

}  // namespace loom::sim
