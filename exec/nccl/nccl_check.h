// NCCL_CHECK(call): an NCCL call that fails is reported in one line — the file and line, the call,
// NCCL's message for the status and its last error text (ncclGetLastError) — and the job is aborted
// with status 1, an internal failure: a collective that failed on one rank leaves its peers waiting, so
// there is no safe way to continue (as MPI_CHECK in exec/mpi/mpi_communicator.h). While the watchdog is
// abandoning the communicators (ncclCommAbort) the calls that fail because of it are not reported: the
// watchdog ends the job with its own status and line.
#pragma once

#include <nccl.h>

namespace loom::exec {

[[noreturn]] void nccl_fail(ncclResult_t status, const char* call, const char* file, int line);

}  // namespace loom::exec

#define NCCL_CHECK(call)                                                                                         \
  do {                                                                                                           \
    const ncclResult_t loom_nccl_status_ = (call);                                                               \
    if (loom_nccl_status_ != ncclSuccess) ::loom::exec::nccl_fail(loom_nccl_status_, #call, __FILE__, __LINE__); \
  } while (0)
