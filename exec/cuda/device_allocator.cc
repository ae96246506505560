#include "exec/cuda/device_allocator.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace loom::exec {

DeviceAllocator::~DeviceAllocator() {
  release_cache();
  // Blocks still in use at the end belong to tensors that outlived their backend: give them back too.
  for (auto& [p, size] : block_sizes_) device_->free(p);
}

std::size_t DeviceAllocator::rounded(std::int64_t bytes) {
  const auto n = static_cast<std::size_t>(std::max<std::int64_t>(bytes, 1));
  return (n + kRounding - 1) / kRounding * kRounding;
}

void* DeviceAllocator::allocate(std::int64_t bytes) {
  const std::size_t size = rounded(bytes);
  void* p = nullptr;
  auto it = free_blocks_.find(size);
  if (it != free_blocks_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= static_cast<std::int64_t>(size);
  } else {
    p = allocate_from_device(size);
  }
  block_sizes_[p] = size;
  in_use_bytes_ += static_cast<std::int64_t>(size);
  peak_reserved_bytes_ = std::max(peak_reserved_bytes_, reserved_bytes());
  return p;
}

void* DeviceAllocator::allocate_from_device(std::size_t size) {
  void* p = device_->allocate(size);
  if (p == nullptr && cached_bytes_ > 0) {  // blocks of other sizes may be what is missing
    release_cache();
    p = device_->allocate(size);
  }
  if (p == nullptr) throw DeviceOutOfMemory(out_of_memory_message(size));
  ++device_allocations_;
  return p;
}

void DeviceAllocator::free(void* p) {
  if (p == nullptr) return;
  auto it = block_sizes_.find(p);
  if (it == block_sizes_.end()) throw std::logic_error("device allocator: freeing a block it did not hand out");
  const std::size_t size = it->second;
  block_sizes_.erase(it);
  free_blocks_[size].push_back(p);
  in_use_bytes_ -= static_cast<std::int64_t>(size);
  cached_bytes_ += static_cast<std::int64_t>(size);
}

void DeviceAllocator::release_cache() {
  for (auto& [size, blocks] : free_blocks_)
    for (void* p : blocks) device_->free(p);
  free_blocks_.clear();
  cached_bytes_ = 0;
}

std::string DeviceAllocator::out_of_memory_message(std::size_t wanted) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  return fmt::format(
      "device out of memory: wanted {:.2f} GiB, {:.2f} GiB held by Loom ({:.2f} cached), {:.2f} GiB free on the "
      "device",
      static_cast<double>(wanted) / kGiB, static_cast<double>(reserved_bytes()) / kGiB,
      static_cast<double>(cached_bytes_) / kGiB, static_cast<double>(device_->free_bytes()) / kGiB);
}

}  // namespace loom::exec
