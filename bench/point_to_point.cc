// chorus-bench's sendrecv: point-to-point in a ring (the MPI reference is MPI_Send and MPI_Recv in
// the same order). Every
// rank receives `count` elements from its left neighbour (rank - 1) and sends as many to its right
// one (rank + 1). chorus-bench issues its calls under BlockingCalls, where each call runs to its
// end: even ranks send first, odd ranks receive first, and a rank waiting in one call still takes
// in what its other neighbour sends it (the transports buffer early messages). "size" is the bytes
// of one message. Element j of rank r's message is movedValue(r, j); the check compares what came
// from the left with its closed form. One rank has no neighbour to send to (chorus refuses a send
// to itself): its row is a barrier and checks nothing.
#include "point_to_point.h"

#include "patterns.h"

namespace chorus::bench {
namespace {

Tensor message(const Call& call, void* data) {
  return Tensor(data, call.dtype, {call.shape.count}, call.device);
}

double oneMessage(int /*ranks*/) { return 1.0; }

Shape messageShape(int64_t bytes, size_t elementSize, int /*ranks*/) {
  const int64_t count = bytes / static_cast<int64_t>(elementSize);
  return {count, count, count, count * static_cast<int64_t>(elementSize)};
}

int left(const Call& call) { return (call.rank() + call.ranks() - 1) % call.ranks(); }
int right(const Call& call) { return (call.rank() + 1) % call.ranks(); }

void fillSendrecv(const Call& call) {
  fillBuffer(call.dtype, call.in, call.shape.inElems,
             [&](int64_t j) { return movedValue(call.rank(), j); });
  fillBuffer(call.dtype, call.out, call.shape.outElems, [](int64_t) { return 0.0; });
}

Communicator::WorkPtr issueSendrecv(const Call& call) {
  if (call.ranks() == 1)
    return call.comm->barrier();
  if (call.rank() % 2 == 0) {
    call.comm->send(message(call, call.in), right(call))->wait();
    return call.comm->recv(message(call, call.out), left(call));
  }
  call.comm->recv(message(call, call.out), left(call))->wait();
  return call.comm->send(message(call, call.in), right(call));
}

int64_t countWrongSendrecv(const Call& call) {
  if (call.ranks() == 1)
    return 0;
  return countMismatches(call.dtype, call.out, call.shape.outElems,
                         [&](int64_t j) { return movedValue(left(call), j); });
}

}  // namespace

int sendrecvLeft(const Call& call) { return left(call); }
int sendrecvRight(const Call& call) { return right(call); }

const Collective kSendrecv = {.name = "sendrecv",
                              .reduces = false,
                              .rooted = false,
                              .sweeps = true,
                              .busBwFactor = oneMessage,
                              .shape = messageShape,
                              .fill = fillSendrecv,
                              .issue = issueSendrecv,
                              .countWrong = countWrongSendrecv,
                              .hostOnly = true};

}  // namespace chorus::bench
