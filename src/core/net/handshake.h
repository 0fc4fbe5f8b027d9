// Mutual authentication of a fresh connection with the job token.
//
// Note [Authenticated handshake]
// Every store and transport connection opens with this exchange, before any request is parsed:
//
//   client -> server   magic "CHORUSH1", client nonce Nc (32 random bytes)
//   server -> client   server nonce Ns, server id, HMAC-SHA256(token, "server" | purpose | Nc | Ns
//   | id) client -> server   client id, HMAC-SHA256(token, "client" | purpose | Ns | Nc | id)
//   server -> client   one byte: 1 = accepted
//
// Both sides prove they hold the token without revealing it. A recorded handshake cannot be
// replayed, because the other side's nonce is fresh each time. `purpose` ("store",
// "tcp-transport/<scope>") binds the proof to one use. The ids (a rank, for transports) are
// authenticated too. Messages have fixed sizes, so nothing from an unauthenticated peer is
// length-parsed. Failures throw chorus::Error (wrong token, wrong magic) or TimeoutError (the peer
// went quiet); servers just drop such a connection.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/deadline.h"

namespace chorus::net {

// Returns the server's id.
uint64_t clientHandshake(int fd,
                         const std::string& token,
                         std::string_view purpose,
                         uint64_t clientId,
                         Deadline deadline);
// Returns the client's id.
uint64_t serverHandshake(int fd,
                         const std::string& token,
                         std::string_view purpose,
                         uint64_t serverId,
                         Deadline deadline);

// A fresh random job token: 64 hex characters from OpenSSL's CSPRNG.
std::string generateToken();

}  // namespace chorus::net
