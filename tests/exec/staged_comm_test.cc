// Host-staged communication (exec/staged_communicator.h), the path several ranks on one GPU take: on
// the CPU its copies are memcpy, so a run with --comm host-staged must give the very losses of the same
// run with --comm direct — bit for bit, since the same values are reduced in the same order. Every
// communicator operation the trainer uses is on some layout here: all-reduce (TP, DP), reduce-scatter
// and all-gather (SP, ZeRO-1/2/3, HSDP), the asynchronous ones (ZeRO-3 prefetch, bucketed gradients),
// point-to-point (pipelines, interleaved, context parallelism's ring) and the all-to-all (expert
// parallelism, Ulysses), in fp32 and in the
// bf16 a GPU's messages carry (cpu-bf16). Also: the pipelines and the ring pair their messages by order
// alone, as NCCL does; and what --comm direct with --backend cuda needs.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "exec/process_groups.h"
#include "run_util.h"

namespace loom::exec::testing {
namespace {

using Layout = RunLayout;

int steps() { return layout_steps(4); }  // LOOM_LAYOUT_STEPS where set (run_util.h)

std::vector<double> train(const Layout& layout, const std::string& backend, const std::string& comm,
                          std::string* out = nullptr, const std::string& env = "") {
  static const std::string data = make_token_file(scratch_dir("staged_data"), 20000);
  const std::string log =
      fmt::format("{}/{}_{}_{}{}.jsonl", scratch_dir("staged"), layout.name, backend, comm, env.empty() ? "" : "_env");
  const ProcessResult r = run_shell(fmt::format(
      "{}{} --model {} --data {} --steps {} --global-batch 8 --micro-batch 1 --threads 1 --lr 3e-3 "
      "--warmup 2 --backend {} --comm {} {} --log {}",
      env, loom_run(layout.ranks), test_model(layout.model), data, steps(), backend, comm, layout.flags, log));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (out != nullptr) *out = r.out;
  return losses(log);
}

class StagedComm : public ::testing::TestWithParam<Layout> {};

TEST_P(StagedComm, GivesTheDirectRunsLossesBitForBit) {
  if (!have_mpirun()) GTEST_SKIP() << "built without MPI: multi-rank layouts not run";
  for (const char* backend : {"cpu", "cpu-bf16"}) {
    SCOPED_TRACE(backend);
    std::string banner;
    const std::vector<double> direct = train(GetParam(), backend, "direct");
    const std::vector<double> staged = train(GetParam(), backend, "host-staged", &banner);
    ASSERT_EQ(direct.size(), static_cast<std::size_t>(steps()));
    EXPECT_EQ(staged, direct);
    EXPECT_NE(banner.find("messages staged through host memory"), std::string::npos) << banner;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, StagedComm,
                         ::testing::Values(Layout{"TP2xPP2xDP2_ZeRO1_SP", 8, "--tp 2 --pp 2 --dp 2 --zero 1 --sp on"},
                                           Layout{"DP2_ZeRO2", 2, "--dp 2 --zero 2"},
                                           Layout{"TP2xDP2_ZeRO3", 4, "--tp 2 --dp 2 --zero 3"},
                                           Layout{"DP4_HSDP2", 4, "--dp 4 --zero 3 --shard-group 2"},
                                           Layout{"PP2_VPP2_Interleaved", 2, "--pp 2 --vpp 2 --schedule interleaved"},
                                           Layout{"EP2", 2, "--dp 2 --ep 2", "micro_moe"},
                                           Layout{"CP2_Ring_DP2", 4, "--cp 2 --dp 2 --zero 1"},
                                           Layout{"CP2_A2A", 2, "--cp 2 --cp-comm a2a"}),
                         [](const auto& info) { return std::string(info.param.name); });

// NCCL pairs a send with a receive by order, not by tag (exec/nccl/nccl_communicator.h). With
// LOOM_TEST_P2P_BY_ORDER the MPI communicator gives every message one tag, so MPI pairs them by order
// too: the pipelines and context parallelism's ring must still give the tagged run's losses bit for bit
// (a message paired with the wrong receive would change them, or fail on its size).
class MessagesByOrder : public ::testing::TestWithParam<Layout> {};

TEST_P(MessagesByOrder, GiveTheTaggedRunsLossesBitForBit) {
  if (!have_mpirun()) GTEST_SKIP() << "built without MPI: multi-rank layouts not run";
  const std::vector<double> tagged = train(GetParam(), "cpu", "direct");
  const std::vector<double> by_order = train(GetParam(), "cpu", "direct", nullptr, "LOOM_TEST_P2P_BY_ORDER=1 ");
  ASSERT_EQ(tagged.size(), static_cast<std::size_t>(steps()));
  EXPECT_EQ(by_order, tagged);
}

INSTANTIATE_TEST_SUITE_P(Layouts, MessagesByOrder,
                         ::testing::Values(Layout{"PP2_GPipe", 2, "--pp 2 --schedule gpipe"},
                                           Layout{"PP4_1F1B", 4, "--pp 4"},
                                           Layout{"PP2_VPP2_Interleaved", 2, "--pp 2 --vpp 2 --schedule interleaved"},
                                           Layout{"PP4_Interleaved", 4, "--pp 4 --schedule interleaved"},
                                           Layout{"CP2_Ring", 2, "--cp 2"}, Layout{"CP4_Ring", 4, "--cp 4"}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(StagedComm, BadCommIsOneLineAndExit2) {
  const std::string data = make_token_file(scratch_dir("staged_bad"), 2000);
  const ProcessResult r = run_shell(fmt::format("{} --model {} --data {} --steps 1 --global-batch 2 --comm nccl",
                                                loom_run(1), test_model("micro"), data));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(count_lines_starting(r.err, "loom:"), 1) << r.err;
  EXPECT_NE(r.err.find("--comm: 'nccl' is neither 'direct' nor 'host-staged'"), std::string::npos) << r.err;
}

// A GPU's buffers cannot go to MPI directly: --comm direct with --backend cuda over several ranks is NCCL,
// refused in one line without NCCL in the build (checked before the backend starts, so on any machine),
// and with two ranks on one GPU. Here, with NCCL built but no GPU, the backend's own line comes first;
// with a GPU per rank the run is NCCL's (exec_nccl_comm_test).
TEST(StagedComm, DirectCudaOverSeveralRanksNeedsNcclAndAGpuPerRank) {
  if (!have_mpirun()) GTEST_SKIP() << "built without MPI: multi-rank layouts not run";
  const std::string data = make_token_file(scratch_dir("staged_cuda"), 2000);
  const ProcessResult r =
      run_shell(fmt::format("{} --model {} --data {} --steps 1 --global-batch 2 --dp 2 --backend cuda --comm direct",
                            loom_run(2), test_model("micro"), data));
  if (r.exit_code == 0 && has_nccl()) GTEST_SKIP() << "two GPUs here: the run went over NCCL";
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(count_lines_starting(r.err, "loom:"), 1) << r.err;
  if (!has_nccl()) {
    EXPECT_NE(r.err.find("--comm direct with --backend cuda over 2 ranks needs the NCCL communicator, which is not "
                         "in this build (built without NCCL): use --comm host-staged"),
              std::string::npos)
        << r.err;
  } else if (r.err.find("no CUDA device") == std::string::npos) {
    EXPECT_NE(r.err.find("--comm direct with --backend cuda: 2 ranks drive one GPU, and NCCL refuses two ranks on one "
                         "device: launch one rank per GPU, or use --comm host-staged"),
              std::string::npos)
        << r.err;
  }
}

}  // namespace
}  // namespace loom::exec::testing
