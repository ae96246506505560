// How `loom run` carries its messages (`--comm`), decided from the request, the backend, the ranks and
// what this build has: the MPI communicator on host memory (the CPU backends), host-staged copies around
// MPI (a GPU's buffers when ranks outnumber GPUs), or NCCL from GPU to GPU (one rank per GPU). A pure
// function, so the defaults and refusals are tested without MPI or a GPU (tests/exec/comm_path_test.cc).
#pragma once

#include <string>

#include "core/result.h"

namespace loom::exec {

enum class CommPath {
  kDirect,      // the communicator reads the backend's buffers: MPI on host memory, or a world of one
  kHostStaged,  // every message copied through host memory around MPI (exec/staged_communicator.h)
  kNccl,        // NCCL communicators on the GPU's buffers (exec/nccl/nccl_communicator.h)
};

struct CommRequest {
  std::string comm;     // --comm: "direct", "host-staged", or empty for the default
  std::string backend;  // --backend: "cpu", "cpu-bf16", "cuda"
  int world_size = 1;
  // The most ranks driving one GPU on any node (counted by the GPU's UUID, the maximum over the world so
  // that every rank decides alike). 1 when the devices are not known yet: the checks that need no device
  // then run early, before the backend starts.
  int ranks_sharing_device = 1;
  bool nccl_built = false;  // this build has the NCCL communicator (has_nccl() in process_groups.h)
};

// --backend cuda over several ranks: --comm direct is NCCL, refused (one line, bad input) without NCCL
// in the build or when ranks share a GPU (NCCL refuses two ranks on one device); the default is NCCL
// when the build has it and every rank has a GPU of its own, host-staged otherwise. Any other backend,
// or one rank: direct by default, host-staged on request (the CPU's rehearsal of the GPU path).
Result<CommPath> choose_comm_path(const CommRequest& request);

// What the run's first line says about it ("" for direct).
std::string describe(CommPath path);

}  // namespace loom::exec
