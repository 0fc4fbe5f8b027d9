// The agreement that opens the uneven collectives from Python (all_to_all with splits, allgather
// with uneven=True): before any row moves, the ranks learn what each will send and check that
// their calls fit together, so that a call one rank refuses, rows of different kinds, or
// recv_splits that disagree raise an error on every rank alike, naming the same rank.
//
// The package's general path (python/chorus/_uneven.py) and the short paths (short_uneven.cc)
// both call these, so a rank on one path and a rank on the other make the same collectives.
//
// Contract:
//  - rowSignature(dtype, dims, cuda): the same int64 (non-negative) on every rank for the same
//    chorus dtype name, dimensions and kind of device; different ones differ but for a 64-bit
//    hash collision. rowsSignature(dtype, shape, cuda) is that of the rows of an array of `shape`
//    (its dimensions after the first; all_to_all), extentsSignature(dtype, shape, axis, cuda) of
//    its number of dimensions, `axis` and every extent but along it (allgather): both paths
//    compute them here, so that they agree.
//  - agreeOnRows(comm, sends, expects, signature, padded): one even all_to_all on `comm` of three
//    int64 per pair (the rows for that rank, or -1 when this rank's call was refused: `sends`
//    null; the signature; whether this rank passed recv_splits, `expects`). Returns the rows each
//    group rank sends here and, when `padded` or some rank passed recv_splits, the most rows any
//    rank sends one rank (one allgather of every rank's verdict on its recv_splits, which also
//    carries that). nullopt when this rank's call was refused (the caller raises its own error,
//    whatever the others did). MismatchError, naming the first rank that refused, when another
//    rank refused; also when signatures differ or recv_splits disagree with what arrives. `sends`
//    and `expects` have comm.size() entries (the binding checks, before anything is sent).
//  - agreeOnExtents(comm, extent, signature, axis): one allgather of (extent, signature) per
//    rank, -1 for a refused call; every rank's extent, nullopt or MismatchError as above.
//  - Blocking collectives on `comm`, GIL held on entry (released while they run).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "bindings.h"

namespace chorus::python {

// The most rows a rank may send another, plus one: both paths refuse counts from here up
// (_chorus.most_rows, which python/chorus/_uneven.py reads).
inline constexpr int64_t kMostRows = int64_t{1} << 62;

int64_t rowSignature(std::string_view dtype, std::span<const int64_t> dims, bool cuda);
int64_t rowsSignature(std::string_view dtype, std::span<const int64_t> shape, bool cuda);
int64_t extentsSignature(std::string_view dtype,
                         std::span<const int64_t> shape,
                         int axis,
                         bool cuda);

struct AgreedRows {
  std::vector<int64_t> arrives;    // by group rank: the rows it sends this rank
  std::optional<int64_t> largest;  // the most rows a rank sends one rank (see above)
};

std::optional<AgreedRows> agreeOnRows(Communicator& comm,
                                      const std::vector<int64_t>* sends,
                                      const std::vector<int64_t>* expects,
                                      int64_t signature,
                                      bool padded);

std::optional<std::vector<int64_t>> agreeOnExtents(Communicator& comm,
                                                   int64_t extent,
                                                   int64_t signature,
                                                   int axis);

// rows_signature, extents_signature, agree_on_rows and agree_on_extents for
// python/chorus/_uneven.py.
void bindUnevenAgreement(py::module_& module);

}  // namespace chorus::python
