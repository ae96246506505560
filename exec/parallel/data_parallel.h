// Data parallelism: gradients are all-reduced over the DP group in buckets (one per parameter unit,
// i.e. per layer), each launched non-blocking as soon as the backward of its unit finishes on the
// last micro-batch, so communication overlaps the rest of the backward (PyTorch DDP, Megatron).
#pragma once

#include <memory>
#include <vector>

#include "exec/communicator.h"
#include "exec/trace.h"

namespace loom::exec {

class GradientBuckets {
 public:
  GradientBuckets(Communicator& dp, Tracer* tracer) : dp_(dp), tracer_(tracer) {}
  // Starts summing `n` gradients at `data` over the DP group.
  void launch(float* data, std::int64_t n);
  // Waits for every launched bucket.
  void wait();
  int in_flight() const { return static_cast<int>(requests_.size()); }

 private:
  Communicator& dp_;
  Tracer* tracer_;
  std::vector<std::unique_ptr<Request>> requests_;
  double first_launch_us_ = -1;
};

}  // namespace loom::exec
