// How `loom run` carries its messages (exec/comm_path.h): with --backend cuda over several ranks the
// default is NCCL when the build has it and no two ranks share a GPU, host-staged otherwise; --comm
// direct there is NCCL, refused in one line without it in the build or with ranks sharing a GPU. The
// CPU backends and a world of one read their buffers directly. A pure function: no MPI, no GPU.
#include <gtest/gtest.h>

#include "exec/comm_path.h"

namespace loom::exec {
namespace {

CommRequest cuda_request(const std::string& comm, int world, int sharing, bool nccl) {
  return {comm, "cuda", world, sharing, nccl};
}

TEST(CommPath, CudaDefaultsToNcclWhenEveryRankHasItsOwnGpuAndTheBuildHasIt) {
  const auto path = choose_comm_path(cuda_request("", 8, 1, true));
  ASSERT_TRUE(path) << path.error().message;
  EXPECT_EQ(*path, CommPath::kNccl);
  EXPECT_EQ(describe(*path), "messages over NCCL, GPU to GPU");
}

TEST(CommPath, CudaDefaultsToHostStagingWhenRanksShareAGpuOrTheBuildHasNoNccl) {
  EXPECT_EQ(*choose_comm_path(cuda_request("", 4, 4, true)), CommPath::kHostStaged);  // 4 ranks on one GPU
  EXPECT_EQ(*choose_comm_path(cuda_request("", 3, 2, true)), CommPath::kHostStaged);  // 3 ranks on 2 GPUs
  EXPECT_EQ(*choose_comm_path(cuda_request("", 8, 1, false)), CommPath::kHostStaged);
  EXPECT_EQ(describe(CommPath::kHostStaged), "messages staged through host memory");
}

TEST(CommPath, CudaDirectIsNccl) { EXPECT_EQ(*choose_comm_path(cuda_request("direct", 2, 1, true)), CommPath::kNccl); }

TEST(CommPath, CudaDirectWithoutNcclInTheBuildIsRefusedInOneLine) {
  const auto path = choose_comm_path(cuda_request("direct", 2, 1, false));
  ASSERT_FALSE(path);
  EXPECT_FALSE(path.error().internal());
  EXPECT_EQ(path.error().message,
            "--comm direct with --backend cuda over 2 ranks needs the NCCL communicator, which is not in this build "
            "(built without NCCL): use --comm host-staged");
  EXPECT_EQ(path.error().message.find('\n'), std::string::npos);
}

TEST(CommPath, CudaDirectWithRanksSharingAGpuIsRefusedInOneLine) {
  const auto path = choose_comm_path(cuda_request("direct", 4, 2, true));
  ASSERT_FALSE(path);
  EXPECT_FALSE(path.error().internal());
  EXPECT_EQ(path.error().message,
            "--comm direct with --backend cuda: 2 ranks drive one GPU, and NCCL refuses two ranks on one device: "
            "launch one rank per GPU, or use --comm host-staged");
}

TEST(CommPath, HostStagedIsAlwaysGranted) {
  for (const char* backend : {"cpu", "cpu-bf16", "cuda"})
    for (int sharing : {1, 4})
      for (bool nccl : {false, true})
        EXPECT_EQ(*choose_comm_path({"host-staged", backend, 4, sharing, nccl}), CommPath::kHostStaged);
}

TEST(CommPath, CpuBackendsAndAWorldOfOneAreDirect) {
  for (const char* backend : {"cpu", "cpu-bf16"})
    for (const char* comm : {"", "direct"})
      EXPECT_EQ(*choose_comm_path({comm, backend, 4, 1, true}), CommPath::kDirect);
  // One rank: every group is a group of one, which copies through the backend; nothing is refused.
  for (const char* comm : {"", "direct"})
    EXPECT_EQ(*choose_comm_path(cuda_request(comm, 1, 1, false)), CommPath::kDirect);
  EXPECT_EQ(describe(CommPath::kDirect), "");
}

TEST(CommPath, UnknownCommIsRefusedBeforeAnythingElse) {
  const auto path = choose_comm_path(cuda_request("nccl", 2, 2, false));
  ASSERT_FALSE(path);
  EXPECT_EQ(path.error().message, "--comm: 'nccl' is neither 'direct' nor 'host-staged'");
}

// The decision before the devices are known (ranks_sharing 1) refuses only what needs no device, and
// never refuses what the decision with the devices grants.
TEST(CommPath, TheEarlyCheckRefusesOnlyWhatTheFinalOneRefuses) {
  for (const char* comm : {"", "direct", "host-staged"})
    for (const char* backend : {"cpu", "cpu-bf16", "cuda"})
      for (int world : {1, 2, 8})
        for (bool nccl : {false, true}) {
          const bool early = choose_comm_path({comm, backend, world, 1, nccl}).ok();
          for (int sharing : {1, 2, 8})
            if (choose_comm_path({comm, backend, world, sharing, nccl}).ok()) {
              EXPECT_TRUE(early) << comm << " " << backend << " " << world;
            }
        }
}

}  // namespace
}  // namespace loom::exec
