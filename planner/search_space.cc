#include "planner/search_space.h"

#include <charconv>

#include <fmt/format.h>

namespace loom {

namespace {

// Each item parser returns the value or the error naming `flag`.
Result<int> parse_int(const std::string& item, const char* flag) {
  int value = 0;
  auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
  if (ec != std::errc() || ptr != item.data() + item.size())
    return make_error(fmt::format("{}: '{}' is not an integer", flag, item));
  if (value < 0) return make_error(fmt::format("{}: {} must not be negative", flag, value));
  return value;
}

Result<int> parse_positive(const std::string& item, const char* flag) {
  auto value = parse_int(item, flag);
  if (!value) return value;
  if (*value < 1) return make_error(fmt::format("{}: {} must be at least 1", flag, *value));
  if (*value > (1 << 24)) return make_error(fmt::format("{}: {} is absurdly large", flag, *value));
  return value;
}

Result<int> parse_zero(const std::string& item, const char* flag) {
  auto value = parse_int(item, flag);
  if (value && *value > 3)
    return make_error(fmt::format("{}: ZeRO stage {} does not exist (0, 1, 2 or 3)", flag, *value));
  return value;
}

// Expert TP: "tp" (the experts split like the MLP, the default; kept as 0) or a size.
Result<int> parse_etp_item(const std::string& item, const char* flag) {
  if (item == "tp") return 0;
  auto value = parse_positive(item, flag);
  if (!value && item.find_first_not_of("0123456789") != std::string::npos)
    return make_error(fmt::format("{}: '{}' is neither tp nor a size", flag, item));
  return value;
}

Result<Recompute> parse_recompute_item(const std::string& item, const char* flag) {
  if (auto r = parse_recompute(item)) return *r;
  return make_error(fmt::format("{}: unknown value '{}' ({})", flag, item, recompute_names()));
}

Result<bool> parse_sp_item(const std::string& item, const char* flag) {
  if (item == "on" || item == "true" || item == "1") return true;
  if (item == "off" || item == "false" || item == "0") return false;
  return make_error(fmt::format("{}: unknown value '{}' (on, off)", flag, item));
}

Result<CpComm> parse_cp_comm_item(const std::string& item, const char* flag) {
  if (auto c = parse_cp_comm(item)) return *c;
  return make_error(fmt::format("{}: unknown value '{}' ({})", flag, item, cp_comm_names()));
}

Result<Schedule> parse_schedule_item(const std::string& item, const char* flag) {
  if (auto s = parse_schedule(item)) return *s;
  return make_error(fmt::format("{}: unknown schedule '{}' ({})", flag, item, schedule_names()));
}

// "4,8" into its items, each parsed; an empty text is an empty list (no restriction).
template <typename T>
Status split_list(const std::string& text, const char* flag, Result<T> (*parse_one)(const std::string&, const char*),
                  std::vector<T>& values) {
  if (text.empty()) return {};
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) return make_error(fmt::format("{}: empty value in list '{}'", flag, text));
    auto value = parse_one(item, flag);
    if (!value) return value.error();
    values.push_back(*value);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return {};
}

template <typename T>
Status single_value(const std::vector<T>& values, const char* flag, T fallback, T& out) {
  if (values.size() > 1) return make_error(fmt::format("{} takes one value here, not a list", flag));
  out = values.empty() ? fallback : values.front();
  return {};
}

// The split flags into one PipelineSplit, or none when no split flag is given.
Status parse_split(const ConfigText& c, std::optional<PipelineSplit>& out) {
  std::vector<int> first, last, listed;
  std::vector<bool> embedding, loss;
  for (Status status : {split_list<int>(c.stage_layers, "--stage-layers", parse_positive, listed),
                        split_list<int>(c.first_stage_layers, "--first-stage-layers", parse_positive, first),
                        split_list<int>(c.last_stage_layers, "--last-stage-layers", parse_positive, last),
                        split_list<bool>(c.account_for_embedding, "--account-for-embedding", parse_sp_item, embedding),
                        split_list<bool>(c.account_for_loss, "--account-for-loss", parse_sp_item, loss)})
    if (!status) return status;
  if (first.empty() && last.empty() && embedding.empty() && loss.empty() && listed.empty()) return {};
  PipelineSplit s;
  if (!listed.empty()) {
    if (!first.empty() || !last.empty() || !embedding.empty() || !loss.empty())
      return make_error(
          "--stage-layers lists every stage: it cannot be combined with --first/--last-stage-layers or "
          "--account-for-embedding/--account-for-loss");
    s.stage_layers = listed;
    out = s;
    return {};
  }
  for (Status status : {single_value(first, "--first-stage-layers", 0, s.first_stage_layers),
                        single_value(last, "--last-stage-layers", 0, s.last_stage_layers),
                        single_value(embedding, "--account-for-embedding", false, s.account_for_embedding),
                        single_value(loss, "--account-for-loss", false, s.account_for_loss)})
    if (!status) return status;
  if (s.pinned() && s.accounted())
    return make_error(
        "--first/--last-stage-layers cannot be combined with --account-for-embedding/--account-for-loss (Megatron-LM "
        "refuses the same)");
  out = s;
  return {};
}

}  // namespace

Result<SearchSpace> parse_search_space(const ConfigText& c) {
  SearchSpace s;
  for (Status status :
       {split_list<int>(c.tp, "--tp", parse_positive, s.tp), split_list<int>(c.pp, "--pp", parse_positive, s.pp),
        split_list<int>(c.dp, "--dp", parse_positive, s.dp), split_list<int>(c.zero, "--zero", parse_zero, s.zero),
        split_list<int>(c.micro_batch, "--micro-batch", parse_positive, s.micro_batch),
        split_list<int>(c.vpp, "--vpp", parse_positive, s.vpp),
        split_list<Recompute>(c.recompute, "--recompute", parse_recompute_item, s.recompute),
        split_list<bool>(c.sp, "--sp", parse_sp_item, s.sequence_parallel),
        split_list<Schedule>(c.schedule, "--schedule", parse_schedule_item, s.schedule),
        split_list<int>(c.shard_group, "--shard-group", parse_int, s.shard_group),
        split_list<int>(c.cp, "--cp", parse_positive, s.cp), split_list<int>(c.ep, "--ep", parse_positive, s.ep),
        split_list<int>(c.etp, "--etp", parse_etp_item, s.etp),
        split_list<CpComm>(c.cp_comm, "--cp-comm", parse_cp_comm_item, s.cp_comm), parse_split(c, s.split)})
    if (!status) return status.error();
  // A listed split names the pipeline depth: pp is its length unless --pp says otherwise (then the
  // rules refuse the mismatch, naming both).
  if (s.split && s.split->listed() && s.pp.empty()) s.pp = {static_cast<int>(s.split->stage_layers.size())};
  return s;
}

Result<ParallelConfig> parse_parallel_config(const ConfigText& text, int gpus) {
  auto space = parse_search_space(text);
  if (!space) return space.error();
  const SearchSpace& l = *space;
  ParallelConfig c;
  for (Status s : {single_value(l.tp, "--tp", 1, c.tp), single_value(l.pp, "--pp", 1, c.pp),
                   single_value(l.cp, "--cp", 1, c.cp), single_value(l.cp_comm, "--cp-comm", CpComm::kP2P, c.cp_comm)})
    if (!s) return s.error();
  // How CP ranks exchange keys and values means nothing without CP ranks (the search applies a list to its
  // cp > 1 layouts only; one configuration says what it runs).
  if (!l.cp_comm.empty() && c.cp == 1) return make_error("--cp-comm: applies to --cp of 2 or more only (cp is 1)");
  const long long model_parallel = static_cast<long long>(c.tp) * c.cp * c.pp;
  const int dp = model_parallel > 0 && gpus % model_parallel == 0 ? static_cast<int>(gpus / model_parallel) : 0;
  for (Status s :
       {single_value(l.dp, "--dp", dp, c.dp), single_value(l.zero, "--zero", 0, c.zero),
        single_value(l.micro_batch, "--micro-batch", 1, c.micro_batch), single_value(l.vpp, "--vpp", 1, c.vpp),
        single_value(l.recompute, "--recompute", Recompute::kNone, c.recompute),
        single_value(l.sequence_parallel, "--sp", false, c.sequence_parallel)})
    if (!s) return s.error();
  const Schedule schedule = c.vpp > 1 ? Schedule::kInterleaved : Schedule::k1F1B;
  if (Status s = single_value(l.schedule, "--schedule", schedule, c.schedule); !s) return s.error();
  c.split = l.split.value_or(PipelineSplit{});
  if (Status s = single_value(l.shard_group, "--shard-group", 0, c.shard_group); !s) return s.error();
  if (c.shard_group == c.dp) c.shard_group = 0;  // one group of every dp rank: plain ZeRO-3
  if (Status s = single_value(l.ep, "--ep", 1, c.ep); !s) return s.error();
  if (Status s = single_value(l.etp, "--etp", 0, c.etp); !s) return s.error();
  if (c.etp == c.tp) c.etp = 0;  // expert TP = TP, the default
  // Without --dp, a model-parallel product that does not divide the GPUs leaves no dp to name.
  if (l.dp.empty() && dp == 0)
    return make_error(fmt::format("tp {}{} × pp {} = {} ranks per data-parallel replica do not divide --gpus {}", c.tp,
                                  c.cp > 1 ? fmt::format(" × cp {}", c.cp) : "", c.pp, model_parallel, gpus));
  if (static_cast<long long>(c.tp) * c.cp * c.pp * c.dp != gpus)
    return make_error(fmt::format("tp {}{} × pp {} × dp {} = {} but --gpus is {}", c.tp,
                                  c.cp > 1 ? fmt::format(" × cp {}", c.cp) : "", c.pp, c.dp,
                                  static_cast<long long>(c.tp) * c.cp * c.pp * c.dp, gpus));
  return c;
}

}  // namespace loom
