// Carrying a chorus::Error across processes: an abort notice holds the error's type, message and
// details, so the peer raises the same kind of error (MismatchError stays MismatchError).
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

namespace chorus::detail {

// Serializes the error in `error` (any exception; non-chorus ones become InternalError).
std::vector<uint8_t> encodeError(std::exception_ptr error);
// Rebuilds an error of the same type. Its message is `prefix` followed by the original message.
// Malformed input becomes a PeerError naming `senderRank`.
std::exception_ptr decodeError(const std::vector<uint8_t>& encoded,
                               const std::string& prefix,
                               int senderRank);
// The same error (type and fields), its message prefixed with `prefix` (say where it arose: "in
// the shm step among the ranks of node 1 (ranks 2, 3): "). Anything that is not a chorus::Error
// becomes an InternalError. Never throws (returns `error` unchanged if it cannot).
std::exception_ptr withPrefix(std::exception_ptr error, const std::string& prefix) noexcept;

}  // namespace chorus::detail
