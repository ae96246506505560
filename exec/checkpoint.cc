#include "exec/checkpoint.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "exec/trainer.h"

namespace loom::exec {

namespace {
constexpr char kShardMagic[8] = {'L', 'O', 'O', 'M', 'C', 'K', 'P', '1'};

struct ShardHeader {
  char magic[8];
  std::int64_t step, rank, tensors;
};
}  // namespace

std::string checkpoint_step_dir(const std::string& dir, int step) { return fmt::format("{}/step_{:08d}", dir, step); }

std::string checkpoint_shard_path(const std::string& dir, int step, int rank) {
  return fmt::format("{}/rank_{:05d}.bin", checkpoint_step_dir(dir, step), rank);
}

Result<Json> find_resumable_checkpoint(const std::string& dir, const ModelSpec& model, const ParallelConfig& config) {
  auto latest = read_text_file(dir + "/latest");
  if (!latest) return make_error(fmt::format("--resume: no complete checkpoint in '{}' (no 'latest' file)", dir));
  const std::string step_dir = dir + "/" + std::string(latest->substr(0, latest->find_first_of("\r\n")));
  auto manifest = read_json_file(step_dir + "/manifest.json");
  if (!manifest) return make_error(fmt::format("--resume: {}", manifest.error().message));
  auto saved = config_from_json((*manifest)["config"]);
  if (!saved || !(*saved == config))
    return make_error(fmt::format("--resume: checkpoint '{}' was saved with layout '{}', this run uses '{}'", step_dir,
                                  saved ? describe(*saved) : "?", describe(config)));
  if ((*manifest)["model"] != to_json(model))
    return make_error(fmt::format("--resume: checkpoint '{}' holds a different model", step_dir));
  for (int r = 0; r < config.world_size(); ++r)
    if (!std::filesystem::exists(checkpoint_shard_path(dir, (*manifest)["step"].get<int>(), r)))
      return make_error(fmt::format("--resume: checkpoint '{}' lacks the shard of rank {}", step_dir, r));
  return manifest;
}

Status Trainer::save_checkpoint(const std::string& dir) {
  const int step = completed_steps_;
  const std::string step_dir = checkpoint_step_dir(dir, step);
  std::error_code ec;
  std::filesystem::create_directories(step_dir, ec);
  const std::string path = checkpoint_shard_path(dir, step, groups_.world_rank);
  bool ok = !ec;
  if (ok) {
    std::ofstream out(path + ".tmp", std::ios::binary | std::ios::trunc);
    auto state = params_->state();
    ShardHeader header{};
    std::memcpy(header.magic, kShardMagic, sizeof(kShardMagic));
    header.step = step;
    header.rank = groups_.world_rank;
    header.tensors = static_cast<std::int64_t>(state.size());
    out.write(reinterpret_cast<const char*>(&header), sizeof(header));
    for (Tensor* t : state) {
      std::vector<float> host(static_cast<std::size_t>(t->numel()));
      backend_.to_host(host.data(), t->data(), t->numel());
      const std::int64_t n = t->numel();
      out.write(reinterpret_cast<const char*>(&n), sizeof(n));
      out.write(reinterpret_cast<const char*>(host.data()), static_cast<std::streamsize>(n * sizeof(float)));
    }
    ok = static_cast<bool>(out);
  }
  ok = ok && std::rename((path + ".tmp").c_str(), path.c_str()) == 0;
  double failures = ok ? 0.0 : 1.0;
  groups_.world->all_reduce(&failures, 1, ReduceOp::kSum);
  if (failures > 0) return make_error(fmt::format("checkpoint: {} rank(s) could not write under '{}'", failures, step_dir));
  if (groups_.world_rank == 0) {
    Json manifest = {{"format", "loom-checkpoint-1"},
                     {"step", step},
                     {"world_size", options_.config.world_size()},
                     {"seed", options_.seed},
                     {"model", to_json(options_.model)},
                     {"config", to_json(options_.config)},
                     {"global_batch", options_.training.global_batch},
                     {"seq_len", seq_},
                     {"next_sequence", static_cast<std::int64_t>(step) * options_.training.global_batch}};
    Status s = write_text_file_atomic(step_dir + "/manifest.json", manifest.dump(2) + "\n");
    if (s) s = write_text_file_atomic(dir + "/latest", fmt::format("step_{:08d}\n", step));
    if (!s) return s;
  }
  groups_.world->barrier();
  return {};
}

Status Trainer::load_checkpoint(const std::string& dir) {
  auto manifest = find_resumable_checkpoint(dir, options_.model, options_.config);
  if (!manifest) return manifest.error();
  const int step = (*manifest)["step"].get<int>();
  const std::string path = checkpoint_shard_path(dir, step, groups_.world_rank);
  std::ifstream in(path, std::ios::binary);
  ShardHeader header{};
  in.read(reinterpret_cast<char*>(&header), sizeof(header));
  auto state = params_->state();
  if (!in || std::memcmp(header.magic, kShardMagic, sizeof(kShardMagic)) != 0 || header.step != step ||
      header.rank != groups_.world_rank || header.tensors != static_cast<std::int64_t>(state.size()))
    return make_error(fmt::format("checkpoint shard '{}' is not a shard of step {} for rank {}", path, step,
                                  groups_.world_rank));
  for (Tensor* t : state) {
    std::int64_t n = 0;
    in.read(reinterpret_cast<char*>(&n), sizeof(n));
    if (!in || n != t->numel()) return make_error(fmt::format("checkpoint shard '{}' has the wrong sizes", path));
    std::vector<float> host(static_cast<std::size_t>(n));
    in.read(reinterpret_cast<char*>(host.data()), static_cast<std::streamsize>(n * sizeof(float)));
    if (!in) return make_error(fmt::format("checkpoint shard '{}' is truncated", path));
    backend_.from_host(t->data(), host.data(), n);
  }
  completed_steps_ = step;
  return {};
}

}  // namespace loom::exec
