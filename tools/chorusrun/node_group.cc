// The launchers' store protocol (see node_group.h).
#include "node_group.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include "chorus/error.h"
#include "connector/bind_address.h"
#include "core/check.h"
#include "core/net/socket.h"
#include "rank_environment.h"
#include "store/tcp_store.h"

namespace chorus::launcher {
namespace {

using store::toBytes;
using store::toString;

std::string stopKey(int node) { return "launcher/stop/" + std::to_string(node); }

NodeEvent decodeStop(const std::string& value) {
  if (value == "ok") {
    return {NodeEvent::Kind::kFinished, 0, ""};
  }
  size_t space = value.find(' ');
  int code = std::atoi(value.substr(0, space).c_str());
  return {NodeEvent::Kind::kFailed, code == 0 ? 1 : code,
          space == std::string::npos ? value : value.substr(space + 1)};
}

// The first failure wins; every node's watcher is woken with it.
void recordFailure(store::Store& store, int nnodes, int exitCode, const std::string& message) {
  std::string mine = std::to_string(exitCode) + " " + message;
  store::Bytes first = store.compareSet("launcher/failed", {}, toBytes(mine));
  for (int node = 0; node < nnodes; ++node) {
    store.set(stopKey(node), first);
  }
}

}  // namespace

void reportJobFailure(const std::string& master,
                      const std::string& token,
                      int nnodes,
                      int exitCode,
                      const std::string& message,
                      std::chrono::milliseconds timeout) noexcept {
  try {
    store::TcpStore store(net::Address::parse(master), token, Deadline::after(timeout));
    recordFailure(store, nnodes, exitCode, message);
  } catch (const std::exception&) {
    // No store (node 0 gone or never started): the launchers learn of the end otherwise.
  }
}

NodeGroup::NodeGroup(const LaunchOptions& options,
                     const std::string& token,
                     const std::optional<std::string>& bindHost)
    : options_(options) {
  net::Address address = net::Address::parse(options.master);
  host_ = address.host;
  port_ = address.port;
  int node = options.nodeRank;
  if (node == 0) {
    if (!bindHost && connector::isWildcardAddress(host_)) {
      throw InvalidArgumentError(
          "--master " + options.master +
          " would serve the store on every interface of this host; give --master this host's "
          "address on the nodes' network (or --bind ADDR / CHORUS_IFNAME=<interface>), or pass "
          "--bind 0.0.0.0 to mean every interface");
    }
    server_ = std::make_unique<store::TcpStoreServer>(bindHost.value_or(host_), port_, token);
    port_ = server_->port();
    address.port = port_;
    if (connector::isWildcardAddress(host_)) {
      // This node's ranks reach the store at the bound address, or on loopback for --bind 0.0.0.0.
      host_ = connector::isWildcardAddress(*bindHost) ? "127.0.0.1" : *bindHost;
      address.host = host_;
    }
  }
  Deadline connect = Deadline::after(options.connectTimeout);
  try {
    store_ = std::make_unique<store::TcpStore>(address, token, connect);
    watchStore_ = std::make_unique<store::TcpStore>(address, token, connect);
  } catch (const Error& e) {
    throw Error("node " + std::to_string(node) + " could not reach node 0's store at " +
                options.master + " (" + e.what() +
                "); is node 0's launcher running there, with the same job token?");
  }
  std::string mine = std::to_string(options.nnodes) + " " + std::to_string(options.nprocPerNode);
  std::string config;
  if (node == 0) {
    jobId_ = newJobId();
    store_->set("launcher/job_id", toBytes(jobId_));
    torchPort_ = freePort(host_);
    store_->set("launcher/torch_port", toBytes(std::to_string(torchPort_)));
    store_->set("launcher/config", toBytes(mine));
    config = mine;
  } else {
    config = toString(store_->get("launcher/config", connect));
    jobId_ = toString(store_->get("launcher/job_id", connect));
    torchPort_ =
        static_cast<uint16_t>(std::stoi(toString(store_->get("launcher/torch_port", connect))));
  }
  if (config != mine) {
    std::string theirs = "--nnodes " + config.substr(0, config.find(' ')) + " --nproc-per-node " +
                         config.substr(config.find(' ') + 1);
    std::string message = "node " + std::to_string(node) + " was started with --nnodes " +
                          std::to_string(options.nnodes) + " --nproc-per-node " +
                          std::to_string(options.nprocPerNode) + " but node 0 with " + theirs +
                          "; start every node with the same values";
    reportFailure(2, message);
    finish();
    throw InvalidArgumentError(message);
  }
  std::string claim = std::to_string(getpid()) + "@" + store_->localAddress();
  std::string owner =
      toString(store_->compareSet("launcher/node/" + std::to_string(node), {}, toBytes(claim)));
  if (owner != claim) {
    std::string message = "node rank " + std::to_string(node) +
                          " was claimed twice (another launcher, " + owner +
                          ", already has it); give each node its own --node-rank";
    reportFailure(2, message);  // Not counted as exited: the job's own node still runs.
    throw InvalidArgumentError(message);
  }
  eventFd_ = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  CHORUS_SYSCHECK(eventFd_.get());
  watcher_ = std::thread([this] { watch(); });
}

NodeGroup::~NodeGroup() {
  finish();
  if (watcher_.joinable()) {
    watcher_.join();
  }
}

void NodeGroup::watch() {
  NodeEvent event{NodeEvent::Kind::kStoreLost, 1, ""};
  while (true) {
    try {
      std::string value =
          toString(watchStore_->get(stopKey(options_.nodeRank), Deadline::after(kWatchSlice)));
      event = decodeStop(value);
      break;
    } catch (const TimeoutError&) {
      if (stopping_) {
        break;
      }
    } catch (const std::exception& e) {
      event.message = std::string("lost the connection to node 0's store at ") + options_.master +
                      " (" + e.what() + ")";
      break;
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    event_ = event;
  }
  uint64_t one = 1;
  [[maybe_unused]] ssize_t written = ::write(eventFd_.get(), &one, sizeof(one));
}

std::optional<NodeEvent> NodeGroup::takeEvent() {
  uint64_t count;
  [[maybe_unused]] ssize_t got = ::read(eventFd_.get(), &count, sizeof(count));
  std::lock_guard<std::mutex> lock(mutex_);
  if (!event_ || eventTaken_) {
    return std::nullopt;
  }
  eventTaken_ = true;
  return event_;
}

void NodeGroup::reportFailure(int exitCode, const std::string& message) noexcept {
  try {
    recordFailure(*store_, options_.nnodes, exitCode, message);
  } catch (const std::exception&) {
    // The store is gone: the other launchers notice that themselves.
  }
}

void NodeGroup::reportDone() noexcept {
  try {
    if (store_->add("launcher/done", 1) == options_.nnodes) {
      store_->compareSet(stopKey(0), {}, toBytes("ok"));
    }
    if (options_.nodeRank != 0) {
      store_->compareSet(stopKey(options_.nodeRank), {}, toBytes("ok"));
    }
  } catch (const std::exception&) {
  }
}

void NodeGroup::finish() noexcept {
  if (finished_ || !store_) {
    return;
  }
  finished_ = true;
  stopping_ = true;
  try {
    if (store_->add("launcher/exited", 1) == options_.nnodes) {
      store_->set("launcher/all_exited", toBytes("1"));
    }
    if (options_.nodeRank == 0) {
      store_->get("launcher/all_exited", Deadline::after(kExitWait));
    }
    // Wakes this node's watcher if nothing else did (a stop key already set is left alone).
    store_->compareSet(stopKey(options_.nodeRank), {}, toBytes("ok"));
  } catch (const std::exception&) {
  }
}

}  // namespace chorus::launcher
