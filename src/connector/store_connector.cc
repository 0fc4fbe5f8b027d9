// Barrier and broadcast of bytes through the store. Each call has a generation number, identical on
// every rank because calls are made in the same order, so keys never collide.
#include "connector/store_connector.h"

#include "core/check.h"

namespace chorus::connector {

StoreConnector::StoreConnector(Placement placement,
                               std::shared_ptr<store::Store> store,
                               std::string token,
                               std::shared_ptr<store::TcpStoreServer> server,
                               std::string hostAddress)
    : placement_(std::move(placement)),
      store_(std::move(store)),
      token_(std::move(token)),
      server_(std::move(server)),
      hostAddress_(std::move(hostAddress)) {}

StoreConnector::~StoreConnector() = default;

std::shared_ptr<store::Store> StoreConnector::store() const { return store_; }

void StoreConnector::barrier(Deadline deadline) {
  std::string key = "connector/barrier/" + std::to_string(barrierCount_++);
  if (store_->add(key, 1) == placement_.size)
    store_->set(key + "/done", store::toBytes("1"));
  store_->wait({key + "/done"}, deadline);
}

store::Bytes StoreConnector::broadcast(const store::Bytes& bytes, int root, Deadline deadline) {
  CHORUS_CHECK_ARG(root >= 0 && root < placement_.size, "broadcast root ", root,
                   " is not a rank of this job of size ", placement_.size);
  std::string key = "connector/broadcast/" + std::to_string(broadcastCount_++);
  if (placement_.rank == root) {
    store_->set(key, bytes);
    return bytes;
  }
  return store_->get(key, deadline);
}

}  // namespace chorus::connector
