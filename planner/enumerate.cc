#include "planner/enumerate.h"

#include <algorithm>

#include <fmt/format.h>

namespace loom {

namespace {

std::vector<int> divisors(long long n) {
  std::vector<int> d;
  for (long long i = 1; i * i <= n; ++i) {
    if (n % i == 0) {
      d.push_back(static_cast<int>(i));
      if (i != n / i) d.push_back(static_cast<int>(n / i));
    }
  }
  std::sort(d.begin(), d.end());
  return d;
}

template <typename T>
bool allowed(const std::vector<T>& list, T value) {
  return list.empty() || std::find(list.begin(), list.end(), value) != list.end();
}

class Enumerator {
 public:
  Enumerator(const ModelSpec& m, const TrainingSpec& t, const ClusterSpec& c, const SearchSpace& s)
      : model_(m), training_(t), cluster_(c), space_(s) {}

  Enumeration run();

 private:
  void reject(const ParallelConfig& c, std::string rule, std::string reason) {
    out_.rejected.push_back({c, std::move(reason), std::move(rule)});
  }
  bool tp_legal(ParallelConfig& c);
  void for_layout(ParallelConfig c);
  void for_micro_batch(ParallelConfig c, long long micro_batches);
  std::vector<int> micro_batch_candidates(long long per_replica) const;
  std::vector<std::pair<Schedule, int>> schedule_candidates(const ParallelConfig& c, long long micro_batches);

  const ModelSpec& model_;
  const TrainingSpec& training_;
  const ClusterSpec& cluster_;
  const SearchSpace& space_;
  Enumeration out_;
};

bool Enumerator::tp_legal(ParallelConfig& c) {
  if (model_.heads % c.tp != 0) {
    reject(c, "heads not divisible by tp", fmt::format("heads {} not divisible by tp {}", model_.heads, c.tp));
    return false;
  }
  if (model_.kv_heads % c.tp != 0) {
    reject(c, "kv heads not divisible by tp",
           fmt::format("kv_heads {} not divisible by tp {} (query groups must split evenly)", model_.kv_heads, c.tp));
    return false;
  }
  if (model_.ffn_hidden % c.tp != 0) {
    reject(c, "ffn not divisible by tp", fmt::format("ffn_hidden {} not divisible by tp {}", model_.ffn_hidden, c.tp));
    return false;
  }
  if (!training_.allow_cross_node_tp && c.tp > cluster_.gpus_per_node) {
    reject(c, "tp spans nodes",
           fmt::format("tp {} spans nodes of {} GPUs (pass --allow-cross-node-tp to allow)", c.tp, cluster_.gpus_per_node));
    return false;
  }
  return true;
}

std::vector<int> Enumerator::micro_batch_candidates(long long per_replica) const {
  if (!space_.micro_batch.empty()) return space_.micro_batch;
  // Powers of two up to 16 that the per-replica batch can hold: what Megatron users sweep.
  std::vector<int> out;
  for (int mb = 1; mb <= 16 && mb <= per_replica; mb *= 2) out.push_back(mb);
  return out;
}

std::vector<std::pair<Schedule, int>> Enumerator::schedule_candidates(const ParallelConfig& c, long long m) {
  std::vector<std::pair<Schedule, int>> out;
  const std::vector<Schedule> all = {Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZeroBubble, Schedule::kGPipe};
  const std::vector<Schedule>& schedules = space_.schedule.empty() ? all : space_.schedule;
  if (c.pp == 1) {
    // One stage: every schedule runs the same passes in the same order; keep one.
    const bool vpp_ok = allowed(space_.vpp, 1);
    if (vpp_ok) out.push_back({allowed(space_.schedule, Schedule::k1F1B) ? Schedule::k1F1B : schedules.front(), 1});
    return out;
  }
  const int layers_per_stage = model_.layers / c.pp;
  for (Schedule s : schedules) {
    if (s != Schedule::kInterleaved) {
      if (allowed(space_.vpp, 1)) out.push_back({s, 1});
      continue;
    }
    std::vector<int> vpps = space_.vpp;
    if (vpps.empty())
      for (int v = 2; v <= std::min(8, layers_per_stage); ++v) vpps.push_back(v);
    for (int v : vpps) {
      ParallelConfig r = c;
      r.schedule = s;
      r.vpp = v;
      if (v < 2) {
        reject(r, "interleaving needs vpp >= 2", "the interleaved schedule needs vpp >= 2");
      } else if (layers_per_stage % v != 0) {
        reject(r, "layers not divisible by pp·vpp",
               fmt::format("layers {} not divisible by pp {} × vpp {}", model_.layers, c.pp, v));
      } else if (m % c.pp != 0) {
        reject(r, "interleaving needs micro-batches divisible by pp",
               fmt::format("interleaved schedule needs micro-batches ({}) divisible by pp ({})", m, c.pp));
      } else {
        out.push_back({s, v});
      }
    }
  }
  return out;
}

void Enumerator::for_micro_batch(ParallelConfig c, long long m) {
  const auto schedules = schedule_candidates(c, m);
  std::vector<int> zeros = space_.zero.empty() ? std::vector<int>{0, 1, 2, 3} : space_.zero;
  for (int zero : zeros) {
    c.zero = zero;
    if (c.dp == 1 && zero > 0) {
      if (space_.zero.empty() || allowed(space_.zero, 0)) continue;  // identical to ZeRO-0
    }
    if (zero >= 2 && c.pp > 1) {
      reject(c, "ZeRO-2/3 with pipeline parallelism",
             fmt::format("ZeRO-{} with pp {}: gradient sharding re-reduces every micro-batch (DeepSpeed forbids it)",
                         zero, c.pp));
      continue;
    }
    const std::vector<Recompute> recomputes =
        space_.recompute.empty() ? std::vector<Recompute>{Recompute::kNone, Recompute::kSelective, Recompute::kFull}
                                 : space_.recompute;
    const std::vector<bool> sps = space_.sequence_parallel.empty() ? std::vector<bool>{false, true} : space_.sequence_parallel;
    for (Recompute rc : recomputes) {
      c.recompute = rc;
      // FlashAttention already recomputes the attention core in its backward: selective
      // recompute changes neither time nor memory, so it is the same configuration as none.
      if (rc == Recompute::kSelective && training_.attention == AttentionKernel::kFlash && space_.recompute.empty())
        continue;
      for (bool sp : sps) {
        c.sequence_parallel = sp;
        if (sp && c.tp == 1) {
          if (space_.sequence_parallel.empty() || allowed(space_.sequence_parallel, false)) continue;
          reject(c, "sequence parallelism needs tp > 1", "sequence parallelism needs tp > 1");
          continue;
        }
        for (const auto& [schedule, vpp] : schedules) {
          c.schedule = schedule;
          c.vpp = vpp;
          out_.legal.push_back(c);
        }
      }
    }
  }
}

void Enumerator::for_layout(ParallelConfig c) {
  if (!tp_legal(c)) return;
  if (model_.layers % c.pp != 0) {
    reject(c, "layers not divisible by pp", fmt::format("layers {} not divisible by pp {}", model_.layers, c.pp));
    return;
  }
  if (training_.global_batch % c.dp != 0) {
    reject(c, "global batch not divisible by dp",
           fmt::format("global batch {} not divisible by dp {}", training_.global_batch, c.dp));
    return;
  }
  const long long per_replica = training_.global_batch / c.dp;
  for (int mb : micro_batch_candidates(per_replica)) {
    c.micro_batch = mb;
    if (per_replica % mb != 0) {
      reject(c, "global batch not divisible by dp·micro-batch",
             fmt::format("global batch {} not divisible by dp {} × micro-batch {}", training_.global_batch, c.dp, mb));
      continue;
    }
    for_micro_batch(c, per_replica / mb);
  }
}

Enumeration Enumerator::run() {
  for (int tp : divisors(training_.gpus)) {
    if (!allowed(space_.tp, tp)) continue;
    for (int pp : divisors(training_.gpus / tp)) {
      if (!allowed(space_.pp, pp)) continue;
      ParallelConfig c;
      c.tp = tp;
      c.pp = pp;
      c.dp = training_.gpus / (tp * pp);
      if (!allowed(space_.dp, c.dp)) continue;
      for_layout(c);
    }
  }
  return std::move(out_);
}

}  // namespace

Result<Enumeration> enumerate_configs(const ModelSpec& model, const TrainingSpec& training, const ClusterSpec& cluster,
                                      const SearchSpace& space) {
  Enumeration e = Enumerator(model, training, cluster, space).run();
  if (e.legal.empty()) {
    std::string why = "no reason recorded: the --tp/--pp/--dp restrictions leave no tp·pp·dp = GPUs";
    if (!e.rejected.empty()) why = e.rejected.front().reason;
    return make_error(fmt::format("no parallel layout of {} GPUs can run {}: {}{}", training.gpus, model.name, why,
                                  e.rejected.size() > 1 ? fmt::format(" (and {} more)", e.rejected.size() - 1) : ""));
  }
  return e;
}

}  // namespace loom

namespace loom {

Status validate_config(const ModelSpec& model, const TrainingSpec& training, const ClusterSpec& cluster,
                       const ParallelConfig& config) {
  if (config.world_size() != training.gpus)
    return make_error(fmt::format("tp {} × pp {} × dp {} = {} but --gpus is {}", config.tp, config.pp, config.dp,
                                  config.world_size(), training.gpus));
  SearchSpace space;
  space.tp = {config.tp};
  space.pp = {config.pp};
  space.dp = {config.dp};
  space.zero = {config.zero};
  space.micro_batch = {config.micro_batch};
  space.vpp = {config.vpp};
  space.recompute = {config.recompute};
  space.sequence_parallel = {config.sequence_parallel};
  space.schedule = {config.schedule};
  auto e = enumerate_configs(model, training, cluster, space);
  if (!e) {
    if (!e.error().message.empty()) {
      // enumerate_configs names the first rule broken; restate it for one configuration.
      const auto pos = e.error().message.find(": ");
      return make_error(pos == std::string::npos ? e.error().message : e.error().message.substr(pos + 2));
    }
    return e.error();
  }
  for (const auto& c : e->legal)
    if (c == config) return {};
  if (!e->rejected.empty()) return make_error(e->rejected.front().reason);
  if (config.pp == 1 && config.vpp > 1) return make_error("vpp > 1 needs pp > 1");
  if (config.vpp > 1 && config.schedule != Schedule::kInterleaved)
    return make_error(fmt::format("vpp {} needs --schedule interleaved", config.vpp));
  return make_error(fmt::format("configuration {} is not legal for {}", describe(config), model.name));
}

}  // namespace loom
