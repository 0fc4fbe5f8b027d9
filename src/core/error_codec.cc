// Encoding a chorus::Error into bytes and back, for abort notices between ranks (error_codec.h).
//
// Wire format, little-endian, every length checked on decode:
//   u8 version (1) | u8 type tag | u32 message length | message bytes | details
// details by type:
//   TimeoutError   u32 count | count x i32 missing ranks
//   PeerError      i32 peer rank
//   MismatchError  u32 field length | field bytes | u32 count | count x i32 ranks
//   others         nothing
// A report that is short, long, of another version or of an unknown type decodes to a PeerError
// naming the sender, so a corrupt notice still fails the collective, with a clear message.
#include "core/error_codec.h"

#include "chorus/error.h"
#include "core/check.h"

namespace chorus::detail {
namespace {

constexpr uint8_t kVersion = 1;

enum class ErrorTag : uint8_t {
  kError = 0,
  kInvalidArgument = 1,
  kTimeout = 2,
  kPeer = 3,
  kMismatch = 4,
  kUnsupported = 5,
  kInternal = 6,
};

class Writer {
 public:
  void u8(uint8_t value) { bytes_.push_back(value); }
  void u32(uint32_t value) {
    for (int shift = 0; shift < 32; shift += 8) {
      bytes_.push_back(static_cast<uint8_t>(value >> shift));
    }
  }
  void i32(int32_t value) { u32(static_cast<uint32_t>(value)); }
  void string(const std::string& value) {
    u32(static_cast<uint32_t>(value.size()));
    bytes_.insert(bytes_.end(), value.begin(), value.end());
  }
  void ranks(const std::vector<int>& ranks) {
    u32(static_cast<uint32_t>(ranks.size()));
    for (int rank : ranks) {
      i32(rank);
    }
  }
  std::vector<uint8_t> take() { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
};

struct MalformedReport {
  const char* reason;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& bytes) : bytes_(bytes) {}
  uint8_t u8() {
    need(1);
    return bytes_[offset_++];
  }
  uint32_t u32() {
    need(4);
    uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
      value |= uint32_t{bytes_[offset_++]} << (8 * i);
    }
    return value;
  }
  int32_t i32() { return static_cast<int32_t>(u32()); }
  std::string string() {
    uint32_t length = u32();
    need(length);
    std::string value(bytes_.begin() + offset_, bytes_.begin() + offset_ + length);
    offset_ += length;
    return value;
  }
  std::vector<int> ranks() {
    uint32_t count = u32();
    need(static_cast<size_t>(count) * 4);  // checked before allocating
    std::vector<int> ranks(count);
    for (auto& rank : ranks) {
      rank = i32();
    }
    return ranks;
  }
  void expectEnd() const {
    if (offset_ != bytes_.size()) {
      throw MalformedReport{"trailing bytes"};
    }
  }

 private:
  void need(size_t count) const {
    if (count > bytes_.size() - offset_) {
      throw MalformedReport{"truncated"};
    }
  }
  const std::vector<uint8_t>& bytes_;
  size_t offset_ = 0;
};

void writeHeader(Writer& out, ErrorTag tag, const std::exception& error) {
  out.u8(kVersion);
  out.u8(static_cast<uint8_t>(tag));
  out.string(error.what());
}

std::vector<uint8_t> encodeCurrent(std::exception_ptr error) {
  Writer out;
  try {
    std::rethrow_exception(error);
  } catch (const TimeoutError& e) {
    writeHeader(out, ErrorTag::kTimeout, e);
    out.ranks(e.missingRanks());
  } catch (const PeerError& e) {
    writeHeader(out, ErrorTag::kPeer, e);
    out.i32(e.peerRank());
  } catch (const MismatchError& e) {
    writeHeader(out, ErrorTag::kMismatch, e);
    out.string(e.field());
    out.ranks(e.ranks());
  } catch (const InvalidArgumentError& e) {
    writeHeader(out, ErrorTag::kInvalidArgument, e);
  } catch (const UnsupportedError& e) {
    writeHeader(out, ErrorTag::kUnsupported, e);
  } catch (const InternalError& e) {
    writeHeader(out, ErrorTag::kInternal, e);
  } catch (const Error& e) {
    writeHeader(out, ErrorTag::kError, e);
  } catch (const std::exception& e) {
    writeHeader(out, ErrorTag::kInternal,
                InternalError(concat("unexpected exception: ", e.what())));
  } catch (...) {
    writeHeader(out, ErrorTag::kInternal,
                InternalError("unknown exception (not derived from std::exception)"));
  }
  return out.take();
}

std::exception_ptr decodeReport(Reader& in, const std::string& prefix) {
  if (in.u8() != kVersion) {
    throw MalformedReport{"unknown format version"};
  }
  auto tag = static_cast<ErrorTag>(in.u8());
  std::string message = prefix + in.string();
  std::exception_ptr result;
  switch (tag) {
    case ErrorTag::kError:
      result = std::make_exception_ptr(Error(message));
      break;
    case ErrorTag::kInvalidArgument:
      result = std::make_exception_ptr(InvalidArgumentError(message));
      break;
    case ErrorTag::kTimeout:
      result = std::make_exception_ptr(TimeoutError(message, in.ranks()));
      break;
    case ErrorTag::kPeer:
      result = std::make_exception_ptr(PeerError(message, in.i32()));
      break;
    case ErrorTag::kMismatch: {
      std::string field = in.string();
      result = std::make_exception_ptr(MismatchError(message, std::move(field), in.ranks()));
      break;
    }
    case ErrorTag::kUnsupported:
      result = std::make_exception_ptr(UnsupportedError(message));
      break;
    case ErrorTag::kInternal:
      result = std::make_exception_ptr(InternalError(message));
      break;
    default:
      throw MalformedReport{"unknown error type"};
  }
  in.expectEnd();
  return result;
}

}  // namespace

std::vector<uint8_t> encodeError(std::exception_ptr error) {
  if (!error) {
    return encodeCurrent(std::make_exception_ptr(InternalError("no error was recorded")));
  }
  return encodeCurrent(error);
}

std::exception_ptr decodeError(const std::vector<uint8_t>& encoded,
                               const std::string& prefix,
                               int senderRank) {
  Reader in(encoded);
  try {
    return decodeReport(in, prefix);
  } catch (const MalformedReport& malformed) {
    return std::make_exception_ptr(
        PeerError(concat(prefix, "rank ", senderRank, " failed, but its error report (",
                         encoded.size(), " bytes) is malformed: ", malformed.reason,
                         "; look at rank ", senderRank, "'s own output for the cause"),
                  senderRank));
  }
}

std::exception_ptr withPrefix(std::exception_ptr error, const std::string& prefix) noexcept {
  if (!error)
    return error;
  try {
    return decodeError(encodeError(error), prefix, -1);
  } catch (...) {
    return error;  // out of memory
  }
}

}  // namespace chorus::detail
