// planner/search_space.h: the config flags' text (one value or a comma list) into the search
// restrictions or one configuration, errors naming the flag.
#include <gtest/gtest.h>

#include "planner/search_space.h"

namespace loom {
namespace {

TEST(ParseSearchSpace, ReadsEveryListAndLeavesUnsetOnesUnrestricted) {
  ConfigText t;
  t.tp = "2,4";
  t.zero = "0,3";
  t.recompute = "none,full";
  t.sp = "on,off";
  t.schedule = "1f1b,zb";
  auto s = parse_search_space(t);
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->tp, (std::vector<int>{2, 4}));
  EXPECT_EQ(s->zero, (std::vector<int>{0, 3}));
  EXPECT_EQ(s->recompute, (std::vector<Recompute>{Recompute::kNone, Recompute::kFull}));
  EXPECT_EQ(s->sequence_parallel, (std::vector<bool>{true, false}));
  EXPECT_EQ(s->schedule, (std::vector<Schedule>{Schedule::k1F1B, Schedule::kZeroBubble}));
  EXPECT_TRUE(s->pp.empty());
  EXPECT_TRUE(s->micro_batch.empty());
}

TEST(ParseSearchSpace, BadItemsNameTheFlag) {
  const std::pair<std::string ConfigText::*, std::pair<std::string, std::string>> cases[] = {
      {&ConfigText::tp, {"4,x", "--tp: 'x' is not an integer"}},
      {&ConfigText::pp, {"2,,4", "--pp: empty value in list '2,,4'"}},
      {&ConfigText::zero, {"4", "--zero: ZeRO stage 4 does not exist (0, 1, 2 or 3)"}},
      {&ConfigText::micro_batch, {"0", "--micro-batch: 0 must be at least 1"}},
      {&ConfigText::schedule,
       {"pipedream", "--schedule: unknown schedule 'pipedream' (gpipe, 1f1b, interleaved or zb)"}},
  };
  for (const auto& [field, text_and_message] : cases) {
    ConfigText t;
    t.*field = text_and_message.first;
    auto s = parse_search_space(t);
    ASSERT_FALSE(s) << text_and_message.first;
    EXPECT_EQ(s.error().message, text_and_message.second);
  }
}

TEST(ParseParallelConfig, DefaultsFillWhatIsNotGivenAndDpTakesTheRestOfTheGpus) {
  ConfigText t;
  t.tp = "2";
  t.vpp = "2";
  t.pp = "2";
  auto c = parse_parallel_config(t, 16);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->tp, 2);
  EXPECT_EQ(c->pp, 2);
  EXPECT_EQ(c->dp, 4);
  EXPECT_EQ(c->micro_batch, 1);
  EXPECT_EQ(c->schedule, Schedule::kInterleaved);  // vpp > 1
  EXPECT_FALSE(c->sequence_parallel);
}

TEST(ParseParallelConfig, ShardGroupOfAllDpRanksIsPlainZero3) {
  ConfigText t;
  t.zero = "3";
  t.shard_group = "4";
  auto c = parse_parallel_config(t, 16);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->shard_group, 4);
  t.shard_group = "16";
  c = parse_parallel_config(t, 16);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->shard_group, 0);
  t.shard_group = "x";
  auto bad = parse_parallel_config(t, 16);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "--shard-group: 'x' is not an integer");
}

TEST(ParseParallelConfig, RejectsListsAndAWorldSizeOtherThanTheGpus) {
  ConfigText t;
  t.tp = "2,4";
  auto list = parse_parallel_config(t, 8);
  ASSERT_FALSE(list);
  EXPECT_EQ(list.error().message, "--tp takes one value here, not a list");
  t.tp = "3";
  auto wrong = parse_parallel_config(t, 8);
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().message, "tp 3 × pp 1 = 3 ranks per data-parallel replica do not divide --gpus 8");
  t.tp = "2";
  t.dp = "2";
  auto given = parse_parallel_config(t, 8);  // with --dp, the product is named
  ASSERT_FALSE(given);
  EXPECT_EQ(given.error().message, "tp 2 × pp 1 × dp 2 = 4 but --gpus is 8");
}

}  // namespace
}  // namespace loom
