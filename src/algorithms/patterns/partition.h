// Partition math shared by the algorithms: how a vector of `count` elements is cut into one chunk
// per rank when count is not a multiple of the group size, and how a chunk is cut into pipelined
// segments. Pure functions, no I/O.
//
// Chunks are as even as possible: the first `count % parts` chunks get one element more, so chunk
// sizes differ by at most one and chunk c starts at c * base + min(c, extra). Every rank computes
// the same partition from (count, parts), so sender and receiver always agree on a message's size.
//
// Segments: a chunk of n elements is cut into max(1, ceil(n / segmentElements)) even pieces. An
// empty chunk still has one (empty) segment, so every ring step sends at least one message even for
// count 0 (See Note [Collective fingerprint] in core/collective.h).
#pragma once

#include <algorithm>
#include <cstddef>

namespace chorus::algorithms::patterns {

// A contiguous range of elements [offset, offset + count).
struct Block {
  size_t offset = 0;
  size_t count = 0;

  size_t end() const { return offset + count; }
  friend bool operator==(const Block&, const Block&) = default;
};

// Block `index` of `total` elements cut into `parts` blocks whose sizes differ by at most one.
constexpr Block evenBlock(size_t total, size_t parts, size_t index) {
  const size_t base = total / parts;
  const size_t extra = total % parts;
  return Block{index * base + std::min(index, extra), base + (index < extra ? 1 : 0)};
}

// Elements per segment for a target segment size in bytes (at least one element).
constexpr size_t segmentElements(size_t segmentBytes, size_t elementSize) {
  return std::max<size_t>(1, segmentBytes / std::max<size_t>(1, elementSize));
}

// Number of segments a block of `count` elements is cut into: at least one.
constexpr size_t segmentCount(size_t count, size_t elementsPerSegment) {
  return std::max<size_t>(1, (count + elementsPerSegment - 1) / elementsPerSegment);
}

// Segment `index` of `block` (absolute offsets), out of segmentCount(block.count, perSegment).
constexpr Block segmentOf(Block block, size_t elementsPerSegment, size_t index) {
  const Block piece = evenBlock(block.count, segmentCount(block.count, elementsPerSegment), index);
  return Block{block.offset + piece.offset, piece.count};
}

// Calls fn(Block) for each segment of `block`, in order.
template <typename Fn>
void forEachSegment(Block block, size_t elementsPerSegment, Fn&& fn) {
  const size_t segments = segmentCount(block.count, elementsPerSegment);
  for (size_t i = 0; i < segments; ++i) {
    fn(segmentOf(block, elementsPerSegment, i));
  }
}

// Rounds `bytes` up to a multiple of `alignment` (a power of two), for carving one scratch region
// into several aligned areas.
constexpr size_t alignUp(size_t bytes, size_t alignment = 64) {
  return (bytes + alignment - 1) & ~(alignment - 1);
}

}  // namespace chorus::algorithms::patterns
