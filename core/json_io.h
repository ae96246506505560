// JSON read/write for every core type. Readers validate and return one clear error line
// naming the file and field ("model JSON: 'layers' must be a positive integer").
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

#include "core/cluster_spec.h"
#include "core/parallel_config.h"
#include "core/plan.h"
#include "core/result.h"

namespace loom {

using Json = nlohmann::ordered_json;

// Format tags written into files: plans carry {"format": kPlanFormat}, cost files {"schema": kCostFormat}.
inline constexpr const char* kPlanFormat = "loom-plan/1";
inline constexpr const char* kCostFormat = "loom-cost/1";

// A tag under `key` other than `expected` is bad input; a missing one is accepted (hand-written files).
Status check_format_tag(const Json& json, const char* key, const char* expected, const std::string& what);

Json to_json(const ModelSpec& model);
Json to_json(const ParallelConfig& config);
Json to_json(const TrainingSpec& training);
Json to_json(const MemoryBreakdownGiB& memory);
Json to_json(const PlanMetrics& metrics);
Json to_json(const Plan& plan);
Json to_json(const ClusterSpec& cluster);

Result<ModelSpec> model_from_json(const Json& json);
Result<ParallelConfig> config_from_json(const Json& json);
Result<TrainingSpec> training_from_json(const Json& json);
Result<PlanMetrics> metrics_from_json(const Json& json);
Result<Plan> plan_from_json(const Json& json);
Result<ClusterSpec> cluster_from_json(const Json& json);

// Parse text as JSON; `what` names the source in the error ("plan.json").
Result<Json> parse_json(const std::string& text, const std::string& what);
// Loom's inputs (model, cluster, plan, trace and validation files) are far smaller than this: a
// larger one, or a stream that never ends (`--model /dev/zero`), is refused by name, not read on.
inline constexpr std::size_t kMaxInputFileBytes = std::size_t{256} << 20;
Result<Json> read_json_file(const std::string& path);
// The whole file, refused by name when it holds more than max_bytes.
Result<std::string> read_text_file(const std::string& path, std::size_t max_bytes = kMaxInputFileBytes);
// Writes to a temporary file beside `path` and renames it into place: never a half-written file.
Status write_text_file_atomic(const std::string& path, const std::string& text);

}  // namespace loom
