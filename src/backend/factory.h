// Making the backend of a new communicator, from the backend table: one row per backend,
// {name, summary, available(), automatic(), create()}. Adding a backend is one folder (its engine
// and a create function taking BackendOptions) plus one row in factory.cc, plus a build option
// when it needs a library; see the checklist in docs/algorithms.md.
#pragma once

#include <memory>
#include <string_view>

#include "backend/backend.h"
#include "backend/options.h"

namespace chorus::backend {

struct BackendInfo {
  std::string_view name;     // what CHORUS_BACKEND and setDefaultBackend take
  std::string_view summary;  // one line, for error messages and docs
  // Whether this build has it (a backend that needs an optional library is compiled in every
  // build, and says how to get it when it is missing).
  bool (*available)();
  // The rule for "auto": whether this backend suits the communicator that `options` describes.
  // "auto" takes the first available row whose rule holds; null: never chosen automatically.
  bool (*automatic)(const BackendOptions& options);
  std::unique_ptr<Backend> (*create)(const BackendOptions& options);
};

// The backend options.name names ("auto": the table's rule). A communicator of one rank gets the
// void backend whatever the name (no connection is needed). An unknown name is
// InvalidArgumentError listing the names this build has; a known one that this build lacks, or
// that cannot serve this communicator, is UnsupportedError or InvalidArgumentError saying why.
// Collective over the communicator's ranks when size > 1 (transports connect through the store;
// the MPI backends through MPI).
std::unique_ptr<Backend> createBackend(const BackendOptions& options);

// The backend for CUDA tensors of a communicator (its deviceBackend() is not null), on CUDA device
// options.device, whatever options.name says and also for one rank: "nccl". UnsupportedError when
// this build has no GPU backend or this process sees no GPU, saying why.
std::unique_ptr<Backend> createDeviceBackend(const BackendOptions& options);

// Test hook: makes createDeviceBackend call `maker` instead (null: back to the table), so the
// runtime's device path (its checks, its watchdog) can be unit-tested with a fake device backend
// on machines without a GPU. Not for programs.
using DeviceBackendMaker = std::unique_ptr<Backend> (*)(const BackendOptions& options);
void setDeviceBackendMakerForTesting(DeviceBackendMaker maker);

}  // namespace chorus::backend
