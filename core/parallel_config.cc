#include "core/parallel_config.h"

#include <fmt/format.h>

#include "core/training_spec.h"

namespace loom {

const char* to_string(Recompute recompute) {
  switch (recompute) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "none";
}

const char* to_string(Schedule schedule) {
  switch (schedule) {
    case Schedule::kGPipe: return "gpipe";
    case Schedule::k1F1B: return "1f1b";
    case Schedule::kInterleaved: return "interleaved";
    case Schedule::kZeroBubble: return "zb";
  }
  return "1f1b";
}

const char* to_string(AttentionKernel kernel) { return kernel == AttentionKernel::kFlash ? "flash" : "unfused"; }

std::optional<Recompute> parse_recompute(std::string_view text) {
  if (text == "none" || text == "off") return Recompute::kNone;
  if (text == "selective" || text == "sel") return Recompute::kSelective;
  if (text == "full") return Recompute::kFull;
  return std::nullopt;
}

std::optional<Schedule> parse_schedule(std::string_view text) {
  if (text == "gpipe") return Schedule::kGPipe;
  if (text == "1f1b") return Schedule::k1F1B;
  if (text == "interleaved" || text == "interleaved-1f1b") return Schedule::kInterleaved;
  if (text == "zb" || text == "zb-h1" || text == "zero-bubble") return Schedule::kZeroBubble;
  return std::nullopt;
}

std::string describe(const ParallelConfig& c) {
  return fmt::format("tp{} pp{} dp{} zero{} mb{} vpp{} recompute={} sp={} {}", c.tp, c.pp, c.dp, c.zero,
                     c.micro_batch, c.vpp, to_string(c.recompute), c.sequence_parallel ? "on" : "off",
                     to_string(c.schedule));
}

}  // namespace loom
