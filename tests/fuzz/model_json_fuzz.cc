// libFuzzer target: Loom model JSON (--model FILE) as load_model reads it, then the parameter and
// FLOP counts every command derives from an accepted model. An error Result is a fine answer.
#include <cstddef>
#include <cstdint>

#include "core/flops.h"
#include "core/presets.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = loom::fuzz::write_scratch_file("model.json", data, size);
  auto model = loom::load_model(path);
  if (!model) return 0;
  volatile double sink = static_cast<double>(model->total_params()) + static_cast<double>(model->active_params()) +
                         loom::model_flops_per_step(*model, 1, model->seq_len);
  (void)sink;
  return 0;
}
