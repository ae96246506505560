// A downloaded checkpoint's safetensors headers counted against Loom's parameter count from its config.json:
// real files in the safetensors layout, one shard and several, and every way the count is declined.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/checkpoint_params.h"
#include "core/json_io.h"
#include "core/presets.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("loom_ckpt_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A safetensors file: the header's length in 8 little-endian bytes, the header, then the tensors' bytes
// (zeros: only the header is read, but the file is as long as the header says).
void write_safetensors(const fs::path& path, const Json& header, std::uint64_t data_bytes = 16) {
  const std::string text = header.dump();
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((text.size() >> (8 * i)) & 0xFF));
  out << text << std::string(data_bytes, '\0');
}

Json tensor(const char* dtype, std::vector<long long> shape) {
  return Json{{"dtype", dtype}, {"shape", shape}, {"data_offsets", {0, 0}}};
}

// A small Llama: 2 layers, hidden 64, ffn 128, vocab 256, untied.
const char* kConfig = R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
  "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 256, "max_position_embeddings": 128})";

fs::path checkpoint(const std::string& name) {
  const fs::path dir = fresh_dir(name);
  std::ofstream(dir / "config.json") << kConfig;
  return dir;
}

double loom_params(const fs::path& dir) { return static_cast<double>(load_model(dir.string())->total_params()); }

TEST(CheckpointParams, OneFileThatAgreesWithLoomsCount) {
  const fs::path dir = checkpoint("agrees");
  const auto n = static_cast<long long>(loom_params(dir));
  write_safetensors(dir / "model.safetensors", Json{{"__metadata__", {{"format", "pt"}}},
                                                    {"model.embed_tokens.weight", tensor("BF16", {256, 64})},
                                                    {"rest", tensor("BF16", {n - 256 * 64})}});
  const CheckpointParams c = count_checkpoint_params(dir);
  EXPECT_EQ(c.files, 1);
  EXPECT_DOUBLE_EQ(c.params, static_cast<double>(n));
  auto m = load_model(dir.string());
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_NE(m->checkpoint_note.find("in its 1 safetensors file; Loom counts"), std::string::npos) << m->checkpoint_note;
  EXPECT_NE(m->checkpoint_note.find("(+0.00 %)"), std::string::npos) << m->checkpoint_note;
  EXPECT_EQ(m->checkpoint_note.find("does not model"), std::string::npos) << m->checkpoint_note;
  // The same through the config.json file itself.
  EXPECT_EQ(load_model((dir / "config.json").string())->checkpoint_note, m->checkpoint_note);
}

TEST(CheckpointParams, ShardsAddUpAndAStructureLoomMissesIsNamed) {
  const fs::path dir = checkpoint("sharded");
  const double n = loom_params(dir);
  const auto half = static_cast<long long>(n / 2);
  // 10 % more than Loom counts, split over two shards named by the index.
  write_safetensors(dir / "model-00001-of-00002.safetensors", Json{{"a", tensor("F32", {half, 1})}});
  write_safetensors(dir / "model-00002-of-00002.safetensors",
                    Json{{"b", tensor("BF16", {static_cast<long long>(1.1 * n) - half})}});
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"metadata": {"total_size": 1}, "weight_map": {"a": "model-00001-of-00002.safetensors",
            "b": "model-00002-of-00002.safetensors"}})";
  const CheckpointParams c = count_checkpoint_params(dir);
  EXPECT_EQ(c.files, 2);
  EXPECT_NEAR(c.params, 1.1 * n, 1.0);
  const std::string note = load_model(dir.string())->checkpoint_note;
  EXPECT_NE(note.find("in its 2 safetensors files"), std::string::npos) << note;
  EXPECT_NE(note.find("(-9.09 %)"), std::string::npos) << note;
  EXPECT_NE(note.find("the checkpoint holds structure Loom does not model"), std::string::npos) << note;

  fs::remove(dir / "model-00002-of-00002.safetensors");
  EXPECT_EQ(load_model(dir.string())->checkpoint_note, "not compared: 1 of its 2 safetensors files not downloaded");
}

TEST(CheckpointParams, QuantizedMalformedOrAbsentWeightsAreNotCounted) {
  const fs::path dir = checkpoint("declined");
  EXPECT_EQ(load_model(dir.string())->checkpoint_note, "");  // config only: nothing to say
  write_safetensors(dir / "model.safetensors",
                    Json{{"w", tensor("BF16", {64, 64})}, {"experts.blocks", tensor("U8", {32, 90, 16})}});
  EXPECT_EQ(load_model(dir.string())->checkpoint_note,
            "not compared: quantized tensors (U8 'experts.blocks' in model.safetensors)");
  {
    std::ofstream out(dir / "model.safetensors", std::ios::binary);
    out << "\xff\xff\xff\xff\xff\xff\xff\x7f{}";  // a header length far past the file
  }
  EXPECT_NE(load_model(dir.string())->checkpoint_note.find("model.safetensors: not a safetensors file"),
            std::string::npos);
  {
    std::ofstream out(dir / "model.safetensors", std::ios::binary);
    out << std::string("\x05\0\0\0\0\0\0\0", 8) << "{nope";
  }
  EXPECT_EQ(load_model(dir.string())->checkpoint_note,
            "not compared: model.safetensors: its header is not a JSON table");
  write_safetensors(dir / "model.safetensors", Json{{"w", Json{{"dtype", "BF16"}}}});
  EXPECT_EQ(load_model(dir.string())->checkpoint_note,
            "not compared: model.safetensors: tensor 'w' has no dtype and shape");
  fs::remove(dir / "model.safetensors");
  std::ofstream(dir / "model.safetensors.index.json") << R"({"metadata": {}})";
  EXPECT_EQ(load_model(dir.string())->checkpoint_note, "not compared: model.safetensors.index.json has no weight_map");
}

}  // namespace
}  // namespace loom
