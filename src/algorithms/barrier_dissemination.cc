// Dissemination barrier (Hensgen, Finkel and Manber, 1988).
//
// What it does: in round k = 0, 1, ... while 2^k < p, rank r sends an empty message to
// (r + 2^k) mod p and waits for one from (r - 2^k) mod p. After round k each rank has heard,
// directly or indirectly, from the 2^(k+1) - 1 ranks before it, so after ceil(log2 p) rounds it
// has heard from everyone: no rank leaves before every rank has arrived.
//
// Cost: ceil(log2 p) rounds of one empty message each way; any p (no power-of-two folding).
//
// Limits: none.
#include "algorithms/implementations.h"
#include "algorithms/patterns/ring.h"

namespace chorus::algorithms {

void barrierDissemination(Peers& peers, const BarrierArgs&) {
  const int rank = peers.rank();
  const int size = peers.size();
  for (int distance = 1; distance < size; distance <<= 1) {
    peers.sendRecv(patterns::modulo(rank + distance, size), nullptr, 0,
                   patterns::modulo(rank - distance, size), nullptr, 0);
  }
  peers.heardFromAll();
}

}  // namespace chorus::algorithms
