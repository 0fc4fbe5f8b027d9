// The void backend: see void_backend.h.
#include "backend/void_backend.h"

#include <cstddef>

#include "chorus/error.h"
#include "core/check.h"
#include "core/copy_bytes.h"

namespace chorus::backend {

std::unique_ptr<Backend> createVoidBackend(const BackendOptions& options) {
  CHORUS_CHECK_ARG(options.size == 1, "backend 'void' serves only communicators of size 1, not ",
                   options.size, " ranks");
  return std::make_unique<VoidBackend>();
}
void VoidBackend::allreduce(const CallContext&, const AllreduceArgs& args) {
  copyToOutput(args.input, args.output, args.count * dataTypeSize(args.dtype));
}

void VoidBackend::broadcast(const CallContext&, const BroadcastArgs& args) {
  copyToOutput(args.input, args.output, args.bytes);
}

void VoidBackend::reduceScatter(const CallContext&, const ReduceScatterArgs& args) {
  copyToOutput(args.input, args.output, args.countPerRank * dataTypeSize(args.dtype));
}

void VoidBackend::allgather(const CallContext&, const AllgatherArgs& args) {
  copyToOutput(args.input, args.output, args.bytesPerRank);
}

void VoidBackend::reduce(const CallContext&, const ReduceArgs& args) {
  copyToOutput(args.input, args.output, args.count * dataTypeSize(args.dtype));
}

void VoidBackend::gather(const CallContext&, const GatherArgs& args) {
  copyToOutput(args.input, args.output, args.bytesPerRank);
}

void VoidBackend::scatter(const CallContext&, const ScatterArgs& args) {
  copyToOutput(args.input, args.output, args.bytesPerRank);
}

void VoidBackend::allToAll(const CallContext&, const AllToAllArgs& args) {
  copyToOutput(args.input, args.output, args.bytesPerRank);
}

void VoidBackend::allToAllV(const CallContext&, const AllToAllVArgs& args) {
  copyBytes(static_cast<std::byte*>(args.output) + args.recvOffsets[0],
            static_cast<const std::byte*>(args.input) + args.sendOffsets[0], args.recvBytes[0]);
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
