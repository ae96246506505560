// The engine: closed forms of pipeline bubbles, Boost.Graph's longest path as an independent
// oracle for the makespan, deadlock detection, determinism.
#include <gtest/gtest.h>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/dag_shortest_paths.hpp>

#include "pipeline_graph.h"
#include "sim/engine.h"
#include "sim/step_metrics.h"

namespace loom::sim {
namespace {

using testing::pipeline_graph;

double bubble_time(const StepGraph& g, const Timeline& t) {
  return bubble_fraction(g, t) * static_cast<double>(t.makespan);
}

TEST(Engine, OneFOneBBubbleIsClosedForm) {
  // seeds.json: 4 stages, 16 micro-batches → bubble (p − 1)/(m + p − 1) = 3/19.
  const int p = 4, m = 16;
  for (Schedule s : {Schedule::k1F1B, Schedule::kGPipe}) {
    auto programs = make_schedule(s, p, m, 1);
    const StepGraph g = pipeline_graph(*programs, p, 1, m, 1000, 2000);
    auto t = run_engine(g);
    ASSERT_TRUE(t.ok()) << t.error().message;
    EXPECT_EQ(t->makespan, (m + p - 1) * 3000);
    EXPECT_NEAR(bubble_fraction(g, *t), 3.0 / 19.0, 1e-12) << to_string(s);
  }
}

TEST(Engine, InterleavingDividesTheBubbleByV) {
  const int p = 4, m = 8;
  auto plain = make_schedule(Schedule::k1F1B, p, m, 1);
  const StepGraph g1 = pipeline_graph(*plain, p, 1, m, 1200, 2400);
  const auto t1 = run_engine(g1);
  for (int v : {2, 3}) {
    auto inter = make_schedule(Schedule::kInterleaved, p, m, v);
    const StepGraph gv = pipeline_graph(*inter, p, v, m, 1200 / v, 2400 / v);
    const auto tv = run_engine(gv);
    ASSERT_TRUE(tv.ok());
    EXPECT_NEAR(bubble_time(gv, *tv), bubble_time(g1, *t1) / v, 1.0) << "v = " << v;
  }
}

TEST(Engine, ZeroBubbleH1ShrinksTheBubble) {
  // F = B = W: 1F1B idles (p − 1)(F + B + W), ZB-H1 (p − 1)(F + B − W) = (p − 1)·F.
  const int p = 4, m = 12;
  auto zb = make_schedule(Schedule::kZeroBubble, p, m, 1);
  const StepGraph gz = pipeline_graph(*zb, p, 1, m, 1000, 1000, 1000);
  auto plain = make_schedule(Schedule::k1F1B, p, m, 1);
  const StepGraph g1 = pipeline_graph(*plain, p, 1, m, 1000, 2000);
  const auto tz = run_engine(gz);
  const auto t1 = run_engine(g1);
  ASSERT_TRUE(tz.ok());
  EXPECT_EQ(t1->makespan, (m + p - 1) * 3000);
  EXPECT_EQ(tz->makespan, m * 3000 + (p - 1) * 1000);
  for (int pp : {2, 3, 8}) {
    for (int mm : {pp, 2 * pp + 1, 4 * pp}) {
      auto programs = make_schedule(Schedule::kZeroBubble, pp, mm, 1);
      auto t = run_engine(pipeline_graph(*programs, pp, 1, mm, 1000, 1000, 1000));
      EXPECT_EQ(t->makespan, mm * 3000 + (pp - 1) * 1000) << "p " << pp << " m " << mm;
    }
  }
}

// Longest path through the executed graph, computed by Boost.Graph (negated weights).
TimeNs boost_longest_path(const StepGraph& g) {
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, boost::no_property,
                                      boost::property<boost::edge_weight_t, double>>;
  const std::size_t n = g.size();
  Graph graph(n + 2);
  const std::size_t source = n + 1, sink = n;
  const auto edges = g.successors();
  std::vector<std::int32_t> last(g.streams(), -1);
  for (std::size_t i = 0; i < n; ++i) {
    const Op& o = g.op(static_cast<std::int32_t>(i));
    for (auto e = edges.offsets[i]; e < edges.offsets[i + 1]; ++e)
      boost::add_edge(i, edges.edges[e].to, -static_cast<double>(o.duration) * edges.edges[e].fraction, graph);
    if (last[o.stream] >= 0)
      boost::add_edge(last[o.stream], i, -static_cast<double>(g.op(last[o.stream]).duration), graph);
    last[o.stream] = static_cast<std::int32_t>(i);
    boost::add_edge(source, i, 0.0, graph);
    boost::add_edge(i, sink, -static_cast<double>(o.duration), graph);
  }
  std::vector<double> distance(n + 2);
  boost::dag_shortest_paths(graph, source, boost::distance_map(distance.data()));
  return static_cast<TimeNs>(-distance[sink] + 0.5);
}

TEST(Engine, MakespanEqualsBoostLongestPath) {
  for (Schedule s : {Schedule::kGPipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZeroBubble}) {
    const int p = 4, m = 8, v = s == Schedule::kInterleaved ? 2 : 1;
    auto programs = make_schedule(s, p, m, v);
    StepGraph g = pipeline_graph(*programs, p, v, m, 700, 1300, s == Schedule::kZeroBubble ? 500 : 0);
    // Uneven stages make the path interesting.
    for (std::int32_t i = 0; i < static_cast<std::int32_t>(g.size()); ++i)
      if (g.op(i).stage == 2) g.op(i).duration += 333;
    auto t = run_engine(g);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->makespan, boost_longest_path(g)) << to_string(s);
    // The critical path is gap-free: each op starts where its predecessor left it.
    const auto path = critical_path(g, *t);
    ASSERT_FALSE(path.empty());
    EXPECT_EQ(t->start[path.front()], 0);
    EXPECT_EQ(t->end(g, path.back()), t->makespan);
  }
}

// Re-running from a previous timeline after lengthening some ops (the simulator does so when
// collectives beside the compute take SMs) gives exactly what a fresh run gives.
TEST(Engine, RunningAgainFromWhereDurationsChangedEqualsAFreshRun) {
  for (Schedule s : {Schedule::kGPipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZeroBubble}) {
    const int p = 4, m = 8, v = s == Schedule::kInterleaved ? 2 : 1;
    auto programs = make_schedule(s, p, m, v);
    StepGraph g = pipeline_graph(*programs, p, v, m, 700, 1300, s == Schedule::kZeroBubble ? 500 : 0);
    // A DP channel op on each stage released part-way through that stage's last pass.
    for (int stage = 0; stage < p; ++stage) {
      std::int32_t last = -1;
      for (std::int32_t i = 0; i < static_cast<std::int32_t>(g.size()); ++i)
        if (g.op(i).stage == stage && g.op(i).kind != OpKind::kDataParallel) last = i;
      Op dp;
      dp.kind = OpKind::kDataParallel;
      dp.stage = static_cast<std::int16_t>(stage);
      dp.stream = StepGraph::stream_of(stage, StreamKind::kDataParallel);
      dp.duration = 900;
      g.depend(g.add(dp), last, 0.5f);
    }
    const auto before = run_engine(g);
    ASSERT_TRUE(before.ok());
    for (std::size_t pick : {std::size_t{3}, g.size() / 2, g.size() - 6}) {
      StepGraph changed = g;
      std::vector<std::int32_t> lengthened;
      for (std::size_t i = pick; i < changed.size(); i += 5) {
        const auto op = static_cast<std::int32_t>(i);
        changed.op(op).duration += 37 + static_cast<TimeNs>(i);
        lengthened.push_back(op);
      }
      const auto fresh = run_engine(changed);
      ASSERT_TRUE(fresh.ok());
      Timeline again = *before;
      run_engine_again(changed, again, lengthened);
      EXPECT_EQ(again.start, fresh->start) << to_string(s) << " from op " << pick;
      EXPECT_EQ(again.makespan, fresh->makespan) << to_string(s);
      // The critical path is still gap-free and ends at the makespan.
      const auto path = critical_path(changed, again);
      ASSERT_FALSE(path.empty());
      EXPECT_EQ(again.start[path.front()], 0);
      EXPECT_EQ(again.end(changed, path.back()), again.makespan);
      for (std::size_t i = 1; i < path.size(); ++i) EXPECT_LE(again.start[path[i - 1]], again.start[path[i]]);
      EXPECT_NE(fresh->start, before->start) << to_string(s);  // the change moved something
    }
  }
}

TEST(Engine, FractionalDependencyStartsPartWayThrough) {
  StepGraph g(1);
  Op a;
  a.duration = 1000;
  a.stream = StepGraph::stream_of(0, StreamKind::kCompute);
  const auto first = g.add(a);
  Op b;
  b.duration = 10;
  b.stream = StepGraph::stream_of(0, StreamKind::kDataParallel);
  b.kind = OpKind::kDataParallel;
  const auto second = g.add(b);
  g.depend(second, first, 0.25f);
  auto t = run_engine(g);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->start[second], 250);
  EXPECT_EQ(t->makespan, 1000);
}

TEST(Engine, DeadlockIsReportedNotHung) {
  StepGraph g(2);
  Op a;
  a.duration = 5;
  a.stream = StepGraph::stream_of(0, StreamKind::kCompute);
  const auto x = g.add(a);
  a.stream = StepGraph::stream_of(1, StreamKind::kCompute);
  a.stage = 1;
  const auto y = g.add(a);
  g.depend(x, y);
  g.depend(y, x);
  auto t = run_engine(g);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("deadlock"), std::string::npos);
  EXPECT_TRUE(t.error().internal()) << "a deadlock is a bug in Loom, not bad input";
}

}  // namespace
}  // namespace loom::sim
