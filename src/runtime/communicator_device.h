// Communicator front end, part 3: the collectives on CUDA tensors. The Communicator methods
// validate as for host tensors (shapes, dtypes, roots), find the tensors' device with deviceOf,
// and hand device calls here; each function enqueues its collective on the device backend through
// CommunicatorState::submitDevice (Note [Device call order]) and returns a DeviceWork.
//
// Unlike the host path nothing is widened (the device reduces float16/bfloat16 itself) and avg
// goes to the backend as is. Fused lists are packed into the backend's scratch with device
// copies; concatenation along an inner axis is interleaved with strided device copies.
#pragma once

#include <initializer_list>
#include <memory>
#include <string_view>
#include <vector>

#include "chorus/tensor.h"
#include "chorus/types.h"
#include "chorus/work.h"
#include "core/collective.h"

namespace chorus::detail {

class CommunicatorState;

// The CUDA device ordinal of an operation's tensors, or -1 when all are in host memory. Null
// pointers and empty tensors that are not CUDA tensors are skipped (a root-only output elsewhere).
// InvalidArgumentError, naming `op` and this process's world rank `rank`, when host and device
// tensors are mixed or the tensors are on different GPUs.
int deviceOf(std::initializer_list<const Tensor*> tensors, std::string_view op, int rank);
int deviceOf(const std::vector<Tensor>& tensors, std::string_view op, int rank);

using WorkPtr = std::shared_ptr<Work>;

WorkPtr deviceAllreduce(CommunicatorState& state,
                        const Fingerprint& fingerprint,
                        int device,
                        std::vector<Tensor> tensors,
                        ReduceOp op);
WorkPtr deviceAllreduce(CommunicatorState& state,
                        const Fingerprint& fingerprint,
                        int device,
                        Tensor input,
                        Tensor output,
                        ReduceOp op);
WorkPtr deviceReduceScatter(CommunicatorState& state,
                            const Fingerprint& fingerprint,
                            int device,
                            Tensor input,
                            Tensor output,
                            ReduceOp op);
// `input` is read on the root only (pass `output` elsewhere).
WorkPtr deviceBroadcast(CommunicatorState& state,
                        const Fingerprint& fingerprint,
                        int device,
                        Tensor input,
                        Tensor output,
                        int root);
// `output` is written on the root only (empty elsewhere); it may be `input` (in place).
WorkPtr deviceReduce(CommunicatorState& state,
                     const Fingerprint& fingerprint,
                     int device,
                     Tensor input,
                     Tensor output,
                     int root,
                     ReduceOp op);
WorkPtr deviceAllgather(CommunicatorState& state,
                        const Fingerprint& fingerprint,
                        int device,
                        Tensor input,
                        Tensor output,
                        int axis);
WorkPtr deviceGather(CommunicatorState& state,
                     const Fingerprint& fingerprint,
                     int device,
                     Tensor input,
                     Tensor output,
                     int root,
                     int axis);
WorkPtr deviceScatter(CommunicatorState& state,
                      const Fingerprint& fingerprint,
                      int device,
                      Tensor input,
                      Tensor output,
                      int root);
// `part` describes one rank's block (the input split along splitAxis).
WorkPtr deviceAllToAll(CommunicatorState& state,
                       const Fingerprint& fingerprint,
                       int device,
                       Tensor input,
                       Tensor output,
                       Tensor part,
                       int splitAxis,
                       int concatAxis);
WorkPtr devicePointToPoint(CommunicatorState& state,
                           const Fingerprint& fingerprint,
                           int device,
                           Tensor tensor,
                           int peer,
                           int tag,
                           bool isSend);

}  // namespace chorus::detail
