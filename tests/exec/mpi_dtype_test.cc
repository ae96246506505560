// The bf16 MPI collectives under mpirun (2 and 3 ranks): mpi_dtype_helper checks each against the fp32
// collective rounded to bf16 and fails on any mismatch. Skipped, visibly, in builds without MPI.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "run_util.h"

namespace loom::exec::testing {
namespace {

void run_helper(int ranks) {
  if (!have_mpirun()) GTEST_SKIP() << "built without MPI: bf16 collectives not run";
  const std::string command = fmt::format(
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "
      "OMPI_MCA_orte_tmpdir_base={} {} --oversubscribe -np {} {}",
      scratch_dir("ompi-dtype"), LOOM_MPIEXEC, ranks, LOOM_MPI_DTYPE_HELPER);
  const ProcessResult r = run_shell(command);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find(" 0 mismatches"), std::string::npos) << r.out << r.err;
}

TEST(MpiDtype, Bf16CollectivesOnTwoRanksEqualTheFp32ResultRounded) { run_helper(2); }

// Three ranks: values whose sums are exact (see the helper), so the test checks the plumbing over more ranks.
TEST(MpiDtype, Bf16CollectivesOnThreeRanksEqualTheFp32ResultRounded) { run_helper(3); }

}  // namespace
}  // namespace loom::exec::testing
