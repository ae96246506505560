#include "exec/device_peak.h"

#include <cctype>
#include <string>
#include <utility>

#include "core/presets.h"

namespace loom::exec {

std::string preset_for_device(std::string_view device_name) {
  // The SXM boards of the presets; a PCIe or NVL board of the same chip runs lower clocks ("NVIDIA H100
  // PCIe", "NVIDIA A100-PCIE-40GB").
  std::string upper(device_name);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (std::string_view other : {"PCIE", "NVL"})
    if (upper.find(other) != std::string::npos) return "";
  // CUDA names them "NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "NVIDIA B200".
  for (const auto& [chip, preset] : {std::pair<std::string_view, const char*>{"H100", "dgx-h100"},
                                     {"H200", "dgx-h200"},
                                     {"A100", "dgx-a100-80gb"},
                                     {"B200", "dgx-b200"}})
    if (upper.find(chip) != std::string::npos) return preset;
  return "";
}

double preset_peak_flops(std::string_view device_name) {
  const std::string preset = preset_for_device(device_name);
  if (preset.empty()) return 0;
  auto cluster = cluster_preset(preset);
  return cluster ? cluster->device.peak_flops : 0;
}

}  // namespace loom::exec
