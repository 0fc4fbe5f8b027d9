// Resolving and checking bind addresses with getifaddrs(3). See Note [Bind address]
// (bind_address.h).
#include "connector/bind_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <memory>
#include <vector>

#include "core/check.h"
#include "core/env.h"

namespace chorus::connector {
namespace {

struct InterfaceAddress {
  std::string interface;
  std::string address;  // IPv4, dotted quad
};

// Every IPv4 address of this host, with its interface.
std::vector<InterfaceAddress> hostAddresses() {
  ifaddrs* list = nullptr;
  CHORUS_SYSCHECK(getifaddrs(&list));
  std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> owner(list, freeifaddrs);
  std::vector<InterfaceAddress> addresses;
  for (ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET) {
      continue;
    }
    char text[INET_ADDRSTRLEN] = {};
    const auto* ipv4 = reinterpret_cast<const sockaddr_in*>(entry->ifa_addr);
    if (inet_ntop(AF_INET, &ipv4->sin_addr, text, sizeof(text)) != nullptr) {
      addresses.push_back({entry->ifa_name, text});
    }
  }
  return addresses;
}

std::string describe(const std::vector<InterfaceAddress>& addresses) {
  std::string text;
  for (const InterfaceAddress& entry : addresses) {
    text += detail::concat(text.empty() ? "" : ", ", entry.interface, " ", entry.address);
  }
  return text.empty() ? "none" : text;
}

bool isIpv4Literal(const std::string& text) {
  in_addr parsed{};
  return inet_pton(AF_INET, text.c_str(), &parsed) == 1;
}

}  // namespace

bool isWildcardAddress(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "*";
}

std::string interfaceAddress(const std::string& name) {
  std::vector<InterfaceAddress> addresses = hostAddresses();
  for (const InterfaceAddress& entry : addresses) {
    if (entry.interface == name) {
      return entry.address;
    }
  }
  throw InvalidArgumentError(detail::concat(
      "CHORUS_IFNAME=", name, " names no network interface of this host with an IPv4 address ",
      "(this host has: ", describe(addresses), "); set it to one of those, or use --bind ADDR"));
}

std::string checkLocalAddress(const std::string& address, const std::string& source) {
  if (address == "0.0.0.0") {
    return address;
  }
  CHORUS_CHECK_ARG(isIpv4Literal(address), source, " ", address,
                   " is not an IPv4 address; give one of this host's addresses (e.g. 127.0.0.1), "
                   "or an interface name through CHORUS_IFNAME");
  std::vector<InterfaceAddress> addresses = hostAddresses();
  for (const InterfaceAddress& entry : addresses) {
    if (entry.address == address) {
      return address;
    }
  }
  throw InvalidArgumentError(detail::concat(source, " ", address,
                                            " is not an address of this host, so nothing can "
                                            "listen there (this host has: ",
                                            describe(addresses), ")"));
}

std::optional<std::string> launcherBindAddress(const std::string& bindOption) {
  if (!bindOption.empty()) {
    return checkLocalAddress(bindOption, "--bind");
  }
  if (auto name = env::string("CHORUS_IFNAME"); name && !name->empty()) {
    return interfaceAddress(*name);
  }
  return std::nullopt;
}

std::optional<std::string> rankBindAddress() {
  if (auto address = env::string("CHORUS_BIND_ADDR"); address && !address->empty()) {
    return checkLocalAddress(*address, "CHORUS_BIND_ADDR");
  }
  if (auto name = env::string("CHORUS_IFNAME"); name && !name->empty()) {
    return interfaceAddress(*name);
  }
  return std::nullopt;
}

}  // namespace chorus::connector
