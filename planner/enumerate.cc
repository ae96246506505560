#include "planner/enumerate.h"

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/pipeline_split.h"

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
    out_.rejected.push_back({c, status.violation().message, status.violation().rule, training_.framework});
    return false;
  }
  struct Pipeline {
    Schedule schedule;
    int vpp;
    PipelineSplit split;
  };
  void for_layout(ParallelConfig c);
  void for_micro_batch(ParallelConfig c, long long micro_batches);
  std::vector<int> micro_batch_candidates(long long per_replica) const;
  std::vector<PipelineSplit> split_candidates(ParallelConfig c);
  std::vector<Pipeline> schedule_candidates(const ParallelConfig& c, long long micro_batches);
  std::vector<int> shard_group_candidates(const ParallelConfig& c) const;
  std::vector<int> ep_candidates(const ParallelConfig& c) const;
  std::vector<int> etp_candidates(const ParallelConfig& c) const;
  void for_zero(ParallelConfig c, const std::vector<Pipeline>& schedules);

  const ModelSpec& model_;
  const TrainingSpec& training_;
  const ClusterSpec& cluster_;
  const SearchSpace& space_;
  std::vector<PipelineSplit> splits_;  // the current layout's legal splits
  Enumeration out_;
};

std::vector<int> Enumerator::micro_batch_candidates(long long per_replica) const {
  if (!space_.micro_batch.empty()) return space_.micro_batch;
  // Powers of two up to 16 that the per-replica batch can hold: what Megatron users sweep.
  std::vector<int> out;
  for (int mb = 1; mb <= 16 && mb <= per_replica; mb *= 2) out.push_back(mb);
  return out;
}

// Forward FLOPs per token of the pipeline's busiest stage: its layers, and the LM head on the last
// stage (the embedding is a lookup). The same for every vpp: a split's stage totals do not depend on it.
double bottleneck_flops(const ModelSpec& m, const TrainingSpec& t, const ParallelConfig& c) {
  const int seq = t.seq_len > 0 ? t.seq_len : m.seq_len;
  const double layer = m.layer_linear_flops_fwd(1.0) + m.layer_attention_flops_fwd(1.0, seq);
  const double head = m.lm_head_flops_fwd(1.0, padded_vocab(m.vocab, c.tp));
  double most = 0;
  for (int stage = 0; stage < c.pp; ++stage)
    most = std::max(most, stage_layer_count(m.layers, c, stage) * layer + (stage == c.pp - 1 ? head : 0.0));
  return most;
}

// The splits to try on c's pipeline that pass its stage-level rules. Only the even split's (or the
// one the user fixed) rejection is recorded: the other candidates are the planner's own guesses, kept
// only when they lighten the busiest stage below the even split's (every split moves whole layers, so
// one that does not is slower or no faster), at most the three lightest (ties kept together).
std::vector<PipelineSplit> Enumerator::split_candidates(ParallelConfig c) {
  if (space_.split) {
    c.split = *space_.split;
    if (!passes(c, check_layout(model_, training_, c))) return {};
    return {*space_.split};
  }
  const std::vector<PipelineSplit> all = candidate_splits(model_.layers, c.pp);
  std::vector<PipelineSplit> out;
  if (passes(c, check_layout(model_, training_, c))) out.push_back(c.split);
  const double even = out.empty() ? std::numeric_limits<double>::infinity() : bottleneck_flops(model_, training_, c);
  std::vector<std::pair<double, PipelineSplit>> lighter;
  for (std::size_t i = 1; i < all.size(); ++i) {
    c.split = all[i];
    if (!check_layout(model_, training_, c).ok()) continue;
    const double load = bottleneck_flops(model_, training_, c);
    if (load < even) lighter.push_back({load, all[i]});
  }
  std::stable_sort(lighter.begin(), lighter.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [load, split] : lighter)
    if (load <= lighter[std::min<std::size_t>(2, lighter.size() - 1)].first) out.push_back(split);
  return out;
}

std::vector<Enumerator::Pipeline> Enumerator::schedule_candidates(const ParallelConfig& c, long long m) {
  std::vector<Pipeline> out;
  std::vector<std::vector<int>> seen;  // chunk layer counts already offered for this schedule and vpp
  auto consider = [&](Schedule s, int v) {
    seen.clear();
    for (const PipelineSplit& split : splits_) {
      ParallelConfig r = c;
      r.schedule = s;
      r.vpp = v;
      r.split = split;
      const bool record = space_.split || split.even();
      const RuleStatus status = !check_sizes(r) ? check_sizes(r) : check_schedule(model_, r, m);
      if (record ? !passes(r, status) : !status.ok()) continue;
      std::vector<int> layers = virtual_stage_layers(model_.layers, r);
      if (std::find(seen.begin(), seen.end(), layers) != seen.end()) continue;
      seen.push_back(std::move(layers));
      out.push_back({s, v, split});
    }
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
    c.shard_group = 0;
    if (!passes(c, check_zero(c))) continue;
    if (c.grad_ranks() == 1 && zero > 0) {
      if (space_.zero.empty() || allowed(space_.zero, 0)) continue;  // identical to ZeRO-0
    }
    if (zero != 3 || c.dp == 1) {  // HSDP's shard groups are of dp ranks (each with its cp ranks)
      for (int etp : etp_candidates(c)) {
        c.etp = etp;
        for (int ep : ep_candidates(c)) {
          c.ep = ep;
          if (passes(c, check_ep(model_, c))) for_zero(c, schedules);
        }
      }
      c.ep = 1;
      c.etp = 0;
      continue;
    }
    // ZeRO-3 keeps every expert on every rank (check_ep): only when --ep allows 1.
    if (!space_.ep.empty() && !allowed(space_.ep, 1)) continue;
    if (!space_.etp.empty() && !allowed(space_.etp, c.tp) && !allowed(space_.etp, 0)) continue;  // 0: "tp"
    for (int g : shard_group_candidates(c)) {
      c.shard_group = g;
      if (passes(c, check_zero(c))) for_zero(c, schedules);
    }
  }
}

// ZeRO-3's shard groups: all dp ranks (0) and, unless --shard-group lists others, one node's worth
// of dp ranks — HSDP with the shard dimension inside the node (FSDP2's 2-D mesh, torchtitan
// docs/fsdp.md; FSDP1's HYBRID_SHARD; MiCS, arXiv 2205.00119, which shrinks the groups the same
// way). A listed group equal to dp is plain ZeRO-3.
std::vector<int> Enumerator::shard_group_candidates(const ParallelConfig& c) const {
  std::vector<int> out;
  if (!space_.shard_group.empty()) {
    for (int g : space_.shard_group) {
      const int normalized = g == c.dp ? 0 : g;
      if (std::find(out.begin(), out.end(), normalized) == out.end()) out.push_back(normalized);
    }
    return out;
  }
  out.push_back(0);
  const int node = cluster_.gpus_per_node / (c.tp * c.cp);  // dp ranks are tp·cp apart
  if (node >= 2 && node < c.dp && c.dp % node == 0) out.push_back(node);
  return out;
}

// Expert-parallel sizes: --ep's list, else 1 for a dense model and, for an MoE model, every size that
// divides both its routed experts and the dp·cp group EP ranks come from (Megatron-core's guidance keeps
// EP·TP inside a node; the simulator charges the all-to-alls across nodes where it is not).
// With etp 1 the EP ranks fold over the TP ranks too: sizes dividing tp·dp·cp.
std::vector<int> Enumerator::ep_candidates(const ParallelConfig& c) const {
  if (!space_.ep.empty()) return space_.ep;
  std::vector<int> out = {1};
  if (!model_.moe.active()) return out;
  const int ranks = c.tp * c.grad_ranks() / c.expert_tp();
  for (int ep = 2; ep <= std::min(model_.moe.experts, ranks); ++ep)
    if (model_.moe.experts % ep == 0 && ranks % ep == 0) out.push_back(ep);
  return out;
}

// Expert TP: --etp's list ("tp" or a value equal to tp is the default, 0), else tp and, for an MoE model split
// over TP, 1: Megatron-core's guidance prefers EP to TP for experts (moe/README.md).
std::vector<int> Enumerator::etp_candidates(const ParallelConfig& c) const {
  std::vector<int> out;
  if (!space_.etp.empty()) {
    for (int etp : space_.etp) {
      const int normalized = etp == c.tp ? 0 : etp;
      if (std::find(out.begin(), out.end(), normalized) == out.end()) out.push_back(normalized);
    }
    return out;
  }
  out.push_back(0);
  if (model_.moe.active() && c.tp > 1) out.push_back(1);
  return out;
}

void Enumerator::for_zero(ParallelConfig c, const std::vector<Pipeline>& schedules) {
  std::vector<Recompute> recomputes =
      space_.recompute.empty() ? std::vector<Recompute>{Recompute::kNone, Recompute::kSelective, Recompute::kFull}
                               : space_.recompute;
  // torchtitan's own selective mode is op-level SAC (its Llama 3 configs' default): searched for its runs.
  if (space_.recompute.empty() && training_.framework == "torchtitan" && !model_.moe.active() && !model_.mla.active())
    recomputes.push_back(Recompute::kOp);
  const std::vector<bool> sps =
      space_.sequence_parallel.empty() ? std::vector<bool>{false, true} : space_.sequence_parallel;
  for (Recompute rc : recomputes) {
    c.recompute = rc;
    if (!passes(c, check_recompute(model_, training_, c))) continue;
    // FlashAttention already recomputes the attention core in its backward: selective
    // recompute changes neither time nor memory, so it is the same configuration as none.
    if (rc == Recompute::kSelective && training_.attention == AttentionKernel::kFlash && space_.recompute.empty())
      continue;
    for (bool sp : sps) {
      c.sequence_parallel = sp;
      // At tp 1 there is nothing to split: the same configuration as without.
      if (sp && c.tp == 1 && (space_.sequence_parallel.empty() || allowed(space_.sequence_parallel, false))) continue;
      if (!passes(c, check_sequence_parallel(model_, training_, c))) continue;
      for (const Pipeline& p : schedules) {
        c.schedule = p.schedule;
        c.vpp = p.vpp;
        c.split = p.split;
        if (!passes(c, check_framework(training_, c))) continue;
        out_.legal.push_back(c);
      }
    }
  }
}

void Enumerator::for_layout(ParallelConfig c) {
  if (!passes(c, check_tp(model_, c.tp)) || !passes(c, check_cp(model_, training_, c)) ||
      !passes(c, check_tp_placement(cluster_, training_, c.tp)))
    return;
  splits_ = split_candidates(c);
  if (splits_.empty()) return;
  for (int mb : micro_batch_candidates(training_.global_batch / c.dp)) {
    c.micro_batch = mb;
    if (!passes(c, check_sizes(c)) || !passes(c, check_micro_batch(training_, c))) continue;
    for_micro_batch(c, c.micro_batches(training_.global_batch));
  }
}

Enumeration Enumerator::run() {
  const int seq = training_.seq_len > 0 ? training_.seq_len : model_.seq_len;
  const std::vector<int> cps = space_.cp.empty() ? default_cp_sizes(seq) : space_.cp;
  // The ring unless --cp-comm lists others: Megatron-core's default cp_comm_type, and the kind that
  // needs no head divisibility; adding the all-to-all by default doubled the time of a long-sequence
  // search (llama3-70b, 32K tokens, 64 H100s: 2.1 s → 3.7 s) without changing its winner.
  // PyTorch's ring attention (torchtitan): the all-gather, torchtitan's default context_parallel_rotate_method.
  const CpComm default_comm = training_.cp_attention == CpAttention::kPyTorch ? CpComm::kAllGather : CpComm::kP2P;
  const std::vector<CpComm> comms = space_.cp_comm.empty() ? std::vector<CpComm>{default_comm} : space_.cp_comm;
  for (int tp : divisors(training_.gpus)) {
    if (!allowed(space_.tp, tp)) continue;
    for (int cp : cps) {
      if ((training_.gpus / tp) % cp != 0) continue;
      for (int pp : divisors(training_.gpus / (tp * cp))) {
        if (!allowed(space_.pp, pp)) continue;
        ParallelConfig c;
        c.tp = tp;
        c.cp = cp;
        c.pp = pp;
        c.dp = training_.gpus / (tp * cp * pp);
        if (!allowed(space_.dp, c.dp)) continue;
        // One rank per sequence has nothing to exchange: the kind matters only from cp 2.
        for (CpComm comm : cp == 1 ? std::vector<CpComm>{CpComm::kP2P} : comms) {
          c.cp_comm = comm;
          for_layout(c);
        }
      }
    }
  }
  return std::move(out_);
}

// Why no layout was even tried: the --tp/--cp/--pp/--dp lists leave no tp·cp·pp·dp equal to the GPUs,
// each flag named with its values ("--tp 3 --pp 5: no tp·cp·pp·dp of these sizes is 1024").
std::string unfactorable(const SearchSpace& space, int gpus) {
  std::string flags;
  for (const auto& [flag, values] : {std::pair{"--tp", &space.tp}, std::pair{"--cp", &space.cp},
                                     std::pair{"--pp", &space.pp}, std::pair{"--dp", &space.dp}})
    if (!values->empty()) flags += fmt::format("{}{} {}", flags.empty() ? "" : " ", flag, fmt::join(*values, ","));
  return fmt::format("{}: no tp·cp·pp·dp of these sizes is {}", flags.empty() ? "the size restrictions" : flags, gpus);
}

// Why nothing was legal, from the rejections: the rule that rejected the most layouts leads, with its
// first example; the layouts it did not reject are counted, with the first of theirs. Leading with the
// first rejection instead named the even split's divisibility ("layers 61 not divisible by pp 8") when
// the one thing in the way of every other layout was the --framework's missing schedule.
std::string no_layout_reason(const std::vector<Rejection>& rejected) {
  std::map<std::string, std::size_t> count;
  for (const Rejection& r : rejected) ++count[r.rule];
  const Rejection* top = &rejected.front();
  for (const Rejection& r : rejected)  // ties go to the rule rejected first
    if (count[r.rule] > count[top->rule]) top = &r;
  const std::size_t alike = count[top->rule] - 1, others = rejected.size() - count[top->rule];
  std::vector<std::string> parts;
  if (alike > 0) parts.push_back(fmt::format("and {} more like it", alike));
  if (others > 0) {
    const auto other =
        std::find_if(rejected.begin(), rejected.end(), [&](const Rejection& r) { return r.rule != top->rule; });
    parts.push_back(fmt::format("{} for other reasons, first: {}", others, other->reason));
  }
  return parts.empty() ? top->reason : fmt::format("{} ({})", top->reason, fmt::join(parts, "; "));
}

}  // namespace

// Megatron users turn CP on for long sequences, where activations (linear in s per layer, the
// logits too) outgrow memory. In the published NeMo runs (../shared/validation/h100_public.json,
// NVIDIA/NeMo docs/source/performance/) each CP rank keeps 4096 to 65536 tokens: Llama 3 8B, 70B
// and 405B at 8K tokens with CP 2, and the long-sequence tables from 32K (CP 2) to 1M tokens
// (CP 16-32). Below a few thousand tokens per rank a ring step's tile, whose work grows as (s/cp)²
// while its KV transfer grows as s/cp, stops hiding the transfer. So the default search adds the
// powers of two that leave a rank at least 4096 tokens: short sequences (below 8192 tokens, most
// searches) search exactly what they did before, and a long sequence, where CP is what makes
// layouts fit, gets every size the published runs use. Each size is a search of its own: 128K
// tokens of Llama 3 8B on 512 H100s simulates about 14,000 layouts at cp 1-32 against 800 at cp 1
// alone. --cp lists sizes (any, also not powers of two) and replaces this default.
std::vector<int> default_cp_sizes(int seq) {
  std::vector<int> out = {1};
  for (int cp = 2; seq / cp >= kMinCpTokensPerRank && seq % (2 * cp) == 0; cp *= 2) out.push_back(cp);
  return out;
}

Result<Enumeration> enumerate_configs(const ModelSpec& model, const TrainingSpec& training, const ClusterSpec& cluster,
                                      const SearchSpace& space) {
  Enumeration e = Enumerator(model, training, cluster, space).run();
  if (e.legal.empty()) {
    const std::string why = e.rejected.empty() ? unfactorable(space, training.gpus) : no_layout_reason(e.rejected);
    return make_error(fmt::format("no parallel layout of {} GPUs can run {}: {}", training.gpus, model.name, why));
  }
  return e;
}

}  // namespace loom
