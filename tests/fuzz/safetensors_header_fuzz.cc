// libFuzzer target: a checkpoint's weights as `--model DIR` reads them for the plan's `# checkpoint:` line
// (count_checkpoint_params): the input is DIR/model.safetensors; only its header is parsed.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>

#include "core/checkpoint_params.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path d = std::filesystem::path(loom::fuzz::scratch_dir()) / "checkpoint";
    std::filesystem::create_directories(d);
    return d;
  }();
  std::ofstream(dir / "model.safetensors", std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  (void)loom::checkpoint_comparison(dir, 1e9);
  return 0;
}
