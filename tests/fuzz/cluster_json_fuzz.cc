// libFuzzer target: a cluster/cost file (--cluster FILE) as load_cluster reads it.
#include <cstddef>
#include <cstdint>

#include "core/presets.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = loom::fuzz::write_scratch_file("cluster.json", data, size);
  auto cluster = loom::load_cluster(path);
  if (cluster) {
    volatile double sink = cluster->gpu_memory_gib();
    (void)sink;
  }
  return 0;
}
