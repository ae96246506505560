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
  // Records the configuration as rejected unless it obeys the rule.
  bool passes(const ParallelConfig& c, const RuleStatus& status) {
    if (status) return true;
    out_.rejected.push_back({c, status.violation().message, status.violation().rule});
    return false;
  }
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

std::vector<int> Enumerator::micro_batch_candidates(long long per_replica) const {
  if (!space_.micro_batch.empty()) return space_.micro_batch;
  // Powers of two up to 16 that the per-replica batch can hold: what Megatron users sweep.
  std::vector<int> out;
  for (int mb = 1; mb <= 16 && mb <= per_replica; mb *= 2) out.push_back(mb);
  return out;
}

std::vector<std::pair<Schedule, int>> Enumerator::schedule_candidates(const ParallelConfig& c, long long m) {
  std::vector<std::pair<Schedule, int>> out;
  auto consider = [&](Schedule s, int v) {
    ParallelConfig r = c;
    r.schedule = s;
    r.vpp = v;
    if (passes(r, check_sizes(r)) && passes(r, check_schedule(model_, r, m))) out.push_back({s, v});
  };
  const std::vector<Schedule> all = {Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZeroBubble, Schedule::kGPipe};
  const std::vector<Schedule>& schedules = space_.schedule.empty() ? all : space_.schedule;
  if (c.pp == 1) {
    // One stage: every schedule runs the same passes in the same order; keep one.
    consider(allowed(space_.schedule, Schedule::k1F1B) ? Schedule::k1F1B : schedules.front(),
             allowed(space_.vpp, 1) ? 1 : space_.vpp.front());
    return out;
  }
  for (Schedule s : schedules) {
    std::vector<int> vpps = space_.vpp;
    if (vpps.empty() && s != Schedule::kInterleaved) vpps = {1};
    // Interleaving by default from 2 chunks: at vpp 1 it keeps more micro-batches in flight than
    // 1F1B for the same bubble.
    if (vpps.empty())
      for (int v = 2; v <= std::min(8, model_.layers / c.pp); ++v) vpps.push_back(v);
    for (int v : vpps) consider(s, v);
  }
  return out;
}

void Enumerator::for_micro_batch(ParallelConfig c, long long m) {
  const auto schedules = schedule_candidates(c, m);
  if (schedules.empty()) return;
  std::vector<int> zeros = space_.zero.empty() ? std::vector<int>{0, 1, 2, 3} : space_.zero;
  for (int zero : zeros) {
    c.zero = zero;
    if (!passes(c, check_zero(c))) continue;
    if (c.dp == 1 && zero > 0) {
      if (space_.zero.empty() || allowed(space_.zero, 0)) continue;  // identical to ZeRO-0
    }
    const std::vector<Recompute> recomputes =
        space_.recompute.empty() ? std::vector<Recompute>{Recompute::kNone, Recompute::kSelective, Recompute::kFull}
                                 : space_.recompute;
    const std::vector<bool> sps =
        space_.sequence_parallel.empty() ? std::vector<bool>{false, true} : space_.sequence_parallel;
    for (Recompute rc : recomputes) {
      c.recompute = rc;
      // FlashAttention already recomputes the attention core in its backward: selective
      // recompute changes neither time nor memory, so it is the same configuration as none.
      if (rc == Recompute::kSelective && training_.attention == AttentionKernel::kFlash && space_.recompute.empty())
        continue;
      for (bool sp : sps) {
        c.sequence_parallel = sp;
        // At tp 1 there is nothing to split: the same configuration as without.
        if (sp && c.tp == 1 && (space_.sequence_parallel.empty() || allowed(space_.sequence_parallel, false))) continue;
        if (!passes(c, check_sequence_parallel(model_, training_, c))) continue;
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
  if (!passes(c, check_tp(model_, c.tp)) || !passes(c, check_tp_placement(cluster_, training_, c.tp)) ||
      !passes(c, check_layout(model_, training_, c)))
    return;
  for (int mb : micro_batch_candidates(training_.global_batch / c.dp)) {
    c.micro_batch = mb;
    if (!passes(c, check_sizes(c)) || !passes(c, check_micro_batch(training_, c))) continue;
    for_micro_batch(c, c.micro_batches(training_.global_batch));
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
