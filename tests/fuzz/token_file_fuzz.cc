// libFuzzer target: a token file (`loom run --data FILE`) as TokenFile::open checks it, then the
// first micro-batches a DataLoader reads from an accepted file. Vocabulary and sequence length are
// gpt-tiny-like constants: the header and the tokens are what is fuzzed.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "exec/data_loader.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  constexpr int kVocab = 512, kSeq = 8;
  const std::string path = loom::fuzz::write_scratch_file("tokens.bin", data, size);
  auto file = loom::exec::TokenFile::open(path, kVocab, kSeq);
  if (!file) return 0;
  const loom::exec::DataLoader loader(*file, kSeq, /*micro_batch=*/2, /*micro_batches=*/2, /*dp=*/2, /*dp_rank=*/1);
  std::vector<int> tokens, targets;
  for (std::int64_t step = 0; step < 3; ++step) loader.load(step, 1, tokens, targets);
  return 0;
}
