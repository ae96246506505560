// Checkpoints that survive a crash: each rank writes its shard (parameters or their ZeRO-3 shard, both
// Adam moments) to dir/step_NNNNNNNN/rank_RRRRR.bin durably (temporary name, fsync, rename, directory
// fsync); once every shard is down, rank 0 writes manifest.json (each shard's size and CRC-32C and the
// run's identity) and then points dir/latest at it, both durably. A checkpoint is complete exactly when
// it has a manifest; resuming checks every shard against it and refuses a mismatch with one line. The
// data order is a function of the step, so resuming replays the same batches and losses, bit for bit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/json_io.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/result.h"

namespace loom::exec {

struct TrainerOptions;
class TokenFile;

std::string checkpoint_step_dir(const std::string& dir, int step);
std::string checkpoint_shard_path(const std::string& dir, int step, int rank);

// What makes a resumed run the same run: a checkpoint continues only a run that agrees on all of it.
// The layout is not part of it (a checkpoint of another layout is resharded on load), nor the backend.
struct RunIdentity {
  ModelSpec model;
  std::uint64_t seed = 0;
  std::int64_t global_batch = 0;
  int seq_len = 0;
  std::int64_t data_tokens = 0;        // length of the token file
  std::uint32_t data_fingerprint = 0;  // CRC-32C of its first 64 Ki tokens
};
RunIdentity run_identity(const TrainerOptions& options, const TokenFile& data);

struct ShardEntry {
  std::string file;  // rank_RRRRR.bin, within the step directory
  std::int64_t bytes = 0;
  std::uint32_t crc32c = 0;
};

// manifest.json of a checkpoint at `step` saved under `config`, after `updates` optimizer updates
// (fewer than `step` when --on-nan skip dropped some).
Json checkpoint_manifest(const RunIdentity& run, int step, int updates, const ParallelConfig& config,
                         const std::string& compute_dtype, const std::vector<ShardEntry>& shards);

struct ResumePoint {
  Json manifest;
  int step = 0;
  int updates = 0;  // optimizer updates applied by then: Adam's step count and the LR schedule's position
  std::string step_dir;
  ParallelConfig config;           // the layout it was saved under
  std::vector<ShardEntry> shards;  // by rank; empty for a manifest written before checksums
  std::string note;                // when `latest` was unusable: why, and which checkpoint is taken instead
};

// The checkpoint `latest` names, or the newest complete one when `latest` is missing or names an
// incomplete one (a save cut short), checked against this run's identity and with every shard present
// at its recorded size. Reads no shard contents; callable on every rank before any collective.
Result<ResumePoint> find_resumable_checkpoint(const std::string& dir, const RunIdentity& run);

// A shard's bytes, refused unless its size and CRC-32C are what the manifest records (entry may be
// null for a manifest written before checksums).
Result<std::vector<char>> read_verified_shard(const std::string& path, const ShardEntry* entry);

// torchtitan's keep_latest_k: after the save of `step`, removes the step directories older than the
// `keep` newest complete checkpoints at or before it (keep <= 0: keeps everything). Returns one
// message per directory it could not remove; failing to remove is not an error of the save.
std::vector<std::string> prune_checkpoints(const std::string& dir, int step, int keep);

// Fault injection for tests: LOOM_TEST_KILL_DURING_SAVE=STEP[:shard|:manifest] makes rank 0 raise
// SIGKILL while saving step STEP, after its temporary shard is durable but before the rename (shard,
// the default), or after the manifest is published but before `latest` moves (manifest).
void kill_if_requested(int step, int rank, const char* phase);

}  // namespace loom::exec
