#include "core/parallel_config.h"

#include <fmt/format.h>

#include "core/names.h"
#include "core/pipeline_split.h"
#include "core/training_spec.h"

namespace loom {

namespace {

// Canonical names first; the rest are aliases the command line and plan files accept.
constexpr NameEntry<Recompute> kRecomputeNames[] = {{Recompute::kNone, "none"}, {Recompute::kSelective, "selective"},
                                                    {Recompute::kFull, "full"}, {Recompute::kOp, "op"},
                                                    {Recompute::kNone, "off"},  {Recompute::kSelective, "sel"}};
constexpr NameEntry<Schedule> kScheduleNames[] = {{Schedule::kGPipe, "gpipe"},
                                                  {Schedule::k1F1B, "1f1b"},
                                                  {Schedule::kInterleaved, "interleaved"},
                                                  {Schedule::kZeroBubble, "zb"},
                                                  {Schedule::kInterleaved, "interleaved-1f1b"},
                                                  {Schedule::kZeroBubble, "zb-h1"},
                                                  {Schedule::kZeroBubble, "zero-bubble"}};
// Megatron-core's cp_comm_type values first; "ring", "ulysses" and "allgather" as people call them.
constexpr NameEntry<CpComm> kCpCommNames[] = {
    {CpComm::kP2P, "p2p"},  {CpComm::kA2A, "a2a"},     {CpComm::kAllGather, "all_gather"},
    {CpComm::kP2P, "ring"}, {CpComm::kA2A, "ulysses"}, {CpComm::kAllGather, "allgather"}};

}  // namespace

const char* to_string(Recompute recompute) { return name_in<Recompute>(kRecomputeNames, recompute); }
const char* to_string(Schedule schedule) { return name_in<Schedule>(kScheduleNames, schedule); }

std::optional<Recompute> parse_recompute(std::string_view text) { return parse_in<Recompute>(kRecomputeNames, text); }
std::optional<Schedule> parse_schedule(std::string_view text) { return parse_in<Schedule>(kScheduleNames, text); }

const char* to_string(CpComm comm) { return name_in<CpComm>(kCpCommNames, comm); }
std::optional<CpComm> parse_cp_comm(std::string_view text) { return parse_in<CpComm>(kCpCommNames, text); }
std::string cp_comm_names() { return one_of<CpComm>(kCpCommNames); }

std::string recompute_names() { return one_of<Recompute>(kRecomputeNames); }
std::string schedule_names() { return one_of<Schedule>(kScheduleNames); }

std::string describe(const ParallelConfig& c) {
  return fmt::format("tp{}{} pp{} dp{}{}{} zero{}{} mb{} vpp{} recompute={} sp={} {}{}", c.tp,
                     c.cp > 1 ? fmt::format(" cp{} {}", c.cp, to_string(c.cp_comm)) : "", c.pp, c.dp,
                     c.ep > 1 ? fmt::format(" ep{}", c.ep) : "",
                     c.expert_tp() != c.tp ? fmt::format(" etp{}", c.expert_tp()) : "", c.zero,
                     c.shard_group > 0 ? fmt::format(" shard{}", c.shard_group) : "", c.micro_batch, c.vpp,
                     to_string(c.recompute), c.sequence_parallel ? "on" : "off", to_string(c.schedule),
                     c.split.even() ? "" : " split=" + describe(c.split));
}

}  // namespace loom
