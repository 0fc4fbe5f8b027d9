// Fuzz target: detail::decodeError (src/core/error_codec.cc), the decoder of abort notices that a
// peer rank sends when it fails.
//
// Input: arbitrary bytes, decoded as an abort notice. Properties checked:
//   - decoding never reads out of bounds, overflows or allocates from an unchecked count (the
//     sanitizers and libFuzzer's malloc limit catch these);
//   - the result is always a chorus::Error (malformed notices become PeerError);
//   - decode(encode(decode(x))) re-encodes to the same bytes: what the decoder accepts, the encoder
//     writes back unchanged.
#include <cstdint>
#include <exception>
#include <vector>

#include "chorus/error.h"
#include "core/error_codec.h"
#include "fuzz_util.h"

namespace {

// Decodes `encoded` with an empty prefix, requiring a chorus::Error.
std::exception_ptr decodeChecked(const std::vector<uint8_t>& encoded) {
  std::exception_ptr error = chorus::detail::decodeError(encoded, "", 5);
  CHORUS_FUZZ_REQUIRE(error != nullptr);
  try {
    std::rethrow_exception(error);
  } catch (const chorus::Error&) {
  } catch (...) {
    CHORUS_FUZZ_REQUIRE(!"decodeError returned an error outside chorus::Error");
  }
  return error;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> input(data, data + size);
  std::vector<uint8_t> once = chorus::detail::encodeError(decodeChecked(input));
  std::vector<uint8_t> twice = chorus::detail::encodeError(decodeChecked(once));
  CHORUS_FUZZ_REQUIRE(once == twice);
  // A prefix is prepended to the decoded message, whatever the input.
  (void)chorus::detail::decodeError(input, "rank 0 (this process): ", -1);
  return 0;
}
