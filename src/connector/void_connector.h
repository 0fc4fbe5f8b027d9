// The void connector: a process started without a launcher is a job of one rank.
#pragma once

#include "connector/connector.h"

namespace chorus::connector {

class VoidConnector : public Connector {
 public:
  std::string kind() const override { return "void"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int localRank() const override { return 0; }
  int localSize() const override { return 1; }
  int nodeRank() const override { return 0; }
  std::string nodeId() const override { return "node0"; }
  std::shared_ptr<store::Store> store() const override { return nullptr; }
  const std::string& token() const override { return token_; }
  std::string hostAddress() const override { return "127.0.0.1"; }
  void barrier(Deadline) override {}
  store::Bytes broadcast(const store::Bytes& bytes, int, Deadline) override { return bytes; }

 private:
  std::string token_;
};

}  // namespace chorus::connector
