// Which GPU each rank of a node drives (exec/device_placement.h): one rank per GPU takes the GPU of
// its node-local rank; a launcher that hands each rank one visible device makes it device 0; more
// ranks than GPUs share them round-robin, and the count of ranks sharing is exact.
#include <gtest/gtest.h>

#include <vector>

#include "exec/device_placement.h"

namespace loom::exec {
namespace {

TEST(DevicePlacement, OneRankPerGpuTakesTheGpuOfItsLocalRank) {
  for (int r = 0; r < 8; ++r) {
    const auto p = place_rank_on_device(r, 8, 8);
    ASSERT_TRUE(p) << p.error().message;
    EXPECT_EQ(p->device, r);
    EXPECT_EQ(p->ranks_sharing, 1);
  }
}

TEST(DevicePlacement, OneVisibleDevicePerRankIsDeviceZero) {
  // srun --gpus-per-task=1: CUDA_VISIBLE_DEVICES holds this rank's GPU alone.
  for (int r = 0; r < 4; ++r) EXPECT_EQ(place_rank_on_device(r, 4, 1)->device, 0);
}

TEST(DevicePlacement, MoreRanksThanGpusShareThemRoundRobin) {
  std::vector<int> per_device(3, 0);
  for (int r = 0; r < 8; ++r) {
    const auto p = place_rank_on_device(r, 8, 3);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->device, r % 3);
    ++per_device[p->device];
  }
  EXPECT_EQ(per_device, (std::vector<int>{3, 3, 2}));
  for (int r = 0; r < 8; ++r) {
    const auto p = place_rank_on_device(r, 8, 3);
    EXPECT_EQ(p->ranks_sharing, per_device[p->device]) << "rank " << r;
  }
  EXPECT_EQ(place_rank_on_device(3, 4, 1)->ranks_sharing, 4);  // four test ranks on one lent GPU
}

TEST(DevicePlacement, NoVisibleDeviceIsBadInputNamingTheVariable) {
  const auto p = place_rank_on_device(0, 1, 0);
  ASSERT_FALSE(p);
  EXPECT_FALSE(p.error().internal());
  EXPECT_NE(p.error().message.find("CUDA_VISIBLE_DEVICES"), std::string::npos);
  EXPECT_FALSE(place_rank_on_device(2, 2, 1));  // a local rank outside its node: Loom's own bug
  EXPECT_TRUE(place_rank_on_device(2, 2, 1).error().internal());
}

// The UUID goes into a cost file's provenance (JSON, UTF-8) and the ranks' sharing count: nvidia-smi's text,
// never its raw bytes (bytes past 0x7F are not UTF-8, and `loom profile --backend cuda` once failed on one).
TEST(DevicePlacement, GpuUuidIsNvidiaSmisText) {
  const unsigned char bytes[16] = {0xb8, 0x1f, 0x00, 0x7a, 0x12, 0x34, 0xab, 0xcd,
                                   0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xff, 0x10};
  EXPECT_EQ(gpu_uuid_text(bytes), "GPU-b81f007a-1234-abcd-ef01-23456789ff10");
}

}  // namespace
}  // namespace loom::exec
