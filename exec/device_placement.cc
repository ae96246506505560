#include "exec/device_placement.h"

#include <fmt/format.h>

namespace loom::exec {

Result<DevicePlacement> place_rank_on_device(int local_rank, int local_size, int device_count) {
  if (device_count < 1) return make_error("no CUDA device is visible to this rank (check CUDA_VISIBLE_DEVICES)");
  if (local_size < 1 || local_rank < 0 || local_rank >= local_size)
    return make_internal_error(fmt::format("node-local rank {} of {} ranks", local_rank, local_size));
  DevicePlacement p;
  p.device = local_rank % device_count;
  p.ranks_sharing = local_size / device_count + (p.device < local_size % device_count ? 1 : 0);
  return p;
}

std::string gpu_uuid_text(const unsigned char (&bytes)[16]) {
  std::string text = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    text += fmt::format("{:02x}", bytes[i]);
  }
  return text;
}

}  // namespace loom::exec
