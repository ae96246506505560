#include "exec/checkpoint.h"

#include <array>
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
  if (!saved) return make_error(fmt::format("--resume: {}/manifest.json: {}", step_dir, saved.error().message));
  if ((*manifest)["model"] != to_json(model))
    return make_error(fmt::format("--resume: checkpoint '{}' holds a different model", step_dir));
  (void)config;
  for (int r = 0; r < saved->world_size(); ++r)
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
  // Parameters at full precision (the fp32 master under mixed precision; a collective under ZeRO 1/2).
  const std::vector<float> parameters = params_->checkpoint_parameters();
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
      if (t == state.front())
        host = parameters;
      else
        backend_.to_host(host.data(), t->ref(), t->numel());
      const std::int64_t n = t->numel();
      out.write(reinterpret_cast<const char*>(&n), sizeof(n));
      out.write(reinterpret_cast<const char*>(host.data()), static_cast<std::streamsize>(n * sizeof(float)));
    }
    out.close();  // a failed final flush (a full disk) must fail the save, not leave a short shard
    ok = !out.fail();
  }
  ok = ok && std::rename((path + ".tmp").c_str(), path.c_str()) == 0;
  double failures = ok ? 0.0 : 1.0;
  groups_.world->all_reduce(&failures, 1, ReduceOp::kSum);
  if (failures > 0)
    return make_error(fmt::format("checkpoint: {} rank(s) could not write under '{}'", failures, step_dir));
  if (groups_.world_rank == 0) {
    Json manifest = {
        {"format", "loom-checkpoint-1"},
        {"step", step},
        {"world_size", options_.config.world_size()},
        {"seed", options_.seed},
        {"model", to_json(options_.model)},
        {"config", to_json(options_.config)},
        {"global_batch", options_.training.global_batch},
        {"seq_len", seq_},
        {"compute_dtype", to_string(backend_.compute_dtype())},  // shards hold fp32 (the master) either way
        {"next_sequence", static_cast<std::int64_t>(step) * options_.training.global_batch}};
    Status s = write_text_file_atomic(step_dir + "/manifest.json", manifest.dump(2) + "\n");
    if (s) s = write_text_file_atomic(dir + "/latest", fmt::format("step_{:08d}\n", step));
    if (!s) return s;
  }
  groups_.world->barrier();
  return {};
}

namespace {

Result<std::vector<std::vector<float>>> read_shard(const std::string& path, int step, int rank) {
  std::ifstream in(path, std::ios::binary);
  ShardHeader header{};
  in.read(reinterpret_cast<char*>(&header), sizeof(header));
  if (!in || std::memcmp(header.magic, kShardMagic, sizeof(kShardMagic)) != 0 || header.step != step ||
      header.rank != rank || header.tensors != 3)
    return make_error(fmt::format("checkpoint shard '{}' is not a shard of step {} for rank {}", path, step, rank));
  std::vector<std::vector<float>> arrays(3);
  for (auto& a : arrays) {
    std::int64_t n = 0;
    in.read(reinterpret_cast<char*>(&n), sizeof(n));
    if (!in || n < 0 || n > (std::int64_t{1} << 40))
      return make_error(fmt::format("checkpoint shard '{}' is corrupt", path));
    a.resize(static_cast<std::size_t>(n));
    in.read(reinterpret_cast<char*>(a.data()), static_cast<std::streamsize>(n * sizeof(float)));
    if (!in) return make_error(fmt::format("checkpoint shard '{}' is truncated", path));
  }
  return arrays;
}

// Every parameter and Adam moment of a checkpoint as full tensors, from the shards of all the
// ranks of the layout it was saved with (TP slices, pipeline stages, ZeRO shards reassembled).
Result<std::array<ParameterStore::FullTensors, 3>> read_full_checkpoint(const std::string& dir, int step,
                                                                        const ModelSpec& model,
                                                                        const ParallelConfig& saved) {
  std::array<ParameterStore::FullTensors, 3> full;
  for (int pp = 0; pp < saved.pp; ++pp)
    for (int tp = 0; tp < saved.tp; ++tp) {
      const StageLayout layout = make_rank_layout(model, saved, tp, pp).combined;
      std::vector<std::vector<std::vector<float>>> shards;  // [dp rank][tensor]
      for (int d = 0; d < saved.dp; ++d) {
        const int rank = rank_of(saved, {tp, d, pp});
        auto shard = read_shard(checkpoint_shard_path(dir, step, rank), step, rank);
        if (!shard) return shard.error();
        shards.push_back(std::move(*shard));
      }
      std::int64_t offset = 0, shard_offset = 0;
      for (const Unit& unit : layout.units) {
        const std::int64_t part = unit.padded / saved.zero_shards();  // HSDP: dp ranks 0..g-1 hold the shards
        for (int k = 0; k < 3; ++k) {
          const bool sharded = k == 0 ? saved.zero >= 3 : saved.zero >= 1;
          std::vector<float> values(static_cast<std::size_t>(unit.padded));
          for (std::int64_t i = 0; i < unit.padded; ++i) {
            const std::size_t from = static_cast<std::size_t>(sharded ? shard_offset + i % part : offset + i);
            const auto& source = shards[sharded ? i / part : 0][k];
            if (from >= source.size()) return make_error(fmt::format("checkpoint in '{}' has the wrong sizes", dir));
            values[static_cast<std::size_t>(i)] = source[from];
          }
          for (const ParamSlot& slot : unit.params) {
            std::vector<float>& dst = full[k][slot.name];
            for (const RowBlock& b : slot.row_blocks)
              for (std::int64_t r = 0; r < b.count; ++r)
                for (std::int64_t c = 0; c < slot.cols; ++c) {
                  const std::size_t index =
                      static_cast<std::size_t>((b.full_row + r) * slot.full_cols + slot.col_offset + c);
                  if (dst.size() <= index) dst.resize(index + 1, 0.0f);
                  dst[index] = values[static_cast<std::size_t>(slot.offset + (b.local_row + r) * slot.cols + c)];
                }
          }
        }
        offset += unit.padded;
        shard_offset += part;
      }
    }
  return full;
}

}  // namespace

Status Trainer::load_checkpoint(const std::string& dir) {
  auto manifest = find_resumable_checkpoint(dir, options_.model, options_.config);
  if (!manifest) return manifest.error();
  const int step = (*manifest)["step"].get<int>();
  const ParallelConfig saved = *config_from_json((*manifest)["config"]);
  if (!(saved == options_.config)) {
    // Saved under another layout: reassemble full tensors and take this rank's share.
    auto full = read_full_checkpoint(dir, step, options_.model, saved);
    if (!full) return full.error();
    params_->import_full((*full)[0], (*full)[1], (*full)[2]);
    completed_steps_ = step;
    return {};
  }
  const std::string path = checkpoint_shard_path(dir, step, groups_.world_rank);
  std::ifstream in(path, std::ios::binary);
  ShardHeader header{};
  in.read(reinterpret_cast<char*>(&header), sizeof(header));
  auto state = params_->state();
  if (!in || std::memcmp(header.magic, kShardMagic, sizeof(kShardMagic)) != 0 || header.step != step ||
      header.rank != groups_.world_rank || header.tensors != static_cast<std::int64_t>(state.size()))
    return make_error(
        fmt::format("checkpoint shard '{}' is not a shard of step {} for rank {}", path, step, groups_.world_rank));
  for (Tensor* t : state) {
    std::int64_t n = 0;
    in.read(reinterpret_cast<char*>(&n), sizeof(n));
    if (!in || n != t->numel()) return make_error(fmt::format("checkpoint shard '{}' has the wrong sizes", path));
    std::vector<float> host(static_cast<std::size_t>(n));
    in.read(reinterpret_cast<char*>(host.data()), static_cast<std::streamsize>(n * sizeof(float)));
    if (!in) return make_error(fmt::format("checkpoint shard '{}' is truncated", path));
    if (t == state.front())
      params_->load_parameters(host);  // and the fp32 master, exactly
    else
      backend_.from_host(t->ref(), host.data(), n);
  }
  completed_steps_ = step;
  return {};
}

}  // namespace loom::exec
