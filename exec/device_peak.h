// The dense bf16 peak of the GPU a rank drives, for the MFU `loom run` logs: the figure of the cluster
// preset whose GPU this is (profiles/*.json, each with its datasheet source), matched by the CUDA
// device's name. 0 where none matches (a PCIe or NVL card, whose clocks and peaks differ from the SXM
// presets', another GPU, the CPU): the log then leaves MFU out rather than guess a peak.
#pragma once

#include <string>
#include <string_view>

namespace loom::exec {

// The cluster preset whose GPU this CUDA device is ("dgx-h100" for "NVIDIA H100 80GB HBM3"), or "".
std::string preset_for_device(std::string_view device_name);
double preset_peak_flops(std::string_view device_name);

}  // namespace loom::exec
