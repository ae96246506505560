// The calibration readers on malformed input: vTrain CSV rows and executor traces that used to
// throw, narrow out-of-range numbers or index past the layout now give one clear line (found by
// tests/fuzz, or written beside what it found).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/json_io.h"
#include "core/presets.h"
#include "planner/calibrate.h"

namespace loom {
namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / ("loom_calibrate_input_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::ofstream(path) << text;
  return path.string();
}

template <typename T>
void expect_error(const Result<T>& r, const std::string& expected) {
  ASSERT_FALSE(r.ok()) << "accepted, expected: " << expected;
  EXPECT_NE(r.error().message.find(expected), std::string::npos) << r.error().message;
  EXPECT_EQ(r.error().message.find('\n'), std::string::npos) << r.error().message;
}

const char* kGoodRow = "2,16,8,1024,16,24,1024,1,1,2,372.160408";

TEST(VtrainCsv, AGoodRowWithCrLfIsRead) {
  auto runs = read_vtrain_csv(write_temp("good.csv", std::string("# header\r\n") + kGoodRow + "\r\n"));
  ASSERT_TRUE(runs.ok()) << runs.error().message;
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ((*runs)[0].model.hidden, 1024);
  EXPECT_EQ((*runs)[0].config.pp, 2);
  EXPECT_DOUBLE_EQ((*runs)[0].measured_s, 0.372160408);
}

TEST(VtrainCsv, RowsThatAreNotARunAreOneLine) {
  const std::pair<const char*, const char*> cases[] = {
      // Each used to be narrowed to int (undefined beyond its range) or accepted as a run.
      {"2,16,8,1e300,16,24,1024,1,1,2,372", "hidden size 1e+300 is not a whole number"},
      {"2,16,8,nan,16,24,1024,1,1,2,372", "'nan' is not a number"},
      {"2,16,8,1024,16,24,1024,1,1,2,inf", "'inf' is not a number"},
      {"2,16,8,1024abc,16,24,1024,1,1,2,372", "'1024abc' is not a number"},
      {"2,16,8,1024,0,24,1024,1,1,2,372", "attention heads 0 is not a whole number"},
      {"2,16,8,1024,16,24.5,1024,1,1,2,372", "layers 24.5 is not a whole number"},
      {"2,16,8,1000,16,24,1024,1,1,2,372", "hidden size 1000 is not divisible by 16 heads"},
      {"4,16,8,1024,16,24,1024,1,1,2,372", "tp·dp·pp = 2 but the run has 4 GPUs"},
      {"2,16,8,1024,16,24,1024,1,1,2,-5", "iteration time -5 ms is not positive"},
      {"2,16,8,1048576,16,4096,1024,1,1,2,372", "more than Loom's limit"},
  };
  int i = 0;
  for (const auto& [row, expected] : cases)
    expect_error(read_vtrain_csv(write_temp("bad" + std::to_string(i++) + ".csv", std::string(row) + "\n")), expected);
}

Json trace_with(const Json& events) { return Json{{"traceEvents", events}}; }

TEST(ExecutorTrace, EventsOfOtherShapesAreSkippedAndBadDurationsNamed) {
  // Metadata events, non-objects and other tools' slices are not Loom's: skipped, not thrown on.
  const Json events = Json::array({1, "x", Json{{"ph", 5}}, Json{{"ph", "M"}, {"name", 3}},
                                   Json{{"ph", "X"}, {"name", "gemm"}, {"dur", "long"}},
                                   Json{{"ph", "X"}, {"name", "F0 mb0"}, {"dur", 40}}});
  auto times = read_executor_trace(trace_with(events), "t.json");
  ASSERT_TRUE(times.ok()) << times.error().message;
  EXPECT_DOUBLE_EQ(times->forward_s.at(0), 40e-6);
  EXPECT_EQ(times->slices, 1u);
  expect_error(
      read_executor_trace(trace_with(Json::array({Json{{"ph", "X"}, {"name", "F0 mb0"}, {"dur", "40"}}})), "t.json"),
      "slice 'F0 mb0' has a 'dur' that is not a duration");
  expect_error(read_executor_trace(Json::array({1, 2}), "t.json"), "not a Chrome trace");
}

TEST(ExecutorTrace, RunDescriptionsOfTheWrongShapeAreOneLine) {
  const Json slice = Json::array({Json{{"ph", "X"}, {"name", "F0 mb0"}, {"dur", 40}}});
  const Json model = to_json(*model_preset("gpt-tiny"));
  const std::pair<Json, const char*> cases[] = {
      {Json::array({1}), "'otherData.loom_run' must be an object"},
      {Json{{"model", model}, {"global_batch", "8"}}, "'global_batch' = \"8\" is not a whole number"},
      {Json{{"model", model}, {"seq_len", 1e300}}, "'seq_len' = 1e+300 is not a whole number"},
      {Json{{"model", model}, {"config", Json{{"tp", 1 << 20}, {"pp", 1 << 20}}}}, "tp·cp·pp·dp = 1099511627776"},
  };
  int i = 0;
  for (const auto& [run, expected] : cases) {
    Json trace = trace_with(slice);
    trace["otherData"] = {{"loom_run", run}};
    const std::string path = write_temp("described" + std::to_string(i++) + ".json", trace.dump());
    expect_error(read_trace_runs({path}, TraceFallback{}), expected);
  }
}

TEST(ExecutorTrace, PassesAndRanksOutsideTheLayoutAreOneLine) {
  Json trace = trace_with(Json::array({Json{{"ph", "X"}, {"name", "F7 mb0"}, {"dur", 40}}}));
  expect_error(read_trace_runs({write_temp("chunk.json", trace.dump())}, TraceFallback{}),
               "pass of chunk 7 but the layout");
  trace = trace_with(Json::array({Json{{"ph", "X"}, {"name", "F0 mb0"}, {"dur", 40}}}));
  // std::stoi threw out_of_range on a rank this long.
  expect_error(read_trace_runs({write_temp("trace.rank99999999999999999999.json", trace.dump())}, TraceFallback{}),
               "is outside the layout's 1 ranks");
}

}  // namespace
}  // namespace loom
