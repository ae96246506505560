// The executor runs the simulator's schedule: under mpirun, each rank's Chrome trace lists its
// forward and backward passes ("F<virtual stage> mb<i>", core/trace_names.h; zero-bubble's W passes
// too) in exactly the order of make_schedule's program for its pipeline stage (core/schedule.h), for
// every schedule it runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/json_io.h"
#include "core/schedule.h"
#include "core/trace_names.h"
#include "run_util.h"

namespace loom::exec::testing {
namespace {

struct Layout {
  const char* name;
  Schedule schedule;
  int pp, vpp, dp, micro_batches;
};

void PrintTo(const Layout& l, std::ostream* os) { *os << l.name; }

// The pass slices of one rank's trace, in the order they began.
std::vector<std::string> traced_passes(const Json& trace) {
  static const std::regex pass(R"([FBW]\d+ mb\d+)");
  std::vector<std::pair<double, std::string>> slices;
  for (const Json& e : trace["traceEvents"]) {
    if (e["ph"] != "X" || e["cat"] != "compute") continue;
    const std::string name = e["name"];
    if (std::regex_match(name, pass)) slices.emplace_back(e["ts"].get<double>(), name);
  }
  std::stable_sort(slices.begin(), slices.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> names;
  for (auto& s : slices) names.push_back(std::move(s.second));
  return names;
}

// The same names from the generator's program for `stage`.
std::vector<std::string> scheduled_passes(const StageProgram& program, int stage, int pp) {
  std::vector<std::string> names;
  for (const PipelineOp& op : program) {
    const int v = virtual_stage(op.chunk, stage, pp);
    names.push_back(op.pass == Pass::kF   ? trace_names::forward(v, op.micro_batch)
                    : op.pass == Pass::kB ? trace_names::backward(v, op.micro_batch)
                                          : trace_names::weight_grad(v, op.micro_batch));
  }
  return names;
}

// The micro model with enough layers for pp·vpp model chunks.
std::string model_with_layers(const std::string& dir, int layers) {
  auto model = read_json_file(test_model("micro"));
  EXPECT_TRUE(model.ok());
  (*model)["layers"] = layers;
  const std::string path = fmt::format("{}/micro_{}_layers.json", dir, layers);
  std::ofstream(path) << model->dump();
  return path;
}

class ExecScheduleOrder : public ::testing::TestWithParam<Layout> {};

TEST_P(ExecScheduleOrder, EveryRankRunsItsStageProgramInOrder) {
  if (!have_mpirun()) GTEST_SKIP() << "built without MPI: multi-rank layouts not run";
  const Layout& l = GetParam();
  const std::string dir = scratch_dir(std::string("schedule_order_") + l.name);
  const std::string data = make_token_file(dir, 20000);
  const int ranks = l.pp * l.dp;
  const ProcessResult r = run_shell(fmt::format(
      "{} --model {} --data {} --steps 1 --global-batch {} --micro-batch 1 --pp {} --vpp {} --dp {} --schedule {} "
      "--threads 1 --trace {}/trace.json",
      loom_run(ranks), model_with_layers(dir, 2 * l.pp * l.vpp), data, l.micro_batches * l.dp, l.pp, l.vpp, l.dp,
      to_string(l.schedule), dir));
  ASSERT_EQ(r.exit_code, 0) << r.err;

  auto programs = make_schedule(l.schedule, l.pp, l.micro_batches, l.vpp);
  ASSERT_TRUE(programs.ok()) << programs.error().message;
  for (int rank = 0; rank < ranks; ++rank) {
    const int stage = rank / l.dp;  // DP before PP in the rank order (no TP here)
    auto trace = read_json_file(fmt::format("{}/trace.rank{}.json", dir, rank));
    ASSERT_TRUE(trace.ok()) << trace.error().message;
    const std::vector<std::string> expected = scheduled_passes((*programs)[stage], stage, l.pp);
    const int passes = l.schedule == Schedule::kZeroBubble ? 3 : 2;
    ASSERT_EQ(expected.size(), static_cast<std::size_t>(passes * l.micro_batches * l.vpp));
    EXPECT_EQ(fmt::format("{}", fmt::join(traced_passes(*trace), " ")), fmt::format("{}", fmt::join(expected, " ")))
        << "rank " << rank << ", stage " << stage;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, ExecScheduleOrder,
                         ::testing::Values(Layout{"PP2_GPipe", Schedule::kGPipe, 2, 1, 1, 3},
                                           Layout{"PP2_1F1B", Schedule::k1F1B, 2, 1, 1, 4},
                                           Layout{"PP4_1F1B", Schedule::k1F1B, 4, 1, 1, 6},
                                           Layout{"PP4_GPipe", Schedule::kGPipe, 4, 1, 1, 2},
                                           Layout{"PP2xDP2_1F1B", Schedule::k1F1B, 2, 1, 2, 3},
                                           Layout{"PP2_VPP2_Interleaved", Schedule::kInterleaved, 2, 2, 1, 4},
                                           Layout{"PP4_VPP2_Interleaved", Schedule::kInterleaved, 4, 2, 1, 8},
                                           Layout{"PP2_ZB", Schedule::kZeroBubble, 2, 1, 1, 4},
                                           Layout{"PP4_ZB", Schedule::kZeroBubble, 4, 1, 1, 6},
                                           Layout{"PP2xDP2_ZB", Schedule::kZeroBubble, 2, 1, 2, 3}),
                         [](const auto& info) { return std::string(info.param.name); });

// Zero-bubble's W passes hold the weight gradients B deferred: within each W slice of a rank's trace, the
// weight-gradient GEMM of every linear layer of its stage (2 layers here) and, on the last stage, the LM
// head's; nothing else.
TEST(ExecZeroBubble, EachWPassRunsItsStagesWeightGradients) {
  if (!have_mpirun()) GTEST_SKIP() << "built without MPI: multi-rank layouts not run";
  const std::string dir = scratch_dir("zero_bubble_w");
  const std::string data = make_token_file(dir, 20000);
  const ProcessResult r = run_shell(
      fmt::format("{} --model {} --data {} --steps 1 --global-batch 3 --micro-batch 1 --pp 2 --schedule zb --threads 1 "
                  "--trace {}/trace.json",
                  loom_run(2), model_with_layers(dir, 4), data, dir));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  static const std::regex w_pass(R"(W\d+ mb\d+)");
  for (int stage = 0; stage < 2; ++stage) {
    auto trace = read_json_file(fmt::format("{}/trace.rank{}.json", dir, stage));
    ASSERT_TRUE(trace.ok()) << trace.error().message;
    std::vector<std::pair<double, double>> passes;  // [begin, end] of each W slice
    for (const Json& e : (*trace)["traceEvents"])
      if (e["ph"] == "X" && e["cat"] == "compute" && std::regex_match(e["name"].get<std::string>(), w_pass))
        passes.emplace_back(e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>());
    ASSERT_EQ(passes.size(), 3u) << "stage " << stage;
    for (const auto& [begin, end] : passes) {
      std::map<std::string, int> ops;
      for (const Json& e : (*trace)["traceEvents"]) {
        if (e["ph"] != "X" || e["cat"] != "op") continue;
        const double ts = e["ts"].get<double>();
        if (ts >= begin && ts + e["dur"].get<double>() <= end) ops[e["name"].get<std::string>()]++;
      }
      std::map<std::string, int> expected{{"qkv_bwd", 2}, {"attn_out_bwd", 2}, {"mlp_up_bwd", 2}, {"mlp_down_bwd", 2}};
      if (stage == 1) expected["lm_head_bwd"] = 1;
      EXPECT_EQ(ops, expected) << "stage " << stage << ", W pass at " << begin;
    }
  }
}

}  // namespace
}  // namespace loom::exec::testing
