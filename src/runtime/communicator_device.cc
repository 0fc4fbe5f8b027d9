// Collectives on CUDA tensors: see communicator_device.h.
#include "runtime/communicator_device.h"

#include "core/check.h"
#include "runtime/communicator_state.h"
#include "runtime/tensor_layout.h"

namespace chorus::detail {
namespace {

using backend::DeviceBackend;
using backend::DeviceCallContext;

// `parts` rank-major blocks of `layout` in `blocks` -> `out` interleaved along the axis.
void interleaveOnDevice(
    DeviceBackend& device, const void* blocks, void* out, int parts, const AxisLayout& layout) {
  const auto* from = static_cast<const std::byte*>(blocks);
  auto* to = static_cast<std::byte*>(out);
  const size_t blockBytes = layout.outer * layout.rowBytes;
  for (int part = 0; part < parts; ++part) {
    device.copyRows(to + part * layout.rowBytes, parts * layout.rowBytes, from + part * blockBytes,
                    layout.rowBytes, layout.rowBytes, layout.outer);
  }
}

// The inverse: `in` interleaved along the axis -> `parts` rank-major blocks.
void deinterleaveOnDevice(
    DeviceBackend& device, const void* in, void* blocks, int parts, const AxisLayout& layout) {
  const auto* from = static_cast<const std::byte*>(in);
  auto* to = static_cast<std::byte*>(blocks);
  const size_t blockBytes = layout.outer * layout.rowBytes;
  for (int part = 0; part < parts; ++part) {
    device.copyRows(to + part * blockBytes, layout.rowBytes, from + part * layout.rowBytes,
                    parts * layout.rowBytes, layout.rowBytes, layout.outer);
  }
}

}  // namespace

int deviceOf(std::initializer_list<const Tensor*> tensors, std::string_view op, int rank) {
  int device = -1;
  bool host = false;
  for (const Tensor* tensor : tensors) {
    if (tensor == nullptr)
      continue;
    if (tensor->device().isCpu()) {
      // A tensor with no data is an absent one (a non-root's output, say: Tensor(), whose
      // numel is 1 as a scalar's), not a host tensor.
      host = host || tensor->data() != nullptr;
      continue;
    }
    CHORUS_CHECK_ARG(device < 0 || device == tensor->device().index, "rank ", rank,
                     " (this process): ", op, ": the tensors are on cuda:", device, " and ",
                     tensor->device().toString(), "; one call takes tensors of one GPU");
    device = tensor->device().index;
  }
  CHORUS_CHECK_ARG(device < 0 || !host, "rank ", rank, " (this process): ", op,
                   " mixes host and CUDA tensors; pass tensors of one kind (move them with "
                   ".cpu() or .cuda())");
  return device;
}

int deviceOf(const std::vector<Tensor>& tensors, std::string_view op, int rank) {
  int device = -1;
  for (const Tensor& tensor : tensors)
    device = deviceOf({&tensors.front(), &tensor}, op, rank);  // each against the first
  return device;
}

WorkPtr deviceAllreduce(CommunicatorState& state,
                        const Fingerprint& fingerprint,
                        int device,
                        std::vector<Tensor> tensors,
                        ReduceOp op) {
  return state.submitDevice(
      fingerprint, device, [&](DeviceBackend& backend, const DeviceCallContext& call) {
        const DataType dtype = tensors[0].dtype();
        size_t total = 0;
        for (const Tensor& tensor : tensors) total += tensor.nbytes();
        auto* packed = static_cast<std::byte*>(backend.scratch(total));
        size_t offset = 0;
        for (const Tensor& tensor : tensors) {
          backend.copy(packed + offset, tensor.data(), tensor.nbytes());
          offset += tensor.nbytes();
        }
        backend.allreduce(call, {packed, packed, total / dataTypeSize(dtype), dtype, op});
        offset = 0;
        for (const Tensor& tensor : tensors) {
          backend.copy(tensor.data(), packed + offset, tensor.nbytes());
          offset += tensor.nbytes();
        }
      });
}

WorkPtr deviceAllreduce(CommunicatorState& state,
                        const Fingerprint& fingerprint,
                        int device,
                        Tensor input,
                        Tensor output,
                        ReduceOp op) {
  return state.submitDevice(
      fingerprint, device, [&](DeviceBackend& backend, const DeviceCallContext& call) {
        backend.allreduce(call, {input.data(), output.data(), static_cast<size_t>(input.numel()),
                                 input.dtype(), op});
      });
}

WorkPtr deviceReduceScatter(CommunicatorState& state,
                            const Fingerprint& fingerprint,
                            int device,
                            Tensor input,
                            Tensor output,
                            ReduceOp op) {
  return state.submitDevice(
      fingerprint, device, [&](DeviceBackend& backend, const DeviceCallContext& call) {
        backend.reduceScatter(call, {input.data(), output.data(),
                                     static_cast<size_t>(output.numel()), input.dtype(), op});
      });
}

WorkPtr deviceBroadcast(CommunicatorState& state,
                        const Fingerprint& fingerprint,
                        int device,
                        Tensor input,
                        Tensor output,
                        int root) {
  return state.submitDevice(
      fingerprint, device, [&](DeviceBackend& backend, const DeviceCallContext& call) {
        backend.broadcast(call, {input.data(), output.data(), output.nbytes(), root});
      });
}

WorkPtr deviceReduce(CommunicatorState& state,
                     const Fingerprint& fingerprint,
                     int device,
                     Tensor input,
                     Tensor output,
                     int root,
                     ReduceOp op) {
  return state.submitDevice(
      fingerprint, device, [&](DeviceBackend& backend, const DeviceCallContext& call) {
        // NCCL writes the output on the root only, so other ranks keep their input.
        backend.reduce(call, {input.data(), output.data(), static_cast<size_t>(input.numel()),
                              input.dtype(), op, root});
      });
}

WorkPtr deviceAllgather(CommunicatorState& state,
                        const Fingerprint& fingerprint,
                        int device,
                        Tensor input,
                        Tensor output,
                        int axis) {
  return state.submitDevice(
      fingerprint, device, [&](DeviceBackend& backend, const DeviceCallContext& call) {
        const AxisLayout layout = axisLayout(input, axis);
        const int size = state.info().size;
        if (layout.outer == 1) {
          backend.allgather(call, {input.data(), output.data(), input.nbytes()});
          return;
        }
        void* blocks = backend.scratch(size * input.nbytes());
        backend.allgather(call, {input.data(), blocks, input.nbytes()});
        interleaveOnDevice(backend, blocks, output.data(), size, layout);
      });
}

WorkPtr deviceGather(CommunicatorState& state,
                     const Fingerprint& fingerprint,
                     int device,
                     Tensor input,
                     Tensor output,
                     int root,
                     int axis) {
  return state.submitDevice(
      fingerprint, device, [&](DeviceBackend& backend, const DeviceCallContext& call) {
        const AxisLayout layout = axisLayout(input, axis);
        const int size = state.info().size;
        const bool isRoot = state.info().rank == root;
        if (!isRoot || layout.outer == 1) {
          backend.gather(call,
                         {input.data(), isRoot ? output.data() : nullptr, input.nbytes(), root});
          return;
        }
        void* blocks = backend.scratch(size * input.nbytes());
        backend.gather(call, {input.data(), blocks, input.nbytes(), root});
        interleaveOnDevice(backend, blocks, output.data(), size, layout);
      });
}

WorkPtr deviceScatter(CommunicatorState& state,
                      const Fingerprint& fingerprint,
                      int device,
                      Tensor input,
                      Tensor output,
                      int root) {
  return state.submitDevice(
      fingerprint, device, [&](DeviceBackend& backend, const DeviceCallContext& call) {
        const bool isRoot = state.info().rank == root;
        backend.scatter(call,
                        {isRoot ? input.data() : nullptr, output.data(), output.nbytes(), root});
      });
}

WorkPtr deviceAllToAll(CommunicatorState& state,
                       const Fingerprint& fingerprint,
                       int device,
                       Tensor input,
                       Tensor output,
                       Tensor part,
                       int splitAxis,
                       int concatAxis) {
  return state.submitDevice(
      fingerprint, device, [&](DeviceBackend& backend, const DeviceCallContext& call) {
        const int size = state.info().size;
        const AxisLayout splitLayout = axisLayout(part, splitAxis);
        const AxisLayout concatLayout = axisLayout(part, concatAxis);
        const size_t partBytes = part.nbytes();
        const bool staged = splitLayout.outer > 1 || concatLayout.outer > 1;
        auto* scratch =
            static_cast<std::byte*>(staged ? backend.scratch(2 * size * partBytes) : nullptr);
        const void* send = input.data();
        if (splitLayout.outer > 1) {
          deinterleaveOnDevice(backend, input.data(), scratch, size, splitLayout);
          send = scratch;
        }
        void* receive = concatLayout.outer > 1 ? scratch + size * partBytes : output.data();
        backend.allToAll(call, {send, receive, partBytes});
        if (concatLayout.outer > 1)
          interleaveOnDevice(backend, receive, output.data(), size, concatLayout);
      });
}

WorkPtr devicePointToPoint(CommunicatorState& state,
                           const Fingerprint& fingerprint,
                           int device,
                           Tensor tensor,
                           int peer,
                           int tag,
                           bool isSend) {
  return state.submitDevice(fingerprint, device,
                            [&](DeviceBackend& backend, const DeviceCallContext& call) {
                              if (isSend)
                                backend.send(call, tensor.data(), tensor.nbytes(), peer, tag);
                              else
                                backend.recv(call, tensor.data(), tensor.nbytes(), peer, tag);
                            });
}

}  // namespace chorus::detail
