// The bounded search (`loom plan --top K`, PlanOptions::top): sim/step_bound.h's lower bound is
// never above the simulated step of any configuration a search simulates, its memoised chunks are
// the cost model's, and a search for the K fastest gives exactly the first K rows of the full one,
// over dense, long-sequence CP, MoE, FP8/ZeRO-3, torchtitan (op-level recompute) and Megatron-LM-2021-style
// (blocking sends, no gradient-reduce overlap, fp32 grads, unfused attention, kernel jitter) searches,
// and two stacks' searches merged (`loom plan --framework a,b`).
#include <algorithm>
#include <map>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/framework.h"
#include "core/presets.h"
#include "planner/search.h"
#include "sim/step_bound.h"

namespace loom {
namespace {

struct Case {
  std::string name;
  ModelSpec model;
  ClusterSpec cluster;
  TrainingSpec training;
  SearchSpace space;
};

ModelSpec hf_model(const std::string& name) {
  auto m = load_model(std::string(LOOM_VALIDATION_DIR) + "/hf_configs/" + name + "/config.json");
  EXPECT_TRUE(m.ok()) << m.error().message;
  return *m;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  out.push_back({"llama2-7b on 16 A100",
                 *model_preset("llama2-7b"),
                 *cluster_preset("dgx-a100-80gb"),
                 TrainingSpec{.gpus = 16, .global_batch = 64, .seq_len = 4096},
                 {}});
  Case cp{"llama3-8b at 32K tokens, every CP exchange",
          *model_preset("llama3-8b"),
          *cluster_preset("dgx-h100"),
          TrainingSpec{.gpus = 16, .global_batch = 16, .seq_len = 32768},
          {}};
  cp.space.cp_comm = {CpComm::kP2P, CpComm::kA2A, CpComm::kAllGather};
  cp.space.micro_batch = {1};  // the three exchanges, not more micro-batch sizes, are this case's point
  out.push_back(cp);
  Case mixtral{"mixtral-8x7b on 32 H100",
               hf_model("mixtral-8x7b"),
               *cluster_preset("dgx-h100"),
               TrainingSpec{.gpus = 32, .global_batch = 64, .seq_len = 4096},
               {}};
  mixtral.space.micro_batch = {1, 2};
  out.push_back(mixtral);
  Case moe{"deepseek-v2-lite, shared expert overlapped",
           hf_model("deepseek-v2-lite"),
           *cluster_preset("dgx-h100"),
           TrainingSpec{.gpus = 16, .global_batch = 64, .seq_len = 4096},
           {}};
  moe.space.micro_batch = {1, 2};
  moe.training.moe_shared_expert_overlap = true;
  out.push_back(moe);
  Case fp8{"llama3-8b FP8 ZeRO-3 and HSDP",
           *model_preset("llama3-8b"),
           *cluster_preset("dgx-h100"),
           TrainingSpec{.gpus = 32, .global_batch = 64, .seq_len = 8192},
           {}};
  fp8.training.precision = Precision::kFp8;
  fp8.space.zero = {3};
  out.push_back(fp8);
  Case titan{"llama3-8b under torchtitan, op-level recompute searched",
             *model_preset("llama3-8b"),
             *cluster_preset("dgx-h100"),
             TrainingSpec{.gpus = 16, .global_batch = 32, .seq_len = 8192},
             {}};
  apply_framework(*find_framework("torchtitan").value(), titan.training);
  out.push_back(titan);
  Case old{"gpt2-xl, 2021 software",
           *model_preset("gpt2-xl"),
           *cluster_preset("dgx-a100-80gb"),
           TrainingSpec{.gpus = 32, .global_batch = 128, .seq_len = 1024},
           {}};
  old.training.pipeline_sends_block = true;
  old.training.overlap_grad_reduce = false;
  old.training.grad_bytes = 4;
  old.training.attention = AttentionKernel::kUnfused;
  old.training.kernel_cv = 0.05;
  out.push_back(old);
  return out;
}

// Each case's full search, run once for both tests (the sanitizer build runs them 20 times slower).
// The MoE and CP cases search micro-batches 1 and 2 only (1 for CP): still 2,985–4,212 rows each,
// and the sanitizer build's two tests take 66 s and 75 s instead of past their 300 s.
const PlanResult& full_search(const Case& c) {
  static std::map<std::string, PlanResult> done;
  auto it = done.find(c.name);
  if (it == done.end()) {
    auto full = search_plans(c.model, c.training, c.cluster, c.space);
    EXPECT_TRUE(full.ok()) << full.error().message;
    it = done.emplace(c.name, full.ok() ? std::move(*full) : PlanResult{}).first;
  }
  return it->second;
}

TEST(StepBound, NeverAboveTheSimulatedStepAndTheChunksAreTheCostModels) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const PlanResult* full = &full_search(c);
    ASSERT_GT(full->plans.size(), 100u);
    const sim::CollectiveModel collectives(c.cluster);
    const sim::StepBound bound(c.model, c.training, c.cluster, collectives);
    std::size_t above = 0, chunks_differ = 0, compared = 0;
    double tightest = 0;
    for (std::size_t i = 0; i < full->plans.size(); ++i) {
      const PlanRow& row = full->plans[i];
      const double b = bound.lower_bound_s(row.config);
      if (b > row.metrics.step_time_s) ++above;
      if (b > row.metrics.step_time_s && above <= 3)
        ADD_FAILURE() << fmt::format("bound {} s > simulated {} s for tp {} cp {} pp {} dp {} vpp {} schedule {}", b,
                                     row.metrics.step_time_s, row.config.tp, row.config.cp, row.config.pp,
                                     row.config.dp, row.config.vpp, to_string(row.config.schedule));
      tightest = std::max(tightest, b / row.metrics.step_time_s);
      // The memo against a fresh cost model on every 16th configuration (each chunk of each is a cost
      // model's full work; the bound above is checked on all of them).
      if (i % 16 != 0) continue;
      ++compared;
      const sim::CostModel cost(c.model, c.training, row.config, c.cluster, collectives);
      const bool split = row.config.schedule == Schedule::kZeroBubble;
      for (int s = 0; s < row.config.pp; ++s)
        for (int k = 0; k < row.config.vpp; ++k) {
          const sim::ChunkCost memo = bound.chunk(cost, row.config, s, k), fresh = cost.chunk(s, k, split);
          if (memo.forward.seconds != fresh.forward.seconds || memo.backward.seconds != fresh.backward.seconds ||
              memo.weight.seconds != fresh.weight.seconds || memo.forward.compute_sq_s2 != fresh.forward.compute_sq_s2)
            ++chunks_differ;
        }
    }
    EXPECT_EQ(above, 0u) << "of " << full->plans.size();
    EXPECT_EQ(chunks_differ, 0u) << "of " << compared << " configurations compared";
    EXPECT_GT(compared, 100u / 16);
    // A bound that bounds nothing (0, or compute alone at a fraction of the step) would skip nothing:
    // on some configuration the chain it follows is most of the step.
    EXPECT_GT(tightest, 0.9);
  }
}

TEST(BoundedSearch, TheKFastestAreTheFullSearchsFirstK) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const PlanResult* full = &full_search(c);
    for (std::size_t k : {1u, 7u, 40u}) {
      SCOPED_TRACE(k);
      PlanOptions options;
      options.top = k;
      auto top = search_plans(c.model, c.training, c.cluster, c.space, options);
      ASSERT_TRUE(top.ok()) << top.error().message;
      ASSERT_GE(top->plans.size(), k);
      for (std::size_t i = 0; i < k; ++i) {
        EXPECT_EQ(top->plans[i].config, full->plans[i].config) << "row " << i;
        EXPECT_EQ(top->plans[i].metrics.step_time_s, full->plans[i].metrics.step_time_s) << "row " << i;
        EXPECT_EQ(top->plans[i].metrics.memory_gib.total, full->plans[i].metrics.memory_gib.total) << "row " << i;
      }
      EXPECT_EQ(top->simulated, top->plans.size());
      EXPECT_EQ(top->simulated + top->skipped, full->simulated);
      EXPECT_EQ(top->rejected.size(), full->rejected.size());
      EXPECT_EQ(top->enumerated, full->enumerated);
      EXPECT_GT(top->skipped, 0u);  // the point of it
    }
  }
}

// `loom plan --framework a,b`: the K fastest of each stack's bounded search, merged, are the first K of
// both stacks' full searches merged — the same rows, steps and stacks — and the counts add up.
TEST(BoundedSearch, MergedStacksKeepTheKFastestOfTheirUnion) {
  const std::vector<Case> all = cases();
  const Case& a = all.front();  // llama2-7b on 16 A100, no stack named
  Case b = a;
  b.name = "llama2-7b on 16 A100 under megatron-core";
  apply_framework(*find_framework("megatron-core").value(), b.training);
  std::vector<PlanResult> fulls = {full_search(a), full_search(b)};
  const PlanResult union_full = merge_plan_results(fulls);
  ASSERT_EQ(union_full.plans.size(), fulls[0].plans.size() + fulls[1].plans.size());
  std::map<std::string, int> stacks_in_top;
  for (std::size_t k : {1u, 9u, 40u}) {
    SCOPED_TRACE(k);
    PlanOptions options;
    options.top = k;
    std::vector<PlanResult> tops;
    for (const Case* c : std::vector<const Case*>{&a, &b})
      tops.push_back(*search_plans(c->model, c->training, c->cluster, c->space, options));
    const PlanResult merged = merge_plan_results(tops);
    ASSERT_GE(merged.plans.size(), k);
    for (std::size_t i = 0; i < k; ++i) {
      EXPECT_EQ(merged.plans[i].config, union_full.plans[i].config) << "row " << i;
      EXPECT_EQ(merged.plans[i].framework, union_full.plans[i].framework) << "row " << i;
      EXPECT_EQ(merged.plans[i].metrics.step_time_s, union_full.plans[i].metrics.step_time_s) << "row " << i;
      ++stacks_in_top[merged.plans[i].framework];
    }
    EXPECT_EQ(merged.enumerated, fulls[0].enumerated + fulls[1].enumerated);
    EXPECT_EQ(merged.simulated + merged.skipped, fulls[0].simulated + fulls[1].simulated);
    EXPECT_EQ(merged.rejected.size(), fulls[0].rejected.size() + fulls[1].rejected.size());
  }
  // Both stacks reach the top 40: the merge ranks rows of both, not one list after the other.
  EXPECT_GT(stacks_in_top[""], 0);
  EXPECT_GT(stacks_in_top["megatron-core"], 0);
  // Rejections name their stack where one was named.
  std::size_t named = 0;
  for (const Rejection& r : union_full.rejected) {
    if (r.framework != "megatron-core") continue;
    EXPECT_EQ(r.reason.rfind("megatron-core: ", 0), 0u) << r.reason;
    ++named;
  }
  EXPECT_EQ(named, fulls[1].rejected.size());
}

}  // namespace
}  // namespace loom
