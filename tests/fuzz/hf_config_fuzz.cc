// libFuzzer target: a Hugging Face config.json as model_from_hf_config reads it (load_model's path
// for files that look like one), then the parameter and FLOP counts of an accepted model.
#include <cstddef>
#include <cstdint>

#include "core/flops.h"
#include "core/hf_config.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto json = loom::parse_json(loom::fuzz::as_text(data, size), "config.json");
  if (!json) return 0;
  auto model = loom::model_from_hf_config(*json, "fuzz", "config.json");
  if (!model) return 0;
  volatile double sink = static_cast<double>(model->total_params()) + static_cast<double>(model->active_params()) +
                         loom::model_flops_per_step(*model, 1, model->seq_len);
  (void)sink;
  return 0;
}
