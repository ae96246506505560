#include "core/checkpoint_params.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <set>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace loom {

namespace {

namespace fs = std::filesystem;

// A header larger than this is not a checkpoint's (the format caps it at 100 MB).
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

bool is_float_dtype(std::string_view dtype) {
  for (std::string_view d : {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"})
    if (dtype == d) return true;
  return false;
}

// Adds one file's tensors to `out`; false (with out.note set) when it cannot be counted.
bool count_file(const fs::path& file, CheckpointParams& out) {
  const std::string name = file.filename().string();
  std::ifstream in(file, std::ios::binary);
  std::array<unsigned char, 8> size_bytes{};
  if (!in || !in.read(reinterpret_cast<char*>(size_bytes.data()), size_bytes.size())) {
    out.note = fmt::format("{}: cannot read its header", name);
    return false;
  }
  std::uint64_t size = 0;
  for (int i = 7; i >= 0; --i) size = size << 8 | size_bytes[static_cast<std::size_t>(i)];
  std::error_code ec;
  const auto file_size = fs::file_size(file, ec);
  if (size == 0 || size > kMaxHeaderBytes || ec || size > file_size - 8) {
    out.note = fmt::format("{}: not a safetensors file (header length {})", name, size);
    return false;
  }
  std::string header(size, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(size))) {
    out.note = fmt::format("{}: cannot read its header", name);
    return false;
  }
  const nlohmann::json table = nlohmann::json::parse(header, nullptr, false);
  if (!table.is_object()) {
    out.note = fmt::format("{}: its header is not a JSON table", name);
    return false;
  }
  for (const auto& [tensor, info] : table.items()) {
    if (tensor == "__metadata__") continue;
    if (!info.is_object() || !info.contains("dtype") || !info["dtype"].is_string() || !info.contains("shape") ||
        !info["shape"].is_array()) {
      out.note = fmt::format("{}: tensor '{}' has no dtype and shape", name, tensor);
      return false;
    }
    const std::string dtype = info["dtype"].get<std::string>();
    if (!is_float_dtype(dtype)) {
      out.note = fmt::format("quantized tensors ({} '{}' in {})", dtype, tensor, name);
      return false;
    }
    double elements = 1;
    for (const auto& d : info["shape"]) {
      if (!d.is_number_unsigned() && !d.is_number_integer()) {
        out.note = fmt::format("{}: tensor '{}' has a malformed shape", name, tensor);
        return false;
      }
      elements *= d.get<double>();
    }
    out.params += elements;
  }
  ++out.files;
  return true;
}

}  // namespace

CheckpointParams count_checkpoint_params(const fs::path& dir) {
  CheckpointParams out;
  std::error_code ec;
  std::vector<fs::path> files;
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::is_regular_file(index, ec)) {
    std::ifstream in(index);
    const nlohmann::json json = nlohmann::json::parse(in, nullptr, false);
    if (!json.is_object() || !json.contains("weight_map") || !json["weight_map"].is_object()) {
      out.note = "model.safetensors.index.json has no weight_map";
      return out;
    }
    std::set<std::string> shards;
    for (const auto& [tensor, shard] : json["weight_map"].items())
      if (shard.is_string()) shards.insert(shard.get<std::string>());
    for (const std::string& shard : shards) files.push_back(dir / shard);
  } else if (fs::is_regular_file(dir / "model.safetensors", ec)) {
    files.push_back(dir / "model.safetensors");
  } else {
    return out;
  }
  int missing = 0;
  for (const fs::path& f : files) missing += fs::is_regular_file(f, ec) ? 0 : 1;
  if (missing > 0) {
    out.note = fmt::format("{} of its {} safetensors files not downloaded", missing, files.size());
    return out;
  }
  for (const fs::path& f : files)
    if (!count_file(f, out)) {
      out.params = 0;
      out.files = 0;
      return out;
    }
  return out;
}

std::string checkpoint_comparison(const fs::path& dir, double loom_params) {
  const CheckpointParams c = count_checkpoint_params(dir);
  if (c.params <= 0) return c.note.empty() ? std::string() : fmt::format("not compared: {}", c.note);
  const double diff = loom_params / c.params - 1.0;
  std::string line = fmt::format(
      "{:.3f} B parameters in its {} safetensors file{}; Loom counts {:.3f} B from "
      "config.json ({:+.2f} %)",
      c.params / 1e9, c.files, c.files == 1 ? "" : "s", loom_params / 1e9, 100.0 * diff);
  // Beyond 1 % the difference is structure Loom does not express (an extra projection, a norm kind),
  // which its memory and FLOPs then miss by about as much.
  if (std::abs(diff) > 0.01)
    line += ": the checkpoint holds structure Loom does not model, and memory and FLOPs follow Loom's count";
  return line;
}

}  // namespace loom
