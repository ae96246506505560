// NIC sharing (sim/nic_sharing.h): transfers on one NIC share it equally while both are in flight. Small
// graphs against their exact processor-sharing results, then whole steps: a pipeline across nodes whose
// gradient buckets run during the backward gets slower, each send by the time collectives ran beside it;
// nothing changes where they never meet.
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "core/presets.h"
#include "sim/nic_sharing.h"
#include "sim/simulator.h"

namespace loom::sim {
namespace {

Op transfer(int stage, OpKind kind, TimeNs duration, SendDirection direction = SendDirection::kForward) {
  Op op{
      .duration = duration,
      .stream = StepGraph::stream_of(stage, kind == OpKind::kPipeSend ? StreamKind::kPipe : StreamKind::kDataParallel),
      .kind = kind,
      .direction = direction,
      .stage = static_cast<std::int16_t>(stage)};
  op.collective = Collective::kAllReduce;
  return op;
}

// An op of `duration` on `stage`'s compute stream, then `op` after it: `op` starts at `duration`.
std::int32_t after(StepGraph& g, int stage, TimeNs duration, const Op& op) {
  Op pass{.duration = duration, .stream = StepGraph::stream_of(stage, StreamKind::kCompute), .kind = OpKind::kForward};
  pass.stage = static_cast<std::int16_t>(stage);
  const std::int32_t wait = duration > 0 ? g.add(pass) : -1;
  const std::int32_t id = g.add(op);
  if (wait >= 0) g.depend(id, wait);
  return id;
}

const NicCrossings kAllCross{.forward_send = {1, 1}, .backward_send = {1, 1}, .all_reduce = true};

TEST(NicSharing, TwoTransfersMatchTheExactProcessorSharingResult) {
  // Stage 0 sends 10 us to stage 1 from 0; its 10 us all-reduce starts at 5 us. Both at half rate over
  // [5, 15]: the send ends at 15 us, the all-reduce at 20 us.
  StepGraph g(2);
  const std::int32_t a = after(g, 0, 0, transfer(0, OpKind::kPipeSend, 10'000));
  const std::int32_t b = after(g, 0, 5'000, transfer(0, OpKind::kDataParallel, 10'000));
  auto t = run_engine(g);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(share_nics(g, *t, kAllCross));
  EXPECT_EQ(t->end(g, a), 15'000);
  EXPECT_EQ(t->end(g, b), 20'000);
  EXPECT_EQ(t->makespan, 20'000);

  // The same where the all-reduce stays inside the node: nothing to share.
  StepGraph h(2);
  after(h, 0, 0, transfer(0, OpKind::kPipeSend, 10'000));
  after(h, 0, 5'000, transfer(0, OpKind::kDataParallel, 10'000));
  auto u = run_engine(h);
  ASSERT_TRUE(u.ok());
  NicCrossings inside = kAllCross;
  inside.all_reduce = false;
  EXPECT_FALSE(share_nics(h, *u, inside));
  EXPECT_EQ(u->makespan, 15'000);
}

TEST(NicSharing, ShortSendsInsideARingEachTakeTwiceAsLongAndDelayItByTheirSum) {
  // A 100 us ring on stage 1; 1 us sends into it from stage 0 at 10 and 20 us and out of it at 30 us.
  StepGraph g(2);
  const std::int32_t ring = after(g, 1, 0, transfer(1, OpKind::kDataParallel, 100'000));
  const std::int32_t in1 = after(g, 0, 10'000, transfer(0, OpKind::kPipeSend, 1'000));
  const std::int32_t in2 = after(g, 0, 10'000, transfer(0, OpKind::kPipeSend, 1'000));  // after the first pass: 20 us
  const std::int32_t out = after(g, 1, 30'000, transfer(1, OpKind::kPipeSend, 1'000, SendDirection::kBackward));
  auto t = run_engine(g);
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->start[in2], 20'000);
  EXPECT_TRUE(share_nics(g, *t, kAllCross));
  for (const std::int32_t send : {in1, in2, out}) EXPECT_EQ(g.op(send).duration, 2'000) << send;
  EXPECT_EQ(t->end(g, ring), 103'000);
}

TEST(NicSharing, ARingBesideASendInAndASendOutAtOnceLosesHalfNotAll) {
  // Stage 1's ring beside stage 1's send out and stage 0's send in over the same 10 us: each direction
  // of the NIC carries one send and the ring, so the ring runs at half rate (loses 10 us, not 20).
  StepGraph g(2);
  const std::int32_t ring = after(g, 1, 0, transfer(1, OpKind::kDataParallel, 50'000));
  after(g, 0, 0, transfer(0, OpKind::kPipeSend, 10'000));
  after(g, 1, 0, transfer(1, OpKind::kPipeSend, 10'000, SendDirection::kBackward));
  auto t = run_engine(g);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(share_nics(g, *t, kAllCross));
  EXPECT_EQ(g.op(ring).duration, 60'000);
}

SimResult step(const char* model, int gpus, ParallelConfig c, bool share, const char* cluster = "dgx-h100") {
  const TrainingSpec t{.gpus = gpus, .global_batch = 64, .seq_len = 4096};
  SimOptions o;
  o.share_nics = share;
  o.keep_graph = true;
  auto r = simulate(*model_preset(model), t, c, *cluster_preset(cluster), o);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return *r;
}

TEST(NicSharing, APipelineAcrossNodesSharesItsNicsWithTheGradientBuckets) {
  // LLaMA-2 70B, TP 8 per node, PP 4 across nodes, DP 4 across nodes (128 GPUs); the buckets are
  // reduced during the backward (overlap_grad_reduce, Loom's default), beside the backward's sends.
  const ParallelConfig c{.tp = 8,
                         .pp = 4,
                         .dp = 4,
                         .zero = 1,
                         .micro_batch = 1,
                         .vpp = 5,
                         .sequence_parallel = true,
                         .schedule = Schedule::kInterleaved};
  const SimResult alone = step("llama2-70b", 128, c, false), shared = step("llama2-70b", 128, c, true);
  EXPECT_GT(shared.step_time_s, alone.step_time_s);
  EXPECT_LT(shared.step_time_s, 1.1 * alone.step_time_s);
  // Each send is longer by the time the collectives of its sender and receiver stages ran beside it in
  // the unshared schedule (the union: two at once count once).
  const StepGraph& g = shared.graph;
  const StepGraph& base = alone.graph;
  const Timeline& t = alone.timeline;
  int lengthened = 0;
  for (std::int32_t i = 0; i < static_cast<std::int32_t>(g.size()); ++i) {
    const Op& op = g.op(i);
    if (op.kind != OpKind::kPipeSend) continue;
    ASSERT_EQ(base.op(i).kind, OpKind::kPipeSend);
    const TimeNs extra = op.duration - base.op(i).duration;
    const int receiver = op.direction == SendDirection::kForward ? (op.stage + 1) % c.pp : (op.stage + c.pp - 1) % c.pp;
    std::vector<std::pair<TimeNs, TimeNs>> beside;
    for (std::int32_t j = 0; j < static_cast<std::int32_t>(g.size()); ++j) {
      const Op& other = base.op(j);
      if (other.kind != OpKind::kDataParallel || (other.stage != op.stage && other.stage != receiver)) continue;
      const TimeNs b = std::max(t.start[i], t.start[j]), e = std::min(t.end(base, i), t.end(base, j));
      if (e > b) beside.emplace_back(b, e);
    }
    std::sort(beside.begin(), beside.end());
    TimeNs covered = 0, reach = 0;
    for (auto [b, e] : beside) {
      if (e > std::max(b, reach)) covered += e - std::max(b, reach);
      reach = std::max(reach, e);
    }
    EXPECT_EQ(extra, covered) << "send " << i;
    lengthened += extra > 0;
  }
  EXPECT_GT(lengthened, 0);
}

TEST(NicSharing, NothingChangesWhereSendsAndCollectivesNeverShareANic) {
  // One node: every transfer stays on NVLink.
  const ParallelConfig node{.tp = 2, .pp = 2, .dp = 2, .zero = 1, .micro_batch = 1, .sequence_parallel = true};
  EXPECT_EQ(step("llama2-7b", 8, node, true).step_time_s, step("llama2-7b", 8, node, false).step_time_s);
  // No pipeline: no sends.
  const ParallelConfig flat{.tp = 8, .dp = 16, .zero = 1, .micro_batch = 1, .sequence_parallel = true};
  EXPECT_EQ(step("llama2-7b", 128, flat, true).step_time_s, step("llama2-7b", 128, flat, false).step_time_s);
}

}  // namespace
}  // namespace loom::sim
