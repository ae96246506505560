#include "cli/version.h"

#include <fmt/format.h>

#include <string>
#include <vector>

namespace loom::cli {

std::string version_string() {
  std::vector<std::string> backends = {"cpu"};
#ifdef LOOM_WITH_MPI
  backends.push_back("mpi");
#endif
#ifdef LOOM_WITH_CUDA
  backends.push_back("cuda");
#endif
#ifdef LOOM_WITH_NCCL
  backends.push_back("nccl");
#endif
#ifdef LOOM_WITH_GUI
  backends.push_back("gui");
#endif
  return fmt::format("loom {} (backends: {})", LOOM_VERSION, fmt::join(backends, ", "));
}

}  // namespace loom::cli
