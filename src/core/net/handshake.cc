// Mutual HMAC-SHA256 challenge-response over the job token. See Note [Authenticated handshake]
// (handshake.h).
//
// Wire sizes (all fixed; ids are 8-byte little-endian):
//   hello     = magic (8) | Nc (32)                      40 bytes, client -> server
//   challenge = Ns (32) | server id (8) | server MAC (32) 72 bytes, server -> client
//   response  = client id (8) | client MAC (32)          40 bytes, client -> server
//   verdict   = 1 byte (1 accepted, 0 refused)            server -> client
// Cost: two round trips and four HMACs over ~100 bytes; microseconds beside the connection set-up.
// MACs are compared with CRYPTO_memcmp (constant time), so timing does not leak how much matched.
#include "core/net/handshake.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <array>
#include <cstring>
#include <vector>

#include "chorus/error.h"
#include "core/check.h"
#include "core/net/socket.h"

namespace chorus::net {
namespace {

constexpr char kMagic[8] = {'C', 'H', 'O', 'R', 'U', 'S', 'H', '1'};
constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;
constexpr size_t kIdBytes = 8;
constexpr uint8_t kAccepted = 1;
constexpr uint8_t kRefused = 0;

using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;

// OpenSSL without its exit-time cleanup (OPENSSL_cleanup, an atexit handler). A program's global
// communicator, and the TCP store its rank 0 serves, may be destroyed after that handler ran (it
// was built before OpenSSL's first use); the store's connection threads, joined then, would end
// after OpenSSL dropped its per-thread state (error queue, random generator), which then leaks
// (LeakSanitizer reports it). Without the handler every thread's state is freed as it ends.
void initOpenSsl() {
  static const int initialized = OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr);
  (void)initialized;  // a failed initialization makes RAND_bytes or HMAC fail, which is reported
}

void randomBytes(uint8_t* out, size_t bytes) {
  initOpenSsl();
  if (RAND_bytes(out, static_cast<int>(bytes)) != 1) {
    throw Error("OpenSSL's random generator failed (RAND_bytes); the system has no entropy source");
  }
}

void putId(uint8_t* out, uint64_t id) {
  for (size_t i = 0; i < kIdBytes; ++i) out[i] = static_cast<uint8_t>(id >> (8 * i));
}

uint64_t getId(const uint8_t* in) {
  uint64_t id = 0;
  for (size_t i = 0; i < kIdBytes; ++i) id |= static_cast<uint64_t>(in[i]) << (8 * i);
  return id;
}

// HMAC-SHA256(token, label | purpose | first | second | id).
Mac computeMac(const std::string& token,
               std::string_view label,
               std::string_view purpose,
               const Nonce& first,
               const Nonce& second,
               uint64_t id) {
  std::vector<uint8_t> message;
  message.reserve(label.size() + purpose.size() + 2 * kNonceBytes + kIdBytes);
  message.insert(message.end(), label.begin(), label.end());
  message.insert(message.end(), purpose.begin(), purpose.end());
  message.insert(message.end(), first.begin(), first.end());
  message.insert(message.end(), second.begin(), second.end());
  uint8_t idBytes[kIdBytes];
  putId(idBytes, id);
  message.insert(message.end(), idBytes, idBytes + kIdBytes);

  Mac mac{};
  unsigned int length = 0;
  initOpenSsl();
  if (HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()), message.data(),
           message.size(), mac.data(), &length) == nullptr ||
      length != kMacBytes) {
    throw Error("OpenSSL's HMAC-SHA256 failed during the connection handshake");
  }
  return mac;
}

bool macsEqual(const Mac& a, const uint8_t* b) {
  return CRYPTO_memcmp(a.data(), b, kMacBytes) == 0;
}

}  // namespace

uint64_t clientHandshake(int fd,
                         const std::string& token,
                         std::string_view purpose,
                         uint64_t clientId,
                         Deadline deadline) {
  Nonce clientNonce;
  randomBytes(clientNonce.data(), kNonceBytes);
  uint8_t hello[sizeof(kMagic) + kNonceBytes];
  std::memcpy(hello, kMagic, sizeof(kMagic));
  std::memcpy(hello + sizeof(kMagic), clientNonce.data(), kNonceBytes);
  sendAll(fd, hello, sizeof(hello), deadline);

  uint8_t challenge[kNonceBytes + kIdBytes + kMacBytes];
  recvAll(fd, challenge, sizeof(challenge), deadline);
  Nonce serverNonce;
  std::memcpy(serverNonce.data(), challenge, kNonceBytes);
  uint64_t serverId = getId(challenge + kNonceBytes);
  Mac expected = computeMac(token, "server", purpose, clientNonce, serverNonce, serverId);
  if (!macsEqual(expected, challenge + kNonceBytes + kIdBytes)) {
    throw Error(detail::concat(
        "authentication failed for \"", purpose,
        "\": the server does not hold this job's token (is it another job's server, or was the "
        "token set differently for this process?)"));
  }

  uint8_t response[kIdBytes + kMacBytes];
  putId(response, clientId);
  Mac proof = computeMac(token, "client", purpose, serverNonce, clientNonce, clientId);
  std::memcpy(response + kIdBytes, proof.data(), kMacBytes);
  sendAll(fd, response, sizeof(response), deadline);

  uint8_t verdict = kRefused;
  recvAll(fd, &verdict, 1, deadline);
  if (verdict != kAccepted) {
    throw Error(detail::concat("authentication failed for \"", purpose,
                               "\": the server refused this process's proof of the job token"));
  }
  return serverId;
}

uint64_t serverHandshake(int fd,
                         const std::string& token,
                         std::string_view purpose,
                         uint64_t serverId,
                         Deadline deadline) {
  uint8_t hello[sizeof(kMagic) + kNonceBytes];
  recvAll(fd, hello, sizeof(hello), deadline);
  if (std::memcmp(hello, kMagic, sizeof(kMagic)) != 0) {
    throw Error(detail::concat("refused a connection for \"", purpose,
                               "\": it did not start with the chorus handshake (not a chorus "
                               "client, or a different chorus version)"));
  }
  Nonce clientNonce;
  std::memcpy(clientNonce.data(), hello + sizeof(kMagic), kNonceBytes);

  Nonce serverNonce;
  randomBytes(serverNonce.data(), kNonceBytes);
  uint8_t challenge[kNonceBytes + kIdBytes + kMacBytes];
  std::memcpy(challenge, serverNonce.data(), kNonceBytes);
  putId(challenge + kNonceBytes, serverId);
  Mac proof = computeMac(token, "server", purpose, clientNonce, serverNonce, serverId);
  std::memcpy(challenge + kNonceBytes + kIdBytes, proof.data(), kMacBytes);
  sendAll(fd, challenge, sizeof(challenge), deadline);

  uint8_t response[kIdBytes + kMacBytes];
  recvAll(fd, response, sizeof(response), deadline);
  uint64_t clientId = getId(response);
  Mac expected = computeMac(token, "client", purpose, serverNonce, clientNonce, clientId);
  if (!macsEqual(expected, response + kIdBytes)) {
    uint8_t verdict = kRefused;
    try {
      sendAll(fd, &verdict, 1, deadline);
    } catch (const Error&) {
      // The client is already gone; the refusal below is what matters.
    }
    throw Error(detail::concat("refused a connection for \"", purpose,
                               "\": the client does not hold this job's token"));
  }
  uint8_t verdict = kAccepted;
  sendAll(fd, &verdict, 1, deadline);
  return clientId;
}

std::string generateToken() {
  uint8_t raw[32];
  randomBytes(raw, sizeof(raw));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  token.reserve(2 * sizeof(raw));
  for (uint8_t byte : raw) {
    token.push_back(kHex[byte >> 4]);
    token.push_back(kHex[byte & 0xF]);
  }
  return token;
}

}  // namespace chorus::net
