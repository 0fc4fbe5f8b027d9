// Which local address a node's listening sockets (the store, the transports) bind.
//
// Note [Bind address]
// A listener is reachable by whoever can route to the address it binds, so chorus never binds
// every interface unless told to in so many words:
//  - One node: the store and every transport listener bind 127.0.0.1 (unless --bind says
//    otherwise).
//  - Several nodes: `chorusrun --bind ADDR` (or CHORUS_IFNAME=<interface>, resolved to that
//    interface's IPv4 address with getifaddrs) names the address; node 0's store binds it (on
//    --master's port) and every rank's transports bind it (chorusrun exports it as
//    CHORUS_BIND_ADDR). Without either, node 0's store binds the --master host, and ranks bind the
//    interface they use to reach the store.
//  - 0.0.0.0 (every interface) only as an explicit `--bind 0.0.0.0`; a wildcard --master or
//    MASTER_ADDR is refused, saying so.
// ADDR must be an IPv4 address of this host; anything else is refused with the host's addresses.
//
// Thread-safe (no state). Errors are chorus::InvalidArgumentError naming where the value came from.
#pragma once

#include <optional>
#include <string>

namespace chorus::connector {

// True for the addresses that mean "every interface": "0.0.0.0", "::", "" and "*".
bool isWildcardAddress(const std::string& host);

// The IPv4 address of the interface called `name` (e.g. "lo", "eth0"); InvalidArgumentError
// naming the interfaces this host has when it has none such, or when it has no IPv4 address.
std::string interfaceAddress(const std::string& name);

// Returns `address` if it is an IPv4 address of this host, or 0.0.0.0; InvalidArgumentError
// (naming `source`, e.g. "--bind", and this host's addresses) otherwise.
std::string checkLocalAddress(const std::string& address, const std::string& source);

// The launcher's explicitly requested bind address: `bindOption` (checked) when non-empty, else
// the address of the interface named by CHORUS_IFNAME; std::nullopt when neither is set.
std::optional<std::string> launcherBindAddress(const std::string& bindOption);

// A rank's: CHORUS_BIND_ADDR (set by chorusrun; checked), else the address of the interface named
// by CHORUS_IFNAME; std::nullopt when neither is set.
std::optional<std::string> rankBindAddress();

}  // namespace chorus::connector
