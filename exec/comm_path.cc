#include "exec/comm_path.h"

#include <fmt/format.h>

namespace loom::exec {

Result<CommPath> choose_comm_path(const CommRequest& r) {
  if (!r.comm.empty() && r.comm != "direct" && r.comm != "host-staged")
    return make_error(fmt::format("--comm: '{}' is neither 'direct' nor 'host-staged'", r.comm));
  if (r.comm == "host-staged") return CommPath::kHostStaged;
  // The CPU backends' buffers are host memory, which MPI reads; a world of one has groups of one.
  if (r.backend != "cuda" || r.world_size == 1) return CommPath::kDirect;
  const bool shared = r.ranks_sharing_device > 1;
  if (r.comm.empty()) return r.nccl_built && !shared ? CommPath::kNccl : CommPath::kHostStaged;
  if (!r.nccl_built)
    return make_error(fmt::format(
        "--comm direct with --backend cuda over {} ranks needs the NCCL communicator, which is not in this build "
        "(built without NCCL): use --comm host-staged",
        r.world_size));
  if (shared)
    return make_error(fmt::format(
        "--comm direct with --backend cuda: {} ranks drive one GPU, and NCCL refuses two ranks on one device: "
        "launch one rank per GPU, or use --comm host-staged",
        r.ranks_sharing_device));
  return CommPath::kNccl;
}

std::string describe(CommPath path) {
  switch (path) {
    case CommPath::kDirect: return "";
    case CommPath::kHostStaged: return "messages staged through host memory";
    case CommPath::kNccl: return "messages over NCCL, GPU to GPU";
  }
  return "";
}

}  // namespace loom::exec
