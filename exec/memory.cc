#include "exec/memory.h"

#include <algorithm>

namespace loom::exec {

const char* to_string(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::kParams: return "params";
    case MemoryCategory::kGrads: return "grads";
    case MemoryCategory::kOptimizer: return "optimizer";
    case MemoryCategory::kActivations: return "activations";
    case MemoryCategory::kBuffers: return "buffers";
    case MemoryCategory::kWorkspace: return "workspace";
  }
  return "?";
}

void MemoryTracker::allocated(MemoryCategory category, std::int64_t bytes) {
  const int i = index(category);
  current_[i] += bytes;
  peak_[i] = std::max(peak_[i], current_[i]);
  total_ += bytes;
  peak_total_ = std::max(peak_total_, total_);
}

void MemoryTracker::freed(MemoryCategory category, std::int64_t bytes) {
  current_[index(category)] -= bytes;
  total_ -= bytes;
}

void MemoryTracker::reset_peaks() {
  peak_ = current_;
  peak_total_ = total_;
}

}  // namespace loom::exec
