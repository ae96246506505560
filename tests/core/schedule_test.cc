// Each schedule's op order against a hand-written small case, and every generator's invariants over a
// grid of (pp, micro-batches, vpp): each pass once per stage, in dependency order, and runnable.
#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include <fmt/format.h>

#include "core/schedule.h"

namespace loom {
namespace {

TEST(Schedule, GPipe) {
  const auto p = gpipe_schedule(2, 2);
  EXPECT_EQ(format_program(p[0]), "F0.0 F0.1 B0.0 B0.1");
  EXPECT_EQ(format_program(p[1]), "F0.0 F0.1 B0.0 B0.1");
}

TEST(Schedule, OneFOneB) {
  const auto p = one_f_one_b_schedule(2, 3);
  EXPECT_EQ(format_program(p[0]), "F0.0 F0.1 B0.0 F0.2 B0.1 B0.2");
  EXPECT_EQ(format_program(p[1]), "F0.0 B0.0 F0.1 B0.1 F0.2 B0.2");
}

TEST(Schedule, InterleavedFollowsMegatronChunkOrder) {
  const auto p = interleaved_schedule(2, 2, 2);
  EXPECT_EQ(format_program(p[0]), "F0.0 F0.1 F1.0 F1.1 B1.0 B1.1 B0.0 B0.1");
  EXPECT_EQ(format_program(p[1]), "F0.0 F0.1 F1.0 B1.0 F1.1 B1.1 B0.0 B0.1");
}

TEST(Schedule, ZeroBubbleH1DefersWeightGradients) {
  const auto p = zero_bubble_h1_schedule(2, 3);
  EXPECT_EQ(format_program(p[0]), "F0.0 F0.1 B0.0 W0.0 F0.2 B0.1 W0.1 B0.2 W0.2");
  EXPECT_EQ(format_program(p[1]), "F0.0 B0.0 F0.1 B0.1 W0.0 F0.2 B0.2 W0.1 W0.2");
}

TEST(Schedule, EveryPassAppearsExactlyOnce) {
  for (Schedule s : {Schedule::kGPipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZeroBubble}) {
    const int pp = 4, m = 8, vpp = s == Schedule::kInterleaved ? 2 : 1;
    auto programs = make_schedule(s, pp, m, vpp);
    ASSERT_TRUE(programs.ok()) << programs.error().message;
    for (const auto& program : *programs) {
      std::vector<int> seen(3 * vpp * m, 0);
      for (const auto& op : program) ++seen[static_cast<int>(op.pass) * vpp * m + op.chunk * m + op.micro_batch];
      const int passes = s == Schedule::kZeroBubble ? 3 : 2;
      for (int i = 0; i < passes * vpp * m; ++i) EXPECT_EQ(seen[i], 1) << to_string(s) << " slot " << i;
    }
  }
}

TEST(Schedule, RejectsWhatItCannotRun) {
  EXPECT_FALSE(make_schedule(Schedule::kInterleaved, 4, 6, 2).ok());  // 6 micro-batches, pp 4
  EXPECT_FALSE(make_schedule(Schedule::k1F1B, 4, 8, 2).ok());         // vpp without interleaving
  EXPECT_FALSE(make_schedule(Schedule::k1F1B, 0, 8, 1).ok());
}

// Runs the programs with unit-time passes: a pass starts once its inputs exist (the forward of the
// previous virtual stage, the backward of the next one, its own forward or backward on this stage)
// and the stage's earlier passes are done. Returns the passes left unrun when no stage can proceed.
int passes_left_after_running(const std::vector<StageProgram>& programs, int pp) {
  using Key = std::tuple<Pass, int, int>;  // pass, virtual stage, micro-batch
  std::map<Key, bool> done;
  const int virtual_stages = [&] {
    int chunks = 1;
    for (const auto& program : programs)
      for (const auto& op : program) chunks = std::max(chunks, op.chunk + 1);
    return chunks * pp;
  }();
  auto ready = [&](const PipelineOp& op, int v) {
    const int i = op.micro_batch;
    switch (op.pass) {
      case Pass::kF: return v == 0 || done.contains({Pass::kF, v - 1, i});
      case Pass::kB:
        return done.contains({Pass::kF, v, i}) && (v == virtual_stages - 1 || done.contains({Pass::kB, v + 1, i}));
      case Pass::kW: return done.contains({Pass::kB, v, i});
    }
    return false;
  };
  std::vector<std::size_t> next(programs.size(), 0);
  for (bool progress = true; progress;) {
    progress = false;
    std::vector<Key> finished;  // every stage runs at most one pass per time unit
    for (int s = 0; s < pp; ++s) {
      if (next[s] == programs[s].size()) continue;
      const PipelineOp& op = programs[s][next[s]];
      const int v = virtual_stage(op.chunk, s, pp);
      if (!ready(op, v)) continue;
      finished.emplace_back(op.pass, v, op.micro_batch);
      ++next[s];
      progress = true;
    }
    for (const Key& k : finished) done[k] = true;
  }
  int left = 0;
  for (int s = 0; s < pp; ++s) left += static_cast<int>(programs[s].size() - next[s]);
  return left;
}

TEST(Schedule, EveryGeneratorRunsEachPassOnceInDependencyOrderWithoutDeadlock) {
  int checked = 0;
  for (Schedule sched : {Schedule::kGPipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZeroBubble})
    for (int pp = 1; pp <= 8; ++pp)
      for (int m = 1; m <= 16; ++m)
        for (int vpp = 1; vpp <= (sched == Schedule::kInterleaved ? 4 : 1); ++vpp) {
          auto programs = make_schedule(sched, pp, m, vpp);
          if (sched == Schedule::kInterleaved && m % pp != 0) {
            EXPECT_FALSE(programs.ok());
            continue;
          }
          ASSERT_TRUE(programs.ok()) << programs.error().message;
          ASSERT_EQ(programs->size(), static_cast<std::size_t>(pp));
          const std::string where = fmt::format("{} pp {} m {} vpp {}", to_string(sched), pp, m, vpp);
          const int passes = sched == Schedule::kZeroBubble ? 3 : 2;
          for (const auto& program : *programs) {
            std::map<std::tuple<int, int, int>, int> position;  // (pass, chunk, micro-batch) -> index
            for (std::size_t k = 0; k < program.size(); ++k) {
              const auto& op = program[k];
              ASSERT_TRUE(op.chunk >= 0 && op.chunk < vpp && op.micro_batch >= 0 && op.micro_batch < m) << where;
              EXPECT_TRUE(position.emplace(std::tuple{static_cast<int>(op.pass), op.chunk, op.micro_batch}, k).second)
                  << where << ": " << format_program(program);
            }
            ASSERT_EQ(program.size(), static_cast<std::size_t>(passes * vpp * m)) << where;
            // What sim/step_bound.h's lower bound relies on: the stage starts with the forward of
            // micro-batch 0 through its first chunk, and only weight-gradient passes (zero-bubble) follow
            // the backward of the last micro-batch through that chunk.
            EXPECT_EQ(program.front(), (PipelineOp{Pass::kF, 0, 0})) << where;
            for (std::size_t k = position.at({static_cast<int>(Pass::kB), 0, m - 1}) + 1; k < program.size(); ++k)
              EXPECT_EQ(program[k].pass, Pass::kW) << where << ": " << format_program(program);
            for (int c = 0; c < vpp; ++c)
              for (int i = 0; i < m; ++i)
                for (int p = 1; p < passes; ++p)
                  EXPECT_LT(position.at({p - 1, c, i}), position.at({p, c, i}))
                      << where << ": " << format_program(program);
          }
          EXPECT_EQ(passes_left_after_running(*programs, pp), 0) << where;
          ++checked;
        }
  EXPECT_GT(checked, 4 * 8 * 8);
}

TEST(Schedule, UnitTimeRunFindsADeadlockedProgram) {
  // Stage 1 waits for its own backward before the forward it needs to start: stuck.
  std::vector<StageProgram> programs = *make_schedule(Schedule::k1F1B, 2, 2, 1);
  std::swap(programs[1][0], programs[1][1]);
  EXPECT_GT(passes_left_after_running(programs, 2), 0);
}

}  // namespace
}  // namespace loom
