#include "torch_store.h"

#include <c10/util/Exception.h>

#include <algorithm>

#include "chorus/error.h"

namespace chorus::torch_backend {
namespace {

// A day: "no deadline" (milliseconds::max()) would overflow the clock arithmetic of torch's stores.
constexpr std::chrono::milliseconds kLongest = std::chrono::hours(24);

}  // namespace

void TorchStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  try {
    store_->wait(keys, std::min(timeout, kLongest));
  } catch (const c10::Error& error) {
    std::string names;
    for (const auto& key : keys) names += (names.empty() ? "" : ", ") + key;
    throw TimeoutError("waiting for " + names +
                       " in torch's store: " + error.what_without_backtrace());
  }
}

KeyValueStore::Bytes TorchStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  wait({key}, timeout);
  return store_->get(key);
}

}  // namespace chorus::torch_backend
