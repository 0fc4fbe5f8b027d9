// The MPI backends take allreduce and broadcast out of place (input and output in different
// buffers): the shared check of tests/runtime/out_of_place_check.h, on backends "mpi" (MPI_IN_PLACE
// only when the call is in place) and "mpi_algorithms", made by name through createBackend, one
// rank per mpirun process. Run under mpirun (tests/mpi/CMakeLists.txt); every rank runs every
// test, and mpirun fails the run when any rank fails.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "backend/factory.h"
#include "connector/mpi_environment.h"
#include "out_of_place_check.h"

namespace chorus {
namespace {

class MpiOutOfPlace : public ::testing::TestWithParam<std::string> {};

TEST_P(MpiOutOfPlace, OutputGetsTheResultAndInputIsUntouched) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  backend::BackendOptions options;
  options.name = GetParam();
  options.rank = rank;
  options.size = size;
  for (int member = 0; member < size; ++member) options.worldRanks.push_back(member);
  options.scope = "out-of-place-" + GetParam();
  options.deadline = Deadline::after(std::chrono::seconds(60));
  auto engine = backend::createBackend(options);
  testing::checkOutOfPlace(*engine, rank, size);
  engine->close();
}

INSTANTIATE_TEST_SUITE_P(Backends,
                         MpiOutOfPlace,
                         ::testing::Values("mpi", "mpi_algorithms"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace chorus

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  chorus::connector::ensureMpiInitialized();
  return RUN_ALL_TESTS();
}
