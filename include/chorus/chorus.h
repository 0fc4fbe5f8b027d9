// chorus/chorus.h — everything a C++ user of chorus includes.
//
//   auto comm = chorus::DistContext::get().communicator();
//   std::vector<float> x(n, comm->rank() + 1.0f);
//   comm->allreduce(chorus::Tensor(x.data(), {n}))->wait();
#pragma once

#include "chorus/communicator.h"
#include "chorus/copy_bytes.h"
#include "chorus/dist_context.h"
#include "chorus/error.h"
#include "chorus/flat_optimizer.h"
#include "chorus/gradient_reducer.h"
#include "chorus/huge_pages.h"
#include "chorus/shard_plan.h"
#include "chorus/stream.h"
#include "chorus/tensor.h"
#include "chorus/trace.h"
#include "chorus/types.h"
#include "chorus/work.h"
#include "chorus/zero_engine.h"
#include "chorus/zero_layout.h"
