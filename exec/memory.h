// Per-rank memory accounting by category (params, grads, optimizer, activations, buffers, workspace):
// every tensor the executor allocates is charged to one category, so a run reports its peak per
// category and the planner's memory model can be checked against it.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace loom::exec {

// `kWorkspace` holds temporaries that live only inside one op or one layer's backward (gradients of
// activations, gathered inputs); the memory model does not count them, so they are reported apart.
enum class MemoryCategory { kParams, kGrads, kOptimizer, kActivations, kBuffers, kWorkspace };
inline constexpr int kMemoryCategories = 6;
const char* to_string(MemoryCategory category);

class MemoryTracker {
 public:
  void allocated(MemoryCategory category, std::int64_t bytes);
  void freed(MemoryCategory category, std::int64_t bytes);
  std::int64_t current_bytes(MemoryCategory category) const { return current_[index(category)]; }
  std::int64_t peak_bytes(MemoryCategory category) const { return peak_[index(category)]; }
  std::int64_t peak_total_bytes() const { return peak_total_; }
  // Starts a new measurement window (e.g. after the first step), keeping what is allocated now.
  void reset_peaks();

 private:
  static int index(MemoryCategory c) { return static_cast<int>(c); }
  std::array<std::int64_t, kMemoryCategories> current_{};
  std::array<std::int64_t, kMemoryCategories> peak_{};
  std::int64_t total_ = 0;
  std::int64_t peak_total_ = 0;
};

}  // namespace loom::exec
