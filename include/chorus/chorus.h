// chorus/chorus.h — everything a C++ user of chorus includes.
//
//   auto comm = chorus::DistContext::get().communicator();
//   std::vector<float> x(n, comm->rank() + 1.0f);
//   comm->allreduce(chorus::Tensor(x.data(), {n}))->wait();
#pragma once

#include "chorus/communicator.h"
#include "chorus/dist_context.h"
#include "chorus/error.h"
#include "chorus/gradient_reducer.h"
#include "chorus/tensor.h"
#include "chorus/types.h"
#include "chorus/work.h"
