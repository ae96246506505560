// The peak behind `loom run`'s MFU (exec/device_peak.h): a CUDA device name is matched to the SXM preset
// of its chip, whose figure is the datasheet's; cards the presets do not describe get none.
#include <gtest/gtest.h>

#include "core/presets.h"
#include "exec/device_peak.h"

namespace loom::exec {
namespace {

double preset_peak(const char* preset) { return cluster_preset(preset)->device.peak_flops; }

TEST(DevicePeak, SxmBoardsTakeTheirPresetsPeak) {
  EXPECT_EQ(preset_peak_flops("NVIDIA H100 80GB HBM3"), preset_peak("dgx-h100"));
  EXPECT_EQ(preset_peak_flops("NVIDIA H200"), preset_peak("dgx-h200"));  // as seen on a lent H200
  EXPECT_EQ(preset_peak_flops("NVIDIA A100-SXM4-80GB"), preset_peak("dgx-a100-80gb"));
  EXPECT_EQ(preset_peak_flops("NVIDIA B200"), preset_peak("dgx-b200"));
  EXPECT_DOUBLE_EQ(preset_peak_flops("NVIDIA H100 80GB HBM3"), 989.4e12);  // H100 SXM5 dense bf16
}

TEST(DevicePeak, OtherBoardsAndGpusHaveNone) {
  for (const char* name :
       {"NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA A100-PCIE-40GB", "NVIDIA GeForce RTX 4090", "NVIDIA L40S", ""})
    EXPECT_EQ(preset_peak_flops(name), 0.0) << name;
}

}  // namespace
}  // namespace loom::exec
