// The CPU backend's threads change how fast a step runs, never what it computes: its loops run in fixed
// chunks whose partials are added in chunk order, attention runs one task per sequence and key/value
// group, and GEMMs split rows and columns, not the reduction (exec/cpu/cpu_loops.h). A model big enough
// that every loop goes parallel and attention spans several query blocks trains the same losses and
// gradient norms, bit for bit, on one thread and on two.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <fstream>

#include "core/json_io.h"
#include "run_util.h"

namespace loom::exec::testing {
namespace {

TEST(ExecThreads, LossesAndGradientNormsAreTheSameOnOneThreadAndOnTwo) {
  const std::string dir = scratch_dir("threads");
  const std::string data = make_token_file(dir, 20000);
  // seq 160 > the 128-row query block; 2·160 tokens × ffn 512 values ≫ the 64 Ki a loop needs to go parallel.
  std::ofstream(dir + "/model.json") << R"({"name": "threads", "layers": 2, "hidden": 128, "heads": 4,
      "ffn_hidden": 512, "vocab": 256, "seq_len": 160, "dropout": true})";
  std::vector<Json> logs[2];
  for (int threads : {1, 2}) {
    const std::string log = fmt::format("{}/t{}.jsonl", dir, threads);
    const ProcessResult r =
        run_shell(fmt::format("{} --model {}/model.json --data {} --steps 3 --global-batch 4 "
                              "--micro-batch 2 --dropout 0.1 --threads {} --log {}",
                              loom_run(1), dir, data, threads, log));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    logs[threads - 1] = read_jsonl(log);
  }
  int steps = 0;
  for (std::size_t i = 0; i < logs[0].size() && i < logs[1].size(); ++i) {
    if (!logs[0][i].contains("loss")) continue;
    ++steps;
    EXPECT_EQ(logs[0][i]["loss"].get<double>(), logs[1][i]["loss"].get<double>()) << "step " << steps;
    EXPECT_EQ(logs[0][i]["grad_norm"].get<double>(), logs[1][i]["grad_norm"].get<double>()) << "step " << steps;
  }
  EXPECT_EQ(steps, 3);
}

}  // namespace
}  // namespace loom::exec::testing
