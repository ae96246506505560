// Megatron-LM's layer split (megatron/core/transformer/transformer_block.py get_num_layers_to_build,
// transformer_config.py's checks of the same settings) and the rules a split must obey.
#include "core/pipeline_split.h"

#include <algorithm>

#include <fmt/format.h>

namespace loom {

namespace {

RuleViolation broken(std::string_view rule, std::string message) { return {std::string(rule), std::move(message)}; }

int middle_stages(const ParallelConfig& c) {
  return c.pp - (c.split.first_stage_layers > 0 ? 1 : 0) - (c.split.last_stage_layers > 0 ? 1 : 0);
}

int accounted_total(int layers, const PipelineSplit& s) {
  return layers + (s.account_for_embedding ? 1 : 0) + (s.account_for_loss ? 1 : 0);
}

// Layers the middle stages share once the pinned ends are taken; `parts` = middle stages × vpp.
RuleStatus check_middle(const ModelSpec& m, const ParallelConfig& c, int vpp) {
  const PipelineSplit& s = c.split;
  const int mid = middle_stages(c), rest = m.layers - s.first_stage_layers - s.last_stage_layers;
  const int parts = mid * vpp;
  const bool ok = mid == 0 ? rest == 0 : rest >= parts && rest % parts == 0;
  if (ok) return {};
  const std::string over =
      vpp > 1 ? fmt::format("{} middle stages × vpp {}", mid, vpp) : fmt::format("{} middle stages", mid);
  return broken(rule::kPinnedLayers,
                fmt::format("layers {} − first stage {} − last stage {} = {} do not split evenly over the {}", m.layers,
                            s.first_stage_layers, s.last_stage_layers, rest, over));
}

// Embedding and loss as layers: every chunk gets total/(pp·vpp), the first one fewer for the
// embedding and the last one fewer for the loss; none may be left empty.
RuleStatus check_accounted(const ModelSpec& m, const ParallelConfig& c, int vpp) {
  const PipelineSplit& s = c.split;
  const int total = accounted_total(m.layers, s), parts = c.pp * vpp;
  if (total % parts != 0)
    return broken(rule::kAccountedLayers,
                  fmt::format("layers {}{}{} = {} not divisible by pp {}{}", m.layers,
                              s.account_for_embedding ? " + embedding" : "", s.account_for_loss ? " + loss" : "", total,
                              c.pp, vpp > 1 ? fmt::format(" × vpp {}", vpp) : ""));
  const int per = total / parts;
  const int first = per - (s.account_for_embedding ? 1 : 0) - (parts == 1 && s.account_for_loss ? 1 : 0);
  const int last = per - (s.account_for_loss ? 1 : 0);
  if (first < 1 || last < 1)
    return broken(rule::kEmptyChunk, fmt::format("counting the embedding/loss as a layer leaves the {} model chunk "
                                                 "without a layer ({} per chunk)",
                                                 first < 1 ? "first" : "last", per));
  return {};
}

// Every stage's layers listed: one count per pipeline rank, at least one layer each, the model's
// layers in all.
RuleStatus check_listed(const ModelSpec& m, const ParallelConfig& c) {
  const std::vector<int>& list = c.split.stage_layers;
  if (static_cast<int>(list.size()) != c.pp)
    return broken(rule::kListedStages, fmt::format("stage layers {} name {} stages but pp is {}",
                                                   stage_layers_label(list), list.size(), c.pp));
  long long total = 0;
  for (int n : list) {
    if (n < 1)
      return broken(rule::kEmptyChunk,
                    fmt::format("stage layers {} leave a stage without a layer", stage_layers_label(list)));
    total += n;
  }
  if (total != m.layers)
    return broken(rule::kListedLayers, fmt::format("stage layers {} add up to {} but {} has {} layers",
                                                   stage_layers_label(list), total, m.name, m.layers));
  return {};
}

RuleStatus check_exclusive(const ParallelConfig& c) {
  if (c.split.listed() && (c.split.pinned() || c.split.accounted()))
    return broken(rule::kListedExclusive,
                  "stage layers listed cannot be combined with first/last stage layers or counting the embedding or "
                  "loss as a layer");
  if (c.split.pinned() && c.split.accounted())
    return broken(rule::kSplitExclusive,
                  "first/last stage layers cannot be combined with counting the embedding or loss as a layer");
  if (c.split.pinned() && c.pp < 2)
    return broken(rule::kPinnedNeedsPp, "first/last stage layers need pp of at least 2");
  return {};
}

}  // namespace

RuleStatus check_split_stages(const ModelSpec& m, const ParallelConfig& c, StageSplit mode) {
  if (c.split.even()) {
    if (mode == StageSplit::kEven && m.layers % c.pp != 0)
      return broken(rule::kLayersPp, fmt::format("layers {} not divisible by pp {}", m.layers, c.pp));
    if (mode == StageSplit::kUneven && c.pp > m.layers)
      return broken(rule::kStagesExceedLayers,
                    fmt::format("pp {} is more pipeline stages than the {} layers of {}", c.pp, m.layers, m.name));
    return {};
  }
  if (auto s = check_exclusive(c); !s) return s;
  if (c.split.listed()) return check_listed(m, c);
  return c.split.pinned() ? check_middle(m, c, 1) : check_accounted(m, c, 1);
}

RuleStatus check_split_chunks(const ModelSpec& m, const ParallelConfig& c, StageSplit mode) {
  if (c.split.even()) {
    if (mode == StageSplit::kEven && m.layers % (c.pp * c.vpp) != 0)
      return broken(rule::kLayersPpVpp,
                    fmt::format("layers {} not divisible by pp {} × vpp {}", m.layers, c.pp, c.vpp));
    if (mode == StageSplit::kUneven && c.pp * c.vpp > m.layers)
      return broken(
          rule::kChunksExceedLayers,
          fmt::format("pp {} × vpp {} is more model chunks than the {} layers of {}", c.pp, c.vpp, m.layers, m.name));
    return {};
  }
  if (auto s = check_exclusive(c); !s) return s;
  if (c.split.accounted()) return check_accounted(m, c, c.vpp);
  if (c.split.listed()) {
    if (auto s = check_listed(m, c); !s) return s;
    // Each stage's layers split evenly over its model chunks, as a pinned stage's do.
    for (std::size_t stage = 0; stage < c.split.stage_layers.size(); ++stage)
      if (c.split.stage_layers[stage] % c.vpp != 0)
        return broken(rule::kPinnedVpp, fmt::format("stage {}'s {} layers not divisible by vpp {}", stage,
                                                    c.split.stage_layers[stage], c.vpp));
    return {};
  }
  // Megatron-LM splits a pinned stage's layers evenly over its model chunks.
  for (int pinned : {c.split.first_stage_layers, c.split.last_stage_layers})
    if (pinned % c.vpp != 0)
      return broken(rule::kPinnedVpp, fmt::format("a pinned stage's {} layers not divisible by vpp {}", pinned, c.vpp));
  return check_middle(m, c, c.vpp);
}

int virtual_stage_layer_count(int layers, const ParallelConfig& c, int v) {
  const int n = c.pp * c.vpp, rank = v % c.pp;
  const PipelineSplit& s = c.split;
  if (s.accounted()) {
    int count = accounted_total(layers, s) / n;
    if (s.account_for_embedding && v == 0) count -= 1;
    if (s.account_for_loss && v == n - 1) count -= 1;
    return count;
  }
  if (s.listed()) return s.stage_layers[static_cast<std::size_t>(rank)] / c.vpp;
  if (s.pinned()) {
    if (rank == 0 && s.first_stage_layers > 0) return s.first_stage_layers / c.vpp;
    if (rank == c.pp - 1 && s.last_stage_layers > 0) return s.last_stage_layers / c.vpp;
    const int mid = middle_stages(c), rest = layers - s.first_stage_layers - s.last_stage_layers;
    return mid > 0 ? rest / (mid * c.vpp) : 0;
  }
  return layers / n + (v < layers % n ? 1 : 0);
}

std::vector<int> virtual_stage_layers(int layers, const ParallelConfig& c) {
  std::vector<int> out(static_cast<std::size_t>(c.pp * c.vpp));
  for (int v = 0; v < c.pp * c.vpp; ++v) out[v] = virtual_stage_layer_count(layers, c, v);
  return out;
}

int chunk_layers(int layers, const ParallelConfig& c, int stage, int chunk) {
  return virtual_stage_layer_count(layers, c, chunk * c.pp + stage);
}

int stage_layer_count(int layers, const ParallelConfig& c, int stage) {
  int count = 0;
  for (int chunk = 0; chunk < c.vpp; ++chunk) count += chunk_layers(layers, c, stage, chunk);
  return count;
}

std::vector<int> stage_layer_counts(int layers, const ParallelConfig& c) {
  std::vector<int> out(c.pp);
  for (int stage = 0; stage < c.pp; ++stage) out[stage] = stage_layer_count(layers, c, stage);
  return out;
}

int max_stage_layers(int layers, const ParallelConfig& c) {
  int most = 0;
  for (int stage = 0; stage < c.pp; ++stage) most = std::max(most, stage_layer_count(layers, c, stage));
  return most;
}

int first_layer_of(int layers, const ParallelConfig& c, int v) {
  int first = 0;
  for (int i = 0; i < v; ++i) first += virtual_stage_layer_count(layers, c, i);
  return first;
}

std::string stage_layers_label(const std::vector<int>& counts) {
  std::string out;
  for (std::size_t i = 0; i < counts.size();) {
    std::size_t j = i;
    while (j < counts.size() && counts[j] == counts[i]) ++j;
    out +=
        (out.empty() ? "" : "/") + (j - i > 1 ? fmt::format("{}x{}", counts[i], j - i) : fmt::format("{}", counts[i]));
    i = j;
  }
  return out;
}

std::string describe(const PipelineSplit& s) {
  if (s.listed()) return "stages" + stage_layers_label(s.stage_layers);
  if (s.accounted())
    return s.account_for_embedding && s.account_for_loss ? "embedding+loss"
           : s.account_for_embedding                     ? "embedding"
                                                         : "loss";
  if (!s.pinned()) return "even";
  std::string out;
  if (s.first_stage_layers > 0) out = fmt::format("first{}", s.first_stage_layers);
  if (s.last_stage_layers > 0) out += fmt::format("{}last{}", out.empty() ? "" : ",", s.last_stage_layers);
  return out;
}

std::vector<PipelineSplit> candidate_splits(int layers, int pp) {
  std::vector<PipelineSplit> out = {PipelineSplit{}};
  if (pp < 2) return out;
  out.push_back({.account_for_embedding = true});
  out.push_back({.account_for_loss = true});
  out.push_back({.account_for_embedding = true, .account_for_loss = true});
  // k layers on every middle stage, the fewest that leave the pinned ends lighter than k (and one
  // more): ends lighter by about what the embedding or the LM head costs.
  const int smallest = (layers + pp - 1) / pp;
  for (int k = smallest; k <= smallest + 1; ++k) {
    const int one_end = layers - (pp - 1) * k;
    if (one_end >= 1 && one_end < k) {
      out.push_back({.first_stage_layers = one_end});
      out.push_back({.last_stage_layers = one_end});
    }
    const int both = layers - (pp - 2) * k;
    if (pp > 2 && both >= 2 && both % 2 == 0 && both / 2 < k)
      out.push_back({.first_stage_layers = both / 2, .last_stage_layers = both / 2});
  }
  return out;
}

}  // namespace loom
