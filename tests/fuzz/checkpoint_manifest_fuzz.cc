// libFuzzer target: a checkpoint manifest as `loom run --resume` reads it through
// find_resumable_checkpoint: the input is dir/step_00000001/manifest.json, `latest` names that step.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>

#include "core/presets.h"
#include "exec/checkpoint.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string dir = [] {
    const std::string d = loom::fuzz::scratch_dir() + "/checkpoints";
    std::filesystem::create_directories(loom::exec::checkpoint_step_dir(d, 1));
    std::ofstream(d + "/latest") << "step_00000001\n";
    return d;
  }();
  static const loom::exec::RunIdentity run{.model = *loom::model_preset("gpt-tiny"),
                                           .seed = 1234,
                                           .global_batch = 8,
                                           .seq_len = 64,
                                           .data_tokens = 100000,
                                           .data_fingerprint = 0};
  std::ofstream(loom::exec::checkpoint_step_dir(dir, 1) + "/manifest.json", std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  (void)loom::exec::find_resumable_checkpoint(dir, run);
  return 0;
}
