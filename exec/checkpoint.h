// Checkpoints: each rank writes its own shard (parameters or their ZeRO-3 shard, both Adam moments,
// the step) to dir/step_NNNNNNNN/rank_RRRRR.bin; rank 0 then writes manifest.json there and points
// dir/latest at it, so a checkpoint is complete exactly when `latest` names it. The data order is a
// function of the step, so resuming replays the same batches and the same loss curve, bit for bit.
#pragma once

#include <string>

#include "core/json_io.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/result.h"

namespace loom::exec {

std::string checkpoint_step_dir(const std::string& dir, int step);
std::string checkpoint_shard_path(const std::string& dir, int step, int rank);

// The newest complete checkpoint's manifest, checked against the model this run trains (the layout
// may differ: the checkpoint is then resharded on load); callable on every rank before any collective.
Result<Json> find_resumable_checkpoint(const std::string& dir, const ModelSpec& model, const ParallelConfig& config);

}  // namespace loom::exec
