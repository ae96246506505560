// The parameters a downloaded Hugging Face checkpoint holds, counted from its safetensors headers, to hold
// Loom's count from config.json against: a model structure Loom does not express shows as a difference.
#pragma once

#include <filesystem>
#include <string>

namespace loom {

struct CheckpointParams {
  double params = 0;  // 0: not counted (`note` says why, when the directory has weights to look at)
  int files = 0;      // safetensors files read
  std::string note;
};

// Reads model.safetensors.index.json's shards, or model.safetensors; only each file's header (an 8-byte
// little-endian length, then a JSON table of every tensor's dtype and shape: the safetensors format,
// huggingface/safetensors README). Quantized tensors (integer dtypes holding packed values), a shard not
// downloaded and a malformed header are not counted, and say so.
CheckpointParams count_checkpoint_params(const std::filesystem::path& dir);

// One line for the plan: the checkpoint's count against `loom_params`, or why there is none; empty when
// the directory holds no safetensors weights.
std::string checkpoint_comparison(const std::filesystem::path& dir, double loom_params);

}  // namespace loom
