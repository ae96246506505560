// The CUDA backend's caching allocator: blocks rounded up to 512 bytes, freed blocks kept on a free list
// per rounded size and handed out again (as PyTorch's allocator does; cudaMalloc/cudaFree synchronise the
// device), the cache emptied and the request retried once before running out is reported. Host-only: the
// device sits behind DeviceMemory, so the caching and the out-of-memory message are tested without a GPU.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace loom::exec {

// A device allocation that failed even after the cache was emptied. The message is one line:
// "device out of memory: wanted X GiB, Y GiB held by Loom (Z cached), W GiB free on the device".
class DeviceOutOfMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What the allocator asks of a device (cudaMalloc / cudaFree / cudaMemGetInfo on a GPU).
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // nullptr when the device cannot provide `bytes` (an error the caller recovers from).
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void free(void* p) = 0;
  virtual std::size_t free_bytes() = 0;  // free on the device, as the driver reports it
};

class DeviceAllocator {
 public:
  static constexpr std::size_t kRounding = 512;  // cudaMalloc itself aligns to 256; 512 as PyTorch rounds

  explicit DeviceAllocator(std::unique_ptr<DeviceMemory> device) : device_(std::move(device)) {}
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // Throws DeviceOutOfMemory when the device cannot provide the block even with the cache emptied.
  void* allocate(std::int64_t bytes);
  void free(void* p);
  // Returns every cached block to the device.
  void release_cache();

  static std::size_t rounded(std::int64_t bytes);
  std::int64_t in_use_bytes() const { return in_use_bytes_; }
  std::int64_t cached_bytes() const { return cached_bytes_; }
  // Held from the device: in use plus cached (what nvidia-smi shows beside the CUDA context).
  std::int64_t reserved_bytes() const { return in_use_bytes_ + cached_bytes_; }
  std::int64_t peak_reserved_bytes() const { return peak_reserved_bytes_; }
  std::int64_t device_allocations() const { return device_allocations_; }  // blocks the device gave

 private:
  void* allocate_from_device(std::size_t bytes);
  std::string out_of_memory_message(std::size_t wanted);

  std::unique_ptr<DeviceMemory> device_;
  std::unordered_map<std::size_t, std::vector<void*>> free_blocks_;
  std::unordered_map<void*, std::size_t> block_sizes_;  // blocks in use
  std::int64_t in_use_bytes_ = 0, cached_bytes_ = 0, peak_reserved_bytes_ = 0, device_allocations_ = 0;
};

}  // namespace loom::exec
