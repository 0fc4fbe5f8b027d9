// The store connector: rendezvous through the TCP store that chorusrun (or rank 0, torchrun-style)
// serves. See connector.h.
#pragma once

#include <atomic>
#include <memory>

#include "connector/connector.h"
#include "store/tcp_store.h"

namespace chorus::connector {

struct Placement {
  int rank = 0;
  int size = 1;
  int localRank = 0;
  int localSize = 1;
  int nodeRank = 0;
  std::string nodeId;
};

class StoreConnector : public Connector {
 public:
  // `server` is non-null when this process serves the store itself (rank 0 under torchrun); it is
  // shared because it outlives the connector (see processStoreServer in connector.cc).
  // `hostAddress` is where this rank's listeners bind (see Note [Bind address]).
  StoreConnector(Placement placement,
                 std::shared_ptr<store::Store> store,
                 std::string token,
                 std::shared_ptr<store::TcpStoreServer> server,
                 std::string hostAddress);
  ~StoreConnector() override;

  std::string kind() const override { return "store"; }
  int rank() const override { return placement_.rank; }
  int size() const override { return placement_.size; }
  int localRank() const override { return placement_.localRank; }
  int localSize() const override { return placement_.localSize; }
  int nodeRank() const override { return placement_.nodeRank; }
  std::string nodeId() const override { return placement_.nodeId; }
  std::shared_ptr<store::Store> store() const override;
  const std::string& token() const override { return token_; }
  std::string hostAddress() const override { return hostAddress_; }

  void barrier(Deadline deadline) override;
  store::Bytes broadcast(const store::Bytes& bytes, int root, Deadline deadline) override;

 private:
  Placement placement_;
  std::shared_ptr<store::Store> store_;
  std::string token_;
  std::shared_ptr<store::TcpStoreServer> server_;
  std::string hostAddress_;
  std::atomic<uint64_t> barrierCount_{0};
  std::atomic<uint64_t> broadcastCount_{0};
};

}  // namespace chorus::connector
