// The MPI library's collectives for chorus-bench --compare mpi (see mpi_reference.h).
#include "mpi_reference.h"

#include <mpi.h>

#include <climits>
#include <string_view>
#include <vector>

#include "backend/mpi/mpi_types.h"
#include "chorus/error.h"
#include "point_to_point.h"
#include "uneven_collectives.h"

namespace chorus::bench {
namespace {

using backend::mpi::mpiOp;
using backend::mpi::mpiType;

void checkMpi(int code, const char* function, const Call& call) {
  if (code == MPI_SUCCESS) {
    return;
  }
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw Error("rank " + std::to_string(call.rank()) + ": " + function + " (the MPI reference of " +
              "--compare mpi) failed: " + std::string(text, static_cast<size_t>(length)));
}

int elements(int64_t count) { return static_cast<int>(count); }

int runAllreduce(const Call& c, MPI_Datatype type, MPI_Op op) {
  return MPI_Allreduce(MPI_IN_PLACE, c.out, elements(c.shape.outElems), type, op, MPI_COMM_WORLD);
}
int runReduceScatter(const Call& c, MPI_Datatype type, MPI_Op op) {
  return MPI_Reduce_scatter_block(c.in, c.out, elements(c.shape.count), type, op, MPI_COMM_WORLD);
}
// In place on the root; the other ranks' `out` is only read, as chorus leaves it.
int runReduce(const Call& c, MPI_Datatype type, MPI_Op op) {
  const bool root = c.rank() == c.root;
  return MPI_Reduce(root ? MPI_IN_PLACE : c.out, root ? c.out : nullptr, elements(c.shape.outElems),
                    type, op, c.root, MPI_COMM_WORLD);
}
int runAllgather(const Call& c, MPI_Datatype type, MPI_Op) {
  const int count = elements(c.shape.count);
  return MPI_Allgather(c.in, count, type, c.out, count, type, MPI_COMM_WORLD);
}
int runBroadcast(const Call& c, MPI_Datatype type, MPI_Op) {
  return MPI_Bcast(c.out, elements(c.shape.outElems), type, c.root, MPI_COMM_WORLD);
}
int runAlltoall(const Call& c, MPI_Datatype type, MPI_Op) {
  const int count = elements(c.shape.count);
  return MPI_Alltoall(c.in, count, type, c.out, count, type, MPI_COMM_WORLD);
}
// The blocks chorus's alltoallv row sends (uneven_collectives.h), as MPI's int counts and offsets.
int runAlltoallv(const Call& c, MPI_Datatype type, MPI_Op) {
  const UnevenSplits splits = unevenSplits(c);
  std::vector<int> sendCounts, sendOffsets, recvCounts, recvOffsets;
  int sendAt = 0, recvAt = 0;
  for (int peer = 0; peer < c.ranks(); ++peer) {
    sendCounts.push_back(elements(splits.send[peer]));
    recvCounts.push_back(elements(splits.recv[peer]));
    sendOffsets.push_back(sendAt);
    recvOffsets.push_back(recvAt);
    sendAt += sendCounts.back();
    recvAt += recvCounts.back();
  }
  return MPI_Alltoallv(c.in, sendCounts.data(), sendOffsets.data(), type, c.out, recvCounts.data(),
                       recvOffsets.data(), type, MPI_COMM_WORLD);
}
int runGather(const Call& c, MPI_Datatype type, MPI_Op) {
  const int count = elements(c.shape.count);
  return MPI_Gather(c.in, count, type, c.out, count, type, c.root, MPI_COMM_WORLD);
}
int runScatter(const Call& c, MPI_Datatype type, MPI_Op) {
  const int count = elements(c.shape.count);
  return MPI_Scatter(c.in, count, type, c.out, count, type, c.root, MPI_COMM_WORLD);
}
// The ring shift of chorus's sendrecv row (point_to_point.h), the same way: blocking MPI_Send to
// the right and MPI_Recv from the left, even ranks sending first.
int runSendrecv(const Call& c, MPI_Datatype type, MPI_Op) {
  const int count = elements(c.shape.count);
  if (c.ranks() == 1)
    return MPI_Barrier(MPI_COMM_WORLD);
  auto send = [&] { return MPI_Send(c.in, count, type, sendrecvRight(c), 0, MPI_COMM_WORLD); };
  auto recv = [&] {
    return MPI_Recv(c.out, count, type, sendrecvLeft(c), 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  };
  if (c.rank() % 2 == 0) {
    const int sent = send();
    return sent != MPI_SUCCESS ? sent : recv();
  }
  const int received = recv();
  return received != MPI_SUCCESS ? received : send();
}
int runBarrier(const Call&, MPI_Datatype, MPI_Op) { return MPI_Barrier(MPI_COMM_WORLD); }

struct MpiCollective {
  std::string_view name;  // Collective::name
  const char* function;   // the MPI function it calls
  int (*run)(const Call&, MPI_Datatype, MPI_Op);
};
constexpr MpiCollective kMpiCollectives[] = {
    {"allreduce", "MPI_Allreduce", runAllreduce},
    {"reduce_scatter", "MPI_Reduce_scatter_block", runReduceScatter},
    {"reduce", "MPI_Reduce", runReduce},
    {"allgather", "MPI_Allgather", runAllgather},
    {"broadcast", "MPI_Bcast", runBroadcast},
    {"alltoall", "MPI_Alltoall", runAlltoall},
    {"alltoallv", "MPI_Alltoallv", runAlltoallv},
    {"gather", "MPI_Gather", runGather},
    {"scatter", "MPI_Scatter", runScatter},
    {"sendrecv", "MPI_Send and MPI_Recv", runSendrecv},
    {"barrier", "MPI_Barrier", runBarrier},
};

const MpiCollective& mpiCollective(const Collective& collective) {
  for (const MpiCollective& entry : kMpiCollectives) {
    if (entry.name == collective.name) {
      return entry;
    }
  }
  throw InternalError("chorus-bench: no MPI reference for collective '" +
                      std::string(collective.name) + "'");
}

}  // namespace

std::string mpiComparisonRefusal(DataType dtype, ReduceOp op, bool reduces) {
  const std::string dtypeName(toString(dtype));
  if (mpiType(dtype) == MPI_DATATYPE_NULL) {
    return "mpi cannot time dtype " + dtypeName +
           ": MPI has no such type; use any dtype but float16 and bfloat16";
  }
  if (reduces && mpiOp(op, dtype) == MPI_OP_NULL) {
    return "mpi cannot time reduce-op " + std::string(toString(op)) +
           ": MPI has no such op; use sum, prod, min, max, band, bor or bxor";
  }
  return "";
}

std::unique_ptr<MpiReference> MpiReference::forCommunicator(const Communicator& comm) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  const std::string who = "chorus-bench rank " + std::to_string(comm.rank()) + ": ";
  if (!initialized) {
    throw InvalidArgumentError(
        who +
        "--compare mpi needs a job started by mpirun (so that chorus bootstraps through "
        "MPI), but MPI is not initialized in this process; run e.g. `mpirun -np 2 "
        "chorus-bench --compare mpi`");
  }
  int worldRank = -1;
  int worldSize = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &worldRank);
  MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  if (worldRank != comm.rank() || worldSize != comm.size()) {
    throw InvalidArgumentError(who + "MPI_COMM_WORLD has this process as rank " +
                               std::to_string(worldRank) + " of " + std::to_string(worldSize) +
                               " but the chorus communicator as rank " +
                               std::to_string(comm.rank()) + " of " + std::to_string(comm.size()) +
                               "; --compare mpi needs every rank of the mpirun job in chorus's "
                               "world, in MPI's order");
  }
  return std::make_unique<MpiReference>();
}

void MpiReference::run(const Collective& collective, const Call& call) const {
  const MpiCollective& entry = mpiCollective(collective);
  if (call.shape.inElems > INT_MAX || call.shape.outElems > INT_MAX) {
    throw InvalidArgumentError("chorus-bench rank " + std::to_string(call.rank()) + ": " +
                               entry.function + " takes at most 2^31-1 elements per buffer; " +
                               "lower --max for --compare mpi");
  }
  checkMpi(entry.run(call, mpiType(call.dtype), mpiOp(call.op, call.dtype)), entry.function, call);
}

std::string MpiReference::libraryName() const {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(version, &length);
  std::string text(version, static_cast<size_t>(length));
  const size_t end = text.find_first_of(",\n");
  return end == std::string::npos ? text : text.substr(0, end);
}

std::string MpiReference::functionName(const Collective& collective) {
  return mpiCollective(collective).function;
}

}  // namespace chorus::bench
