#include "backend/void_backend.h"

#include <cstring>

#include "chorus/error.h"

namespace chorus::backend {
namespace {

void copyIfDistinct(void* to, const void* from, size_t bytes) {
  if (to != from && bytes > 0)
    std::memmove(to, from, bytes);
}

}  // namespace

void VoidBackend::reduceScatter(const CallContext&, const algorithms::ReduceScatterArgs& args) {
  copyIfDistinct(args.output, args.input, args.countPerRank * dataTypeSize(args.dtype));
}

void VoidBackend::allgather(const CallContext&, const algorithms::AllgatherArgs& args) {
  copyIfDistinct(args.output, args.input, args.bytesPerRank);
}

void VoidBackend::reduce(const CallContext&, const algorithms::ReduceArgs& args) {
  copyIfDistinct(args.output, args.input, args.count * dataTypeSize(args.dtype));
}

void VoidBackend::gather(const CallContext&, const algorithms::GatherArgs& args) {
  copyIfDistinct(args.output, args.input, args.bytesPerRank);
}

void VoidBackend::scatter(const CallContext&, const algorithms::ScatterArgs& args) {
  copyIfDistinct(args.output, args.input, args.bytesPerRank);
}

void VoidBackend::allToAll(const CallContext&, const algorithms::AllToAllArgs& args) {
  copyIfDistinct(args.output, args.input, args.bytesPerRank);
}

void VoidBackend::send(const CallContext&, const void*, size_t, int peer, int) {
  throw InvalidArgumentError("rank 0 (this process): send to rank " + std::to_string(peer) +
                             " in a communicator of size 1; there is no peer to send to");
}

void VoidBackend::recv(const CallContext&, void*, size_t, int peer, int) {
  throw InvalidArgumentError("rank 0 (this process): recv from rank " + std::to_string(peer) +
                             " in a communicator of size 1; there is no peer to receive from");
}

}  // namespace chorus::backend
