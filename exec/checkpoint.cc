#include "exec/checkpoint.h"

#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "exec/crc32c.h"
#include "exec/data_loader.h"
#include "exec/trainer.h"

namespace loom::exec {

namespace {

constexpr const char* kFormat = "loom-checkpoint-2";
constexpr const char* kFormatWithoutChecksums = "loom-checkpoint-1";
constexpr std::int64_t kFingerprintTokens = 1 << 16;

std::string hex32(std::uint32_t v) { return fmt::format("{:08x}", v); }

// A manifest field that is not a whole number of its type.
struct BadNumber : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The whole number m[key] as T. nlohmann's get<T>() casts a fractional or out-of-range number unchecked
// (undefined behaviour: "optimizer_updates": 1e31 did so), and Loom writes every count as an integer.
template <class T>
T whole(const Json& m, const char* key) {
  const Json& v = m.at(key);
  if (v.is_number_unsigned()) {
    if (const auto u = v.get<std::uint64_t>(); std::in_range<T>(u)) return static_cast<T>(u);
  } else if (v.is_number_integer()) {
    if (const auto i = v.get<std::int64_t>(); std::in_range<T>(i)) return static_cast<T>(i);
  }
  throw BadNumber(fmt::format("'{}' = {} is not a whole number in [{}, {}]", key, v.dump(),
                              std::numeric_limits<T>::min(), std::numeric_limits<T>::max()));
}

// The step of a directory named step_NNNNNNNN (eight digits), or -1.
int step_of_name(const std::string& name) {
  if (name.size() != 13 || name.compare(0, 5, "step_") != 0) return -1;
  int step = 0;
  for (std::size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

// The steps that have a directory under `dir`, newest first.
std::vector<int> saved_steps(const std::string& dir) {
  std::vector<int> steps;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const int step = step_of_name(entry.path().filename().string());
    if (step >= 0 && entry.is_directory(ec)) steps.push_back(step);
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

bool is_complete(const std::string& dir, int step) {
  std::error_code ec;
  return std::filesystem::exists(checkpoint_step_dir(dir, step) + "/manifest.json", ec);
}

// The first field in which the checkpoint's model differs from this run's, as "field: a vs b".
std::string model_difference(const Json& saved, const Json& mine) {
  for (const auto& [key, value] : mine.items())
    if (!saved.contains(key) || saved[key] != value)
      return fmt::format("'{}' is {} in the checkpoint, {} in this run", key,
                         saved.contains(key) ? saved[key].dump() : "absent", value.dump());
  for (const auto& [key, value] : saved.items())
    if (!mine.contains(key)) return fmt::format("the checkpoint's model has '{}' = {}", key, value.dump());
  return "the model differs";
}

// What makes the manifest's run another run than `run`, or "" when it is the same run.
std::string identity_difference(const Json& m, const RunIdentity& run) {
  const Json model = to_json(run.model);
  if (m.at("model") != model)
    return fmt::format("holds model '{}', not this run's '{}': {}", m.at("model").value("name", "?"), run.model.name,
                       model_difference(m.at("model"), model));
  auto differs = [](const char* what, auto saved, auto mine) {
    return fmt::format("was saved with {} {}, this run has {}", what, saved, mine);
  };
  if (whole<std::uint64_t>(m, "seed") != run.seed) return differs("--seed", whole<std::uint64_t>(m, "seed"), run.seed);
  if (whole<std::int64_t>(m, "global_batch") != run.global_batch)
    return differs("global batch", whole<std::int64_t>(m, "global_batch"), run.global_batch);
  if (whole<int>(m, "seq_len") != run.seq_len) return differs("sequence length", whole<int>(m, "seq_len"), run.seq_len);
  if (m.contains("data")) {
    const Json& d = m.at("data");
    const auto tokens = whole<std::int64_t>(d, "tokens");
    const std::string fingerprint = d.at("fingerprint_crc32c").get<std::string>();
    if (tokens != run.data_tokens || fingerprint != hex32(run.data_fingerprint))
      return fmt::format(
          "was trained on another token file ({} tokens, first tokens' CRC-32C {}; this run's --data: {} "
          "tokens, {})",
          tokens, fingerprint, run.data_tokens, hex32(run.data_fingerprint));
  }
  return "";
}

// The manifest of the checkpoint in `step_dir`, parsed and checked against this run; shards are
// checked for presence and size only.
Result<ResumePoint> load_manifest(const std::string& step_dir, int step, const RunIdentity& run) {
  const std::string path = step_dir + "/manifest.json";
  auto manifest = read_json_file(path);
  if (!manifest) return make_error(fmt::format("--resume: {}", manifest.error().message));
  ResumePoint point;
  point.manifest = *manifest;
  point.step = step;
  point.step_dir = step_dir;
  const Json& m = point.manifest;
  try {  // a hand-edited or foreign manifest: wrong types end here, as one line
    const std::string format = m.at("format").get<std::string>();
    if (format != kFormat && format != kFormatWithoutChecksums)
      return make_error(
          fmt::format("--resume: {}: format '{}' is not one this loom reads ({})", path, format, kFormat));
    if (whole<int>(m, "step") != step)
      return make_error(fmt::format("--resume: {}: records step {} but lies in the directory of step {}", path,
                                    whole<int>(m, "step"), step));
    // Absent in manifests written before skipped updates were counted: every step updated then.
    point.updates = m.contains("optimizer_updates") ? whole<int>(m, "optimizer_updates") : step;
    if (point.updates < 0 || point.updates > step)
      return make_error(
          fmt::format("--resume: {}: records {} optimizer updates in {} steps", path, point.updates, step));
    auto saved = config_from_json(m.at("config"));
    if (!saved) return make_error(fmt::format("--resume: {}: {}", path, saved.error().message));
    point.config = *saved;
    if (std::string why = identity_difference(m, run); !why.empty())
      return make_error(fmt::format("--resume: {}: this checkpoint {}", path, why));
    if (format == kFormat) {
      const Json& shards = m.at("shards");
      if (!shards.is_array() || static_cast<int>(shards.size()) != saved->world_size())
        return make_error(fmt::format("--resume: {}: lists {} shards for {} ranks", path,
                                      shards.is_array() ? shards.size() : 0, saved->world_size()));
      for (int r = 0; r < saved->world_size(); ++r) {
        const Json& s = shards[static_cast<std::size_t>(r)];
        ShardEntry e{s.at("file").get<std::string>(), whole<std::int64_t>(s, "bytes"), 0};
        // Only the expected name, so a manifest cannot point outside its directory.
        if (e.file != fmt::format("rank_{:05d}.bin", r))
          return make_error(
              fmt::format("--resume: {}: shard {} is named '{}', not rank_{:05d}.bin", path, r, e.file, r));
        const std::string crc = s.at("crc32c").get<std::string>();
        char* end = nullptr;
        e.crc32c = static_cast<std::uint32_t>(std::strtoul(crc.c_str(), &end, 16));
        if (crc.size() != 8 || end != crc.c_str() + 8)
          return make_error(fmt::format("--resume: {}: shard {} has checksum '{}', not 8 hex digits", path, r, crc));
        point.shards.push_back(e);
      }
    }
  } catch (const Json::exception& e) {
    return make_error(fmt::format("--resume: {}: malformed ({})", path, e.what()));
  } catch (const BadNumber& e) {
    return make_error(fmt::format("--resume: {}: malformed ({})", path, e.what()));
  }
  for (int r = 0; r < point.config.world_size(); ++r) {
    const std::string shard = fmt::format("{}/rank_{:05d}.bin", step_dir, r);
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(shard, ec);
    if (ec) return make_error(fmt::format("--resume: checkpoint shard '{}' is missing ({})", shard, ec.message()));
    if (!point.shards.empty() && static_cast<std::int64_t>(bytes) != point.shards[r].bytes)
      return make_error(fmt::format("--resume: checkpoint shard '{}' has {} bytes, manifest.json records {}{}", shard,
                                    bytes, point.shards[r].bytes,
                                    static_cast<std::int64_t>(bytes) < point.shards[r].bytes ? " (truncated)" : ""));
  }
  if (point.shards.empty())
    point.note = fmt::format("--resume: {} predates shard checksums; its shards are not verified", path);
  return point;
}

}  // namespace

std::string checkpoint_step_dir(const std::string& dir, int step) { return fmt::format("{}/step_{:08d}", dir, step); }

std::string checkpoint_shard_path(const std::string& dir, int step, int rank) {
  return fmt::format("{}/rank_{:05d}.bin", checkpoint_step_dir(dir, step), rank);
}

RunIdentity run_identity(const TrainerOptions& options, const TokenFile& data) {
  RunIdentity id;
  id.model = options.model;
  id.seed = options.seed;
  id.global_batch = options.training.global_batch;
  id.seq_len = options.training.seq_len > 0 ? options.training.seq_len : options.model.seq_len;
  id.data_tokens = data.num_tokens();
  std::vector<int> first(static_cast<std::size_t>(std::min(data.num_tokens(), kFingerprintTokens)));
  data.read(0, static_cast<std::int64_t>(first.size()), first.data());
  id.data_fingerprint = crc32c(0, first.data(), first.size() * sizeof(int));
  return id;
}

Json checkpoint_manifest(const RunIdentity& run, int step, int updates, const ParallelConfig& config,
                         const std::string& compute_dtype, const std::vector<ShardEntry>& shards) {
  Json list = Json::array();
  for (const ShardEntry& s : shards)
    list.push_back({{"file", s.file}, {"bytes", s.bytes}, {"crc32c", hex32(s.crc32c)}});
  return {{"format", kFormat},
          {"step", step},
          {"optimizer_updates", updates},
          {"world_size", config.world_size()},
          {"seed", run.seed},
          {"model", to_json(run.model)},
          {"config", to_json(config)},
          {"global_batch", run.global_batch},
          {"seq_len", run.seq_len},
          {"compute_dtype", compute_dtype},  // shards hold fp32 (the master) either way
          {"next_sequence", static_cast<std::int64_t>(step) * run.global_batch},
          {"data", {{"tokens", run.data_tokens}, {"fingerprint_crc32c", hex32(run.data_fingerprint)}}},
          {"shards", list}};
}

Result<ResumePoint> find_resumable_checkpoint(const std::string& dir, const RunIdentity& run) {
  std::string passed_over;  // why `latest` is not used
  int step = -1;
  auto latest = read_text_file(dir + "/latest");
  if (!latest) {
    passed_over = "no 'latest' file";
  } else {
    const std::string name = latest->substr(0, latest->find_first_of("\r\n"));
    const int named = step_of_name(name);
    if (named < 0)
      passed_over = fmt::format("'latest' holds '{}', not a checkpoint name", name.substr(0, 40));
    else if (!is_complete(dir, named))
      passed_over = fmt::format("'latest' names {}, which has no manifest.json (its save did not finish)", name);
    else
      step = named;
  }
  if (step < 0) {
    for (int s : saved_steps(dir))
      if (is_complete(dir, s)) {
        step = s;
        break;
      }
    if (step < 0) return make_error(fmt::format("--resume: no complete checkpoint in '{}' ({})", dir, passed_over));
  }
  auto point = load_manifest(checkpoint_step_dir(dir, step), step, run);
  if (point && !passed_over.empty())
    point->note =
        fmt::format("--resume: {}; resuming from {}, the newest complete checkpoint", passed_over, point->step_dir);
  return point;
}

Result<std::vector<char>> read_verified_shard(const std::string& path, const ShardEntry* entry) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(fmt::format("--resume: checkpoint shard '{}' cannot be read", path));
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (entry == nullptr) return bytes;
  if (static_cast<std::int64_t>(bytes.size()) != entry->bytes)
    return make_error(fmt::format("--resume: checkpoint shard '{}' has {} bytes, manifest.json records {}", path,
                                  bytes.size(), entry->bytes));
  const std::uint32_t crc = crc32c(0, bytes.data(), bytes.size());
  if (crc != entry->crc32c)
    return make_error(
        fmt::format("--resume: checkpoint shard '{}' fails its checksum (corrupt): CRC-32C {}, manifest.json "
                    "records {}",
                    path, hex32(crc), hex32(entry->crc32c)));
  return bytes;
}

std::vector<std::string> prune_checkpoints(const std::string& dir, int step, int keep) {
  std::vector<std::string> failures;
  if (keep <= 0) return failures;
  const std::vector<int> steps = saved_steps(dir);
  int kept = 0, oldest_kept = step;
  for (int s : steps)
    if (s <= step && kept < keep && is_complete(dir, s)) {
      ++kept;
      oldest_kept = s;
    }
  if (kept < keep) return failures;
  // Older directories go, complete or not (an unfinished save's leftovers too); newer ones are not ours.
  for (int s : steps)
    if (s < oldest_kept) {
      std::error_code ec;
      std::filesystem::remove_all(checkpoint_step_dir(dir, s), ec);
      if (ec)
        failures.push_back(
            fmt::format("--keep-checkpoints: cannot remove {} ({})", checkpoint_step_dir(dir, s), ec.message()));
    }
  return failures;
}

void kill_if_requested(int step, int rank, const char* phase) {
  const char* request = std::getenv("LOOM_TEST_KILL_DURING_SAVE");
  if (request == nullptr || rank != 0) return;
  const std::string value = request;
  const auto colon = value.find(':');
  const std::string at_phase = colon == std::string::npos ? "shard" : value.substr(colon + 1);
  if (std::atoi(value.substr(0, colon).c_str()) == step && at_phase == phase) ::raise(SIGKILL);
}

}  // namespace loom::exec
