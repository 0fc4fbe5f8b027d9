// Making the backend of a new communicator.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "store/store.h"

namespace chorus::backend {

struct BackendOptions {
  // "auto" (size 1: void, else tcp), "tcp", "void" (only for size 1).
  std::string name = "auto";
  int rank = 0;
  int size = 1;
  // Scoped to this communicator (a PrefixStore); unused for size 1.
  std::shared_ptr<store::Store> store;
  std::string token;
  // Unique per communicator, identical on its ranks; binds its connections' handshakes.
  std::string scope;
  std::string bindHost = "127.0.0.1";
  Deadline deadline = Deadline::never();
};

// Collective over the communicator's ranks when size > 1 (transports connect through the store).
std::unique_ptr<Backend> createBackend(const BackendOptions& options);

}  // namespace chorus::backend
