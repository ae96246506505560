#include "exec/parallel/data_parallel.h"

#include "core/trace_names.h"

namespace loom::exec {

void GradientBuckets::launch(float* data, std::int64_t n) {
  if (dp_.size() == 1 || n == 0) return;
  if (tracer_ != nullptr && first_launch_us_ < 0) first_launch_us_ = tracer_->now_us();
  requests_.push_back(dp_.all_reduce_async(data, n));
}

void GradientBuckets::wait() {
  if (requests_.empty()) return;
  wait_all(requests_);
  // One slice from the first launch to the last completion: the buckets' all-reduce window.
  if (tracer_ != nullptr && first_launch_us_ >= 0)
    tracer_->add(trace_names::collective(Collective::kAllReduce, "dp"), "comm", first_launch_us_, tracer_->now_us(),
                 kCommLane);
  first_launch_us_ = -1;
}

}  // namespace loom::exec
