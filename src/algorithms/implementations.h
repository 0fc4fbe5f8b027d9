// The run() functions of every algorithm, one per file (<collective>_<algorithm>.cc). tables.cc
// lists them in its tables; nothing else should call them directly except tests that force a row.
#pragma once

#include "algorithms/peers.h"
#include "core/collective_args.h"

namespace chorus::algorithms {

void allreduceRing(Peers& peers, const AllreduceArgs& args);
void allreduceRecursiveDoubling(Peers& peers, const AllreduceArgs& args);
void reduceScatterRing(Peers& peers, const ReduceScatterArgs& args);
void allgatherRing(Peers& peers, const AllgatherArgs& args);
void broadcastBinomialTree(Peers& peers, const BroadcastArgs& args);
void broadcastPipelinedChain(Peers& peers, const BroadcastArgs& args);
void reduceBinomialTree(Peers& peers, const ReduceArgs& args);
void reducePipelinedChain(Peers& peers, const ReduceArgs& args);
void gatherLinear(Peers& peers, const GatherArgs& args);
void scatterLinear(Peers& peers, const ScatterArgs& args);
void allToAllPairwise(Peers& peers, const AllToAllArgs& args);
void allToAllVPairwise(Peers& peers, const AllToAllVArgs& args);
void barrierDissemination(Peers& peers, const BarrierArgs& args);

}  // namespace chorus::algorithms
