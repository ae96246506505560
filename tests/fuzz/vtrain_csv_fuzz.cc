// libFuzzer target: a vTrain CSV (`loom calibrate --vtrain FILE`) as read_vtrain_csv reads it,
// then the parameter count of each run's model.
#include <cstddef>
#include <cstdint>

#include "planner/calibrate.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = loom::fuzz::write_scratch_file("vtrain.csv", data, size);
  auto runs = loom::read_vtrain_csv(path);
  if (!runs) return 0;
  double total = 0;
  for (const auto& run : *runs) total += static_cast<double>(run.model.total_params()) + run.config.world_size();
  volatile double sink = total;
  (void)sink;
  return 0;
}
