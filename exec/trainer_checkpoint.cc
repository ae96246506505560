// Trainer::save_checkpoint and load_checkpoint: the collective side of exec/checkpoint.h — every
// rank's shard, the agreement that all are durable before rank 0 commits, and resharding on load.
#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "exec/checkpoint.h"
#include "exec/durable_file.h"
#include "exec/trainer.h"

namespace loom::exec {

namespace {

constexpr char kShardMagic[8] = {'L', 'O', 'O', 'M', 'C', 'K', 'P', '1'};

struct ShardHeader {
  char magic[8];
  std::int64_t step, rank, tensors;
};

// The outcome of a step every rank took, agreed over the world: ok on every rank, or on every rank
// the error of the lowest failing one (its message sent along), so rank 0 can print the one line.
Status agree(Communicator& world, int rank, const Status& mine) {
  double lowest = -static_cast<double>(mine ? world.size() : rank);  // max of negatives: the minimum
  world.all_reduce(&lowest, 1, ReduceOp::kMax);
  const int failed = static_cast<int>(-lowest);
  if (failed >= world.size()) return {};
  constexpr std::size_t kChars = 512;
  std::vector<double> text(kChars, 0.0);
  if (rank == failed)
    for (std::size_t i = 0; i < std::min(kChars - 1, mine.error().message.size()); ++i)
      text[i] = static_cast<unsigned char>(mine.error().message[i]);
  world.all_reduce(text.data(), static_cast<std::int64_t>(kChars), ReduceOp::kSum);
  std::string message;
  for (double c = text[0]; c != 0 && message.size() < kChars; c = text[message.size()])
    message.push_back(static_cast<char>(static_cast<int>(c)));
  return make_error(message);
}

// The three arrays (parameters, Adam m, Adam v) of a shard's bytes.
Result<std::vector<std::vector<float>>> parse_shard(const std::vector<char>& bytes, const std::string& path, int step,
                                                    int rank) {
  ShardHeader header{};
  std::size_t at = sizeof(header);
  if (bytes.size() >= sizeof(header)) std::memcpy(&header, bytes.data(), sizeof(header));
  if (bytes.size() < sizeof(header) || std::memcmp(header.magic, kShardMagic, sizeof(kShardMagic)) != 0 ||
      header.step != step || header.rank != rank || header.tensors != 3)
    return make_error(
        fmt::format("--resume: checkpoint shard '{}' is not a shard of step {} for rank {}", path, step, rank));
  std::vector<std::vector<float>> arrays(3);
  for (auto& a : arrays) {
    std::int64_t n = 0;
    if (bytes.size() - at < sizeof(n))
      return make_error(fmt::format("--resume: checkpoint shard '{}' is truncated", path));
    std::memcpy(&n, bytes.data() + at, sizeof(n));
    at += sizeof(n);
    if (n < 0 || static_cast<std::uint64_t>(n) > (bytes.size() - at) / sizeof(float))
      return make_error(fmt::format("--resume: checkpoint shard '{}' is truncated or corrupt", path));
    a.resize(static_cast<std::size_t>(n));
    std::memcpy(a.data(), bytes.data() + at, a.size() * sizeof(float));
    at += a.size() * sizeof(float);
  }
  if (at != bytes.size()) return make_error(fmt::format("--resume: checkpoint shard '{}' has trailing bytes", path));
  return arrays;
}

Result<std::vector<std::vector<float>>> read_shard(const ResumePoint& point, int rank) {
  const std::string path = fmt::format("{}/rank_{:05d}.bin", point.step_dir, rank);
  auto bytes = read_verified_shard(path, point.shards.empty() ? nullptr : &point.shards[rank]);
  if (!bytes) return bytes.error();
  return parse_shard(*bytes, path, point.step, rank);
}

// Every parameter and Adam moment of a checkpoint as full tensors, from the shards of all the
// ranks of the layout it was saved with (TP slices, pipeline stages, ZeRO shards and the routed experts
// of the expert grid reassembled). Each rank's shard is read once; a unit's values are put together from
// the ranks holding its pieces, then spread over its parameters' full tensors.
Result<std::array<ParameterStore::FullTensors, 3>> read_full_checkpoint(const ResumePoint& point,
                                                                        const ModelSpec& model) {
  const ParallelConfig& saved = point.config;
  struct Assembled {
    Unit unit;
    std::array<std::vector<float>, 3> values;  // the unit's padded values: parameters, Adam m, Adam v
  };
  std::map<std::string, Assembled> units;  // by unit name and the TP slice it holds
  for (int r = 0; r < saved.world_size(); ++r) {
    auto shard = read_shard(point, r);
    if (!shard) return shard.error();
    const RankCoords rc = rank_coords(saved, r);
    const StageLayout layout =
        make_rank_layout(model, saved, rc.tp_rank, rc.pp_rank, expert_coords(saved, r).ep_rank).combined;
    std::int64_t offset = 0, shard_offset = 0;
    for (const Unit& unit : layout.units) {
      // As the ParameterStore that wrote it shards the unit (whole experts are the same on every TP rank).
      const ShardPlace place = shard_place(unit, saved, r);
      const int index = place.index;
      const int slice = place.over_expert_dp && saved.expert_tp() != saved.tp ? 0 : rc.tp_rank;
      const std::int64_t part = unit.padded / place.holders;
      Assembled& a = units[unit.name + "|" + std::to_string(slice)];
      if (a.unit.params.empty()) {
        a.unit = unit;
        for (auto& v : a.values) v.assign(static_cast<std::size_t>(unit.padded), 0.0f);
      }
      for (int k = 0; k < 3; ++k) {
        const bool sharded = k == 0 ? saved.zero >= 3 : saved.zero >= 1;
        const std::int64_t from = sharded ? shard_offset : offset, n = sharded ? part : unit.padded;
        const std::vector<float>& source = (*shard)[k];
        if (from + n > static_cast<std::int64_t>(source.size()))
          return make_error(fmt::format("--resume: checkpoint '{}' has the wrong sizes", point.step_dir));
        std::copy(source.begin() + from, source.begin() + from + n, a.values[k].begin() + (sharded ? index * part : 0));
      }
      offset += unit.padded;
      shard_offset += part;
    }
  }
  std::array<ParameterStore::FullTensors, 3> full;
  for (const auto& [key, a] : units)
    for (int k = 0; k < 3; ++k)
      for (const ParamSlot& slot : a.unit.params) {
        std::vector<float>& dst = full[k][slot.name];
        for (const RowBlock& b : slot.row_blocks)
          for (std::int64_t r = 0; r < b.count; ++r)
            for (std::int64_t c = 0; c < slot.cols; ++c) {
              const std::size_t index =
                  static_cast<std::size_t>((b.full_row + r) * slot.full_cols + slot.col_offset + c);
              if (dst.size() <= index) dst.resize(index + 1, 0.0f);
              dst[index] = a.values[k][static_cast<std::size_t>(slot.offset + (b.local_row + r) * slot.cols + c)];
            }
      }
  return full;
}

// Rank 0 readies the step directory: a manifest left there by an earlier save of the same step (a
// run resumed from an older checkpoint) goes first, so a crash mid-save leaves the directory
// incomplete rather than an old manifest over a mix of old and new shards.
Status prepare_step_dir(const std::string& dir, const std::string& step_dir) {
  std::error_code ec;
  std::filesystem::create_directories(step_dir, ec);
  if (ec) return make_error(fmt::format("checkpoint: cannot create '{}' ({})", step_dir, ec.message()));
  if (std::filesystem::remove(step_dir + "/manifest.json", ec); ec)
    return make_error(
        fmt::format("checkpoint: cannot remove the stale '{}/manifest.json' ({})", step_dir, ec.message()));
  if (Status s = sync_directory(step_dir); !s) return make_error("checkpoint: " + s.error().message);
  return sync_directory(dir);
}

}  // namespace

Result<ShardEntry> Trainer::write_shard(const std::string& path, int step, const std::vector<float>& parameters) {
  auto file = DurableFile::create(path);
  if (!file) return file.error();
  auto state = params_->state();
  ShardHeader header{};
  std::memcpy(header.magic, kShardMagic, sizeof(kShardMagic));
  header.step = step;
  header.rank = groups_.world_rank;
  header.tensors = static_cast<std::int64_t>(state.size());
  Status s = file->write(&header, sizeof(header));
  for (Tensor* t : state) {
    if (!s) break;
    std::vector<float> host(static_cast<std::size_t>(t->numel()));
    if (t == state.front())
      host = parameters;
    else
      backend_.to_host(host.data(), t->ref(), t->numel());
    const std::int64_t n = t->numel();
    s = file->write(&n, sizeof(n));
    if (s) s = file->write(host.data(), host.size() * sizeof(float));
  }
  if (s) s = file->finish();
  if (!s) return s.error();
  kill_if_requested(step, groups_.world_rank, "shard");
  if (s = file->publish(); !s) return s.error();
  return ShardEntry{std::filesystem::path(path).filename().string(), file->bytes(), file->crc32c()};
}

Status Trainer::save_checkpoint(const std::string& dir) {
  const int step = completed_steps_, rank = groups_.world_rank, world = options_.config.world_size();
  const std::string step_dir = checkpoint_step_dir(dir, step);
  if (Status s = agree(*groups_.world, rank, rank == 0 ? prepare_step_dir(dir, step_dir) : Status{}); !s) return s;
  // Parameters at full precision (the fp32 master under mixed precision; a collective under ZeRO 1/2).
  const std::vector<float> parameters = params_->checkpoint_parameters();
  const Result<ShardEntry> shard = write_shard(checkpoint_shard_path(dir, step, rank), step, parameters);
  if (Status s = agree(*groups_.world, rank, shard ? Status{} : Status(shard.error())); !s)
    return make_error(fmt::format("checkpoint of step {}: {}", step, s.error().message));
  // Every shard is durable: rank 0 learns their sizes and checksums and commits the checkpoint.
  std::vector<double> table(2 * static_cast<std::size_t>(world), 0.0);  // exact: sizes < 2^53, CRCs < 2^32
  table[2 * rank] = static_cast<double>(shard->bytes);
  table[2 * rank + 1] = shard->crc32c;
  groups_.world->all_reduce(table.data(), static_cast<std::int64_t>(table.size()), ReduceOp::kSum);
  Status committed;
  if (rank == 0) {
    std::vector<ShardEntry> shards;
    for (int r = 0; r < world; ++r)
      shards.push_back({fmt::format("rank_{:05d}.bin", r), static_cast<std::int64_t>(table[2 * r]),
                        static_cast<std::uint32_t>(table[2 * r + 1])});
    const Json manifest = checkpoint_manifest(identity_, step, optimizer_updates_, options_.config,
                                              to_string(backend_.compute_dtype()), shards);
    committed = write_file_durably(step_dir + "/manifest.json", manifest.dump(2) + "\n");
    if (committed) kill_if_requested(step, rank, "manifest");
    if (committed) committed = write_file_durably(dir + "/latest", fmt::format("step_{:08d}\n", step));
    if (!committed) committed = make_error(fmt::format("checkpoint of step {}: {}", step, committed.error().message));
  }
  return agree(*groups_.world, rank, committed);
}

Status Trainer::load_checkpoint(const std::string& dir) {
  auto point = find_resumable_checkpoint(dir, identity_);
  if (Status s = agree(*groups_.world, groups_.world_rank, point ? Status{} : Status(point.error())); !s) return s;
  if (!(point->config == options_.config)) {
    // Saved under another layout: reassemble full tensors and take this rank's share.
    auto full = read_full_checkpoint(*point, options_.model);
    if (Status s = agree(*groups_.world, groups_.world_rank, full ? Status{} : Status(full.error())); !s) return s;
    params_->import_full((*full)[0], (*full)[1], (*full)[2]);
    completed_steps_ = point->step;
    optimizer_updates_ = point->updates;
    return {};
  }
  auto arrays = read_shard(*point, groups_.world_rank);
  auto state = params_->state();
  Status read = arrays ? Status{} : Status(arrays.error());
  for (std::size_t k = 0; read && k < state.size(); ++k)
    if (static_cast<std::int64_t>((*arrays)[k].size()) != state[k]->numel())
      read = make_error(fmt::format("--resume: checkpoint shard '{}/rank_{:05d}.bin' has the wrong sizes",
                                    point->step_dir, groups_.world_rank));
  if (Status s = agree(*groups_.world, groups_.world_rank, read); !s) return s;
  params_->load_parameters((*arrays)[0]);  // and the fp32 master, exactly
  for (std::size_t k = 1; k < state.size(); ++k)
    backend_.from_host(state[k]->ref(), (*arrays)[k].data(), state[k]->numel());
  completed_steps_ = point->step;
  optimizer_updates_ = point->updates;
  return {};
}

}  // namespace loom::exec
