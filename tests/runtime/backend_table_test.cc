// The backend table's error paths (backend/factory.h): what createBackend says for a name it does
// not know, a backend that cannot serve the communicator, and a job without the store a backend
// needs. No connection is made: each case fails before any transport is created.
#include <gtest/gtest.h>

#include <string>

#include "backend/factory.h"
#include "backend/nccl/nccl_setup.h"
#include "chorus/error.h"
#include "transport/mpi/bootstrap.h"
#include "transport/registry.h"

namespace chorus {
namespace {

backend::BackendOptions twoRanks(const std::string& name) {
  backend::BackendOptions options;
  options.name = name;
  options.size = 2;
  options.worldRanks = {0, 1};
  return options;
}

TEST(BackendTable, AnUnknownNameListsTheBackendsOfThisBuild) {
  try {
    backend::createBackend(twoRanks("carrier-pigeon"));
    FAIL() << "an unknown backend was accepted";
  } catch (const InvalidArgumentError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("unknown backend 'carrier-pigeon'"), std::string::npos) << message;
    for (const char* name : {"auto", "void", "shm", "hierarchical", "tcp"})
      EXPECT_NE(message.find(name), std::string::npos) << name << " missing from: " << message;
  }
}

TEST(BackendTable, AnUnknownNameIsAnErrorEvenForOneRank) {
  backend::BackendOptions options = twoRanks("carrier-pigeon");
  options.size = 1;
  EXPECT_THROW(backend::createBackend(options), InvalidArgumentError);
}

TEST(BackendTable, VoidServesOnlyOneRank) {
  try {
    backend::createBackend(twoRanks("void"));
    FAIL() << "backend void was made for 2 ranks";
  } catch (const InvalidArgumentError& error) {
    EXPECT_NE(std::string(error.what()).find("only communicators of size 1"), std::string::npos)
        << error.what();
  }
}

TEST(BackendTable, StoreBackendsSayTheJobHasNoStore) {
  for (const char* name : {"tcp", "shm", "hierarchical"}) {
    try {
      backend::createBackend(twoRanks(name));
      FAIL() << "backend " << name << " was made without a store";
    } catch (const UnsupportedError& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find(std::string("backend '") + name + "' needs a rendezvous store"),
                std::string::npos)
          << message;
    }
  }
}

// A build without MPI (the sanitizer builds, scripts/sanitize.sh) still knows the MPI names, and
// says how to get them rather than that they do not exist.
TEST(BackendTable, MpiNamesInABuildWithoutMpiSayHowToGetThem) {
  if (transport::mpi::available())
    GTEST_SKIP() << "this build has MPI; tests/mpi/ runs the MPI backends and transport";
  for (const char* name : {"mpi", "mpi_algorithms"}) {
    try {
      backend::createBackend(twoRanks(name));
      FAIL() << "backend " << name << " was made in a build without MPI";
    } catch (const UnsupportedError& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find(std::string("backend '") + name + "' is not in this build"),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("-DCHORUS_WITH_MPI=ON"), std::string::npos) << message;
    }
  }
  transport::TransportOptions options;
  options.size = 2;
  try {
    transport::createTransport("mpi", options);
    FAIL() << "the MPI transport was made in a build without MPI";
  } catch (const UnsupportedError& error) {
    EXPECT_NE(std::string(error.what()).find("the MPI transport is not in this build"),
              std::string::npos)
        << error.what();
  }
}

// The nccl row is in every build; without NCCL (the sanitized builds leave it out) it says how to
// get it. With NCCL, tests/nccl/ covers the row.
TEST(BackendTable, NcclInABuildWithoutNcclSaysHowToGetIt) {
  if (backend::nccl::available())
    GTEST_SKIP() << "this build has NCCL; tests/nccl/ covers the nccl row";
  try {
    backend::createBackend(twoRanks("nccl"));
    FAIL() << "backend nccl was made in a build without NCCL";
  } catch (const UnsupportedError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("backend 'nccl' is not in this build"), std::string::npos) << message;
    EXPECT_NE(message.find("-DCHORUS_WITH_NCCL=ON"), std::string::npos) << message;
  }
}

TEST(BackendTable, NcclIsListedWhereTheBuildHasIt) {
  try {
    backend::createBackend(twoRanks("no-such-backend"));
    FAIL() << "an unknown backend was accepted";
  } catch (const InvalidArgumentError& error) {
    const bool listed = std::string(error.what()).find(", nccl") != std::string::npos;
    EXPECT_EQ(listed, backend::nccl::available()) << error.what();
  }
}

}  // namespace
}  // namespace chorus
