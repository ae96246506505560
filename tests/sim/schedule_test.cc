// Each schedule's op order against a hand-written small case.
#include <gtest/gtest.h>

#include "sim/schedule.h"

namespace loom::sim {
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

}  // namespace
}  // namespace loom::sim
