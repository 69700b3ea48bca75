// main for the MPI tests: MPI around GoogleTest. Only rank 0 prints test progress; every rank
// exits with the worst result of all, and rank 0 prints the largest errors seen by any rank
// (the figures the MPI tests are judged by).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "mpi_case.h"

namespace {

// Other ranks print only their failures, tagged with the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::printf("[rank %d] %s:%d: Failure\n%s\n", rank_,
                result.file_name() != nullptr ? result.file_name() : "?", result.line_number(),
                result.summary());
    std::fflush(stdout);
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ::testing::InitGoogleTest(&argc, argv);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  int result = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);

  const auto& f = streamattn::mpi_testing::RecordedFigures();
  double mine[4] = {f.single_out, f.single_lse, f.oracle_out, f.oracle_lse}, all[4];
  int cases[2] = {f.cases, f.bitwise_equal_to_single}, all_cases[2];
  MPI_Reduce(mine, all, 4, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(cases, all_cases, 2, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf(
        "streamattn_mpi figures, %d rank(s), %d f32 cases checked (by the rank that "
        "checked most): max relative error vs single-process out %.3g lse %.3g; vs oracle out %.3g "
        "lse %.3g; equal to single-process in %d cases\n",
        size, all_cases[0], all[0], all[1], all[2], all[3], all_cases[1]);
  }
  MPI_Finalize();
  return worst;
}
