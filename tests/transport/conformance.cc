// The conformance suite's shared parts (conformance.h): test names, the helpers bodies use, and
// how a member of a process group (forked, mpirun) runs its body under a watchdog.
#include "conformance.h"

#include <condition_variable>
#include <thread>

namespace chorus::transport::testing {

void PrintTo(const std::shared_ptr<GroupFactory>& factory, std::ostream* out) {
  *out << factory->kind() << " x" << factory->size();
}

std::string factoryName(const ::testing::TestParamInfo<std::shared_ptr<GroupFactory>>& info) {
  return info.param->kind() + "_" + std::to_string(info.param->size());
}

void GuardedTransport::abort(std::exception_ptr reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (transport_)
    transport_->abort(std::move(reason));
}

void GuardedTransport::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  transport_.reset();
}

namespace {

// Calls `expire` unless disarmed (by destruction) within `limit`.
class Watchdog {
 public:
  Watchdog(std::chrono::seconds limit, std::function<void()> expire)
      : thread_([this, limit, expire = std::move(expire)] {
          std::unique_lock<std::mutex> lock(mutex_);
          if (!changed_.wait_for(lock, limit, [this] { return disarmed_; })) {
            lock.unlock();
            expire();
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      disarmed_ = true;
      changed_.notify_all();
    }
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool disarmed_ = false;
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace

void runMemberHere(GuardedTransport& transport,
                   Member& member,
                   const RankBody& body,
                   std::chrono::seconds limit) {
  SCOPED_TRACE("rank " + std::to_string(member.rank()));
  Watchdog watchdog(limit, [&] {
    ADD_FAILURE() << "rank " << member.rank() << " did not finish within " << limit.count()
                  << " s; aborting its transport";
    transport.abort(std::make_exception_ptr(Error("test limit reached")));
  });
  try {
    body(transport.get(), member);
  } catch (...) {
    ADD_FAILURE() << "rank " << member.rank() << " threw: " << describe(std::current_exception());
  }
}

Deadline soon() { return Deadline::after(std::chrono::seconds(10)); }

void waitOne(Transport& transport, Request& request, Deadline deadline) {
  Request* requests[] = {&request};
  transport.wait(requests, deadline);
}

void send(Transport& t, int peer, uint64_t tag, const void* data, size_t bytes, Fingerprint fp) {
  Request request;
  t.postSend(peer, tag, fp, data, bytes, request);
  waitOne(t, request);
}

void recv(Transport& t, int peer, uint64_t tag, void* data, size_t bytes, Fingerprint fp) {
  Request request;
  t.postRecv(peer, tag, fp, data, bytes, request);
  waitOne(t, request);
}

std::exception_ptr attempt(const std::function<void()>& fn) {
  try {
    fn();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

std::string describe(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "something not a std::exception";
  }
}

void expectOk(const std::exception_ptr& error) {
  if (error)
    ADD_FAILURE() << "failed: " << describe(error);
}

}  // namespace chorus::transport::testing
