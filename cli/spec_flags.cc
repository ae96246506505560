#include "cli/spec_flags.h"

#include <charconv>

#include <fmt/format.h>

#include "cli/command.h"
#include "core/presets.h"

namespace loom::cli {

namespace {

template <typename T>
std::vector<T> split_list(const std::string& text, const char* flag, T (*parse_one)(const std::string&, const char*)) {
  std::vector<T> values;
  if (text.empty()) return values;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) throw InputError(fmt::format("{}: empty value in list '{}'", flag, text));
    values.push_back(parse_one(item, flag));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return values;
}

int parse_int(const std::string& item, const char* flag) {
  int value = 0;
  auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
  if (ec != std::errc() || ptr != item.data() + item.size())
    throw InputError(fmt::format("{}: '{}' is not an integer", flag, item));
  if (value < 0) throw InputError(fmt::format("{}: {} must not be negative", flag, value));
  return value;
}

int parse_positive(const std::string& item, const char* flag) {
  const int value = parse_int(item, flag);
  if (value < 1) throw InputError(fmt::format("{}: {} must be at least 1", flag, value));
  if (value > (1 << 24)) throw InputError(fmt::format("{}: {} is absurdly large", flag, value));
  return value;
}

int parse_zero(const std::string& item, const char* flag) {
  const int value = parse_int(item, flag);
  if (value > 3) throw InputError(fmt::format("{}: ZeRO stage {} does not exist (0, 1, 2 or 3)", flag, value));
  return value;
}

Recompute parse_recompute_item(const std::string& item, const char* flag) {
  auto r = parse_recompute(item);
  if (!r) throw InputError(fmt::format("{}: unknown value '{}' (none, selective, full)", flag, item));
  return *r;
}

bool parse_sp_item(const std::string& item, const char* flag) {
  if (item == "on" || item == "true" || item == "1") return true;
  if (item == "off" || item == "false" || item == "0") return false;
  throw InputError(fmt::format("{}: unknown value '{}' (on, off)", flag, item));
}

Schedule parse_schedule_item(const std::string& item, const char* flag) {
  auto s = parse_schedule(item);
  if (!s) throw InputError(fmt::format("{}: unknown schedule '{}' (gpipe, 1f1b, interleaved, zb)", flag, item));
  return *s;
}

template <typename T>
T single_value(const std::vector<T>& values, const char* flag, T fallback) {
  if (values.empty()) return fallback;
  if (values.size() > 1) throw InputError(fmt::format("{} takes one value here, not a list", flag));
  return values.front();
}

}  // namespace

void SpecFlags::add_to(CLI::App& app, const std::string& default_model, const std::string& default_cluster,
                       bool required) {
  model = default_model;
  cluster = default_cluster;
  auto* m = app.add_option("--model", model, "model preset, Loom model JSON, or Hugging Face config.json");
  auto* g = app.add_option("--gpus", gpus, "number of GPUs (ranks)");
  auto* b = app.add_option("--global-batch", global_batch, "sequences per optimizer step");
  if (required) {
    m->required();
    g->required();
    b->required();
  }
  app.add_option("--cluster", cluster, "cluster preset or cost file (JSON)")->capture_default_str();
  app.add_option("--seq", seq, "sequence length (default: the model's)");
  app.add_option("--tokens", tokens, "token budget, for days to train");
  app.add_option("--attention", attention, "attention kernel: flash or unfused")->capture_default_str();
  app.add_flag("--allow-cross-node-tp", allow_cross_node_tp, "let tensor parallelism span nodes");
  app.add_option("--grad-bytes", grad_bytes, "bytes per gradient element (2 = bf16, 4 = fp32 main grads)");
  app.add_flag("--sync-pipeline-sends", sync_pipeline_sends,
               "a stage waits for its pipeline send before its next pass (Megatron-LM's batch_p2p_sync)");
}

Specs SpecFlags::resolve() const {
  Specs specs;
  auto loaded_model = load_model(model);
  if (!loaded_model) throw InputError(loaded_model.error().message);
  specs.model = std::move(*loaded_model);
  auto loaded_cluster = load_cluster(cluster);
  if (!loaded_cluster) throw InputError(loaded_cluster.error().message);
  specs.cluster = std::move(*loaded_cluster);
  specs.cluster_name = cluster;

  if (gpus < 1) throw InputError(fmt::format("--gpus: {} must be at least 1", gpus));
  if (gpus > (1LL << 20)) throw InputError(fmt::format("--gpus: {} is more GPUs than any cluster has", gpus));
  if (global_batch < 1) throw InputError(fmt::format("--global-batch: {} must be at least 1", global_batch));
  if (global_batch > (1LL << 30)) throw InputError(fmt::format("--global-batch: {} is absurdly large", global_batch));
  if (seq < 0) throw InputError(fmt::format("--seq: {} must be positive", seq));
  if (seq > (1LL << 24)) throw InputError(fmt::format("--seq: {} is absurdly long", seq));
  if (tokens < 0) throw InputError(fmt::format("--tokens: {} must not be negative", tokens));
  const long long nodes = (gpus + specs.cluster.gpus_per_node - 1) / specs.cluster.gpus_per_node;
  if (specs.cluster.max_nodes > 0 && nodes > specs.cluster.max_nodes)
    throw InputError(fmt::format("--gpus: {} GPUs need {} nodes but cluster '{}' has {}", gpus, nodes,
                                 specs.cluster.name, specs.cluster.max_nodes));

  specs.training.gpus = static_cast<int>(gpus);
  specs.training.global_batch = global_batch;
  specs.training.seq_len = seq > 0 ? static_cast<int>(seq) : specs.model.seq_len;
  specs.training.tokens = tokens;
  specs.training.allow_cross_node_tp = allow_cross_node_tp;
  specs.training.pipeline_sends_block = sync_pipeline_sends;
  if (grad_bytes != 0) {
    if (grad_bytes != 2 && grad_bytes != 4) throw InputError("--grad-bytes: must be 2 or 4");
    specs.training.grad_bytes = grad_bytes;
  }
  if (attention == "flash") specs.training.attention = AttentionKernel::kFlash;
  else if (attention == "unfused") specs.training.attention = AttentionKernel::kUnfused;
  else throw InputError(fmt::format("--attention: unknown kernel '{}' (flash, unfused)", attention));
  return specs;
}

void ConfigFlags::add_to(CLI::App& app, bool as_lists) {
  const char* what = as_lists ? " (one value or a comma list)" : "";
  app.add_option("--tp", tp, fmt::format("tensor-parallel size{}", what));
  app.add_option("--pp", pp, fmt::format("pipeline-parallel size{}", what));
  app.add_option("--dp", dp, fmt::format("data-parallel size{}", what));
  app.add_option("--zero", zero, fmt::format("ZeRO stage 0-3{}", what));
  app.add_option("--micro-batch", micro_batch, fmt::format("sequences per micro-batch{}", what));
  app.add_option("--vpp", vpp, fmt::format("virtual pipeline chunks per stage{}", what));
  app.add_option("--recompute", recompute, fmt::format("none, selective or full{}", what));
  app.add_option("--sp", sp, fmt::format("sequence parallelism on or off{}", what));
  app.add_option("--schedule", schedule, fmt::format("gpipe, 1f1b, interleaved or zb{}", what));
}

SearchSpace to_search_space(const ConfigLists& l) {
  SearchSpace s;
  s.tp = l.tp;
  s.pp = l.pp;
  s.dp = l.dp;
  s.zero = l.zero;
  s.micro_batch = l.micro_batch;
  s.vpp = l.vpp;
  s.recompute = l.recompute;
  s.sequence_parallel = l.sequence_parallel;
  s.schedule = l.schedule;
  return s;
}

ConfigLists ConfigFlags::lists() const {
  ConfigLists l;
  l.tp = split_list<int>(tp, "--tp", parse_positive);
  l.pp = split_list<int>(pp, "--pp", parse_positive);
  l.dp = split_list<int>(dp, "--dp", parse_positive);
  l.zero = split_list<int>(zero, "--zero", parse_zero);
  l.micro_batch = split_list<int>(micro_batch, "--micro-batch", parse_positive);
  l.vpp = split_list<int>(vpp, "--vpp", parse_positive);
  l.recompute = split_list<Recompute>(recompute, "--recompute", parse_recompute_item);
  l.sequence_parallel = split_list<bool>(sp, "--sp", parse_sp_item);
  l.schedule = split_list<Schedule>(schedule, "--schedule", parse_schedule_item);
  return l;
}

ParallelConfig ConfigFlags::single(int gpus) const {
  const ConfigLists l = lists();
  ParallelConfig c;
  c.tp = single_value(l.tp, "--tp", 1);
  c.pp = single_value(l.pp, "--pp", 1);
  const int model_parallel = c.tp * c.pp;
  c.dp = single_value(l.dp, "--dp", model_parallel > 0 && gpus % model_parallel == 0 ? gpus / model_parallel : 0);
  c.zero = single_value(l.zero, "--zero", 0);
  c.micro_batch = single_value(l.micro_batch, "--micro-batch", 1);
  c.vpp = single_value(l.vpp, "--vpp", 1);
  c.recompute = single_value(l.recompute, "--recompute", Recompute::kNone);
  c.sequence_parallel = single_value(l.sequence_parallel, "--sp", false);
  c.schedule = single_value(l.schedule, "--schedule", c.vpp > 1 ? Schedule::kInterleaved : Schedule::k1F1B);
  if (c.world_size() != gpus)
    throw InputError(fmt::format("tp {} × pp {} × dp {} = {} but --gpus is {}", c.tp, c.pp, c.dp,
                                 static_cast<long long>(c.tp) * c.pp * c.dp, gpus));
  return c;
}

}  // namespace loom::cli
