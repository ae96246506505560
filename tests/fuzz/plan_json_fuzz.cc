// libFuzzer target: a plan file (`loom run --plan FILE`) as the CLI reads it: read_json_file, then
// plan_from_json, then the model's parameter count the executor's memory check starts from.
#include <cstddef>
#include <cstdint>

#include "core/json_io.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = loom::fuzz::write_scratch_file("plan.json", data, size);
  auto json = loom::read_json_file(path);
  if (!json) return 0;
  auto plan = loom::plan_from_json(*json);
  if (!plan) return 0;
  volatile double sink = static_cast<double>(plan->model.total_params()) + plan->config.world_size();
  (void)sink;
  return 0;
}
