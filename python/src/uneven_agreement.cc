// The agreement of the uneven collectives (uneven_agreement.h). Its small exchanges run on NumPy
// arrays, which the operation keeps alive should a Ctrl-C end the wait before it does.
#include "uneven_agreement.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <string>

#include "short_arrays.h"

namespace chorus::python {
namespace {

// A new int64 NumPy array of rows x columns, and a Tensor over it.
struct Table {
  py::object array;
  Tensor tensor;
  int64_t* at(int64_t row, int64_t columns) const {
    return static_cast<int64_t*>(tensor.data()) + row * columns;
  }
};

Table newTable(int64_t rows, int64_t columns) {
  static const int int64Type = *numpyTypeOf(py::str("int64"));
  const int64_t extents[] = {rows, columns};
  Table table{newArray(int64Type, extents), Tensor()};
  table.tensor = *inputTensor(table.array, true);
  return table;
}

// Runs `issue()` (a collective between `from` and `to`) blocking, as the package's calls do.
template <typename Issue>
void exchange(const Table& from, const Table& to, Issue issue) {
  runOperation(false, issue, [&] { return py::make_tuple(from.array, to.array); });
}

MismatchError refused(const char* operation, int64_t rank) {
  return MismatchError(std::string(operation) + ": group rank " + std::to_string(rank) +
                           "'s call was refused (see its error)",
                       "collective", {});
}

// The most rows any rank sends one rank, after every rank's verdict on its recv_splits (one
// allgather of (peer, rows, expected, the most rows this rank sends one rank)).
int64_t judgeRecvSplits(Communicator& comm,
                        const std::vector<int64_t>& sends,
                        const std::vector<int64_t>* expects,
                        const std::vector<int64_t>& arrives) {
  const int64_t size = comm.size();
  const Table verdict = newTable(1, 4);
  int64_t* mine = verdict.at(0, 4);
  std::fill(mine, mine + 3, -1);
  mine[3] = *std::max_element(sends.begin(), sends.end());
  for (int64_t peer = 0; expects != nullptr && peer < size; ++peer) {
    if (arrives[peer] != (*expects)[peer]) {
      mine[0] = peer;
      mine[1] = arrives[peer];
      mine[2] = (*expects)[peer];
      break;
    }
  }
  const Table verdicts = newTable(size, 4);
  exchange(verdict, verdicts, [&] { return comm.allgather(verdict.tensor, verdicts.tensor, 0); });
  int64_t largest = 0;
  for (int64_t rank = 0; rank < size; ++rank) {
    const int64_t* theirs = verdicts.at(rank, 4);
    if (theirs[0] >= 0) {
      throw MismatchError("all_to_all: group rank " + std::to_string(theirs[0]) + " sends " +
                              std::to_string(theirs[1]) + " rows to group rank " +
                              std::to_string(rank) + ", which expects " +
                              std::to_string(theirs[2]) + " (recv_splits)",
                          "count", {});
    }
    largest = std::max(largest, theirs[3]);
  }
  return largest;
}

}  // namespace

int64_t rowSignature(std::string_view dtype, std::span<const int64_t> dims, bool cuda) {
  uint64_t hash = 14695981039346656037ull;  // FNV-1a
  auto mix = [&](uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) {
      hash ^= (value >> (8 * i)) & 0xff;
      hash *= 1099511628211ull;
    }
  };
  for (const char c : dtype) mix(static_cast<unsigned char>(c), 1);
  mix(dims.size(), 8);
  for (const int64_t dim : dims) mix(static_cast<uint64_t>(dim), 8);
  mix(cuda ? 1 : 0, 1);
  return static_cast<int64_t>(hash >> 1);
}

int64_t rowsSignature(std::string_view dtype, std::span<const int64_t> shape, bool cuda) {
  return rowSignature(dtype, shape.empty() ? shape : shape.subspan(1), cuda);
}

int64_t extentsSignature(std::string_view dtype,
                         std::span<const int64_t> shape,
                         int axis,
                         bool cuda) {
  std::vector<int64_t> dims{static_cast<int64_t>(shape.size()), axis};
  for (size_t d = 0; d < shape.size(); ++d) {
    if (static_cast<int>(d) != axis)
      dims.push_back(shape[d]);
  }
  return rowSignature(dtype, dims, cuda);
}

std::optional<AgreedRows> agreeOnRows(Communicator& comm,
                                      const std::vector<int64_t>* sends,
                                      const std::vector<int64_t>* expects,
                                      int64_t signature,
                                      bool padded) {
  const int64_t size = comm.size();
  // Row p: the rows for p (or -1: refused), the signature, whether this rank checks recv_splits.
  const Table told = newTable(size, 3);
  for (int64_t p = 0; p < size; ++p) {
    int64_t* row = told.at(p, 3);
    row[0] = sends != nullptr ? (*sends)[p] : -1;
    row[1] = signature;
    row[2] = expects != nullptr;
  }
  const Table heard = newTable(size, 3);
  exchange(told, heard, [&] { return comm.allToAll(told.tensor, heard.tensor, 0, 0); });
  if (sends == nullptr)
    return std::nullopt;  // this rank's own error, also where others refused too
  for (int64_t rank = 0; rank < size; ++rank) {
    if (heard.at(rank, 3)[0] < 0)
      throw refused("all_to_all", rank);
  }
  AgreedRows agreed;
  bool anyChecks = false;
  for (int64_t rank = 0; rank < size; ++rank) {
    const int64_t* row = heard.at(rank, 3);
    if (row[1] != heard.at(0, 3)[1]) {
      throw MismatchError("all_to_all: group ranks 0 and " + std::to_string(rank) +
                              " have arrays of different dtypes, devices or dimensions other "
                              "than 0; their rows cannot be exchanged",
                          "dtype", {});
    }
    agreed.arrives.push_back(row[0]);
    anyChecks = anyChecks || row[2] != 0;
  }
  if (padded || anyChecks)
    agreed.largest = judgeRecvSplits(comm, *sends, expects, agreed.arrives);
  return agreed;
}

std::optional<std::vector<int64_t>> agreeOnExtents(Communicator& comm,
                                                   int64_t extent,
                                                   int64_t signature,
                                                   int axis) {
  const int64_t size = comm.size();
  const Table mine = newTable(1, 2);
  mine.at(0, 2)[0] = extent;
  mine.at(0, 2)[1] = signature;
  const Table every = newTable(size, 2);
  exchange(mine, every, [&] { return comm.allgather(mine.tensor, every.tensor, 0); });
  if (extent < 0)
    return std::nullopt;  // this rank's own error, also where others refused too
  std::vector<int64_t> extents;
  for (int64_t rank = 0; rank < size; ++rank) {
    if (every.at(rank, 2)[0] < 0)
      throw refused("allgather", rank);
  }
  for (int64_t rank = 0; rank < size; ++rank) {
    if (every.at(rank, 2)[1] != every.at(0, 2)[1]) {
      throw MismatchError("allgather (uneven=True): group ranks 0 and " + std::to_string(rank) +
                              " have arrays of different dtypes, devices, numbers of dimensions "
                              "or extents other than along axis " +
                              std::to_string(axis),
                          "dtype", {});
    }
    extents.push_back(every.at(rank, 2)[0]);
  }
  return extents;
}

void bindUnevenAgreement(py::module_& module) {
  module.attr("most_rows") = kMostRows;
  module.def(
      "rows_signature",
      [](const std::string& dtype, const std::vector<int64_t>& shape, bool cuda) {
        return rowsSignature(dtype, shape, cuda);
      },
      py::arg("dtype"), py::arg("shape"), py::arg("cuda"),
      "The same int on every rank for rows (the dimensions after the first of `shape`) of one "
      "dtype name and kind of device (all_to_all with splits)");
  module.def(
      "extents_signature",
      [](const std::string& dtype, const std::vector<int64_t>& shape, int axis, bool cuda) {
        return extentsSignature(dtype, shape, axis, cuda);
      },
      py::arg("dtype"), py::arg("shape"), py::arg("axis"), py::arg("cuda"),
      "The same int on every rank for arrays of one dtype name, kind of device, number of "
      "dimensions and extents but along `axis` (allgather with uneven=True)");
  module.def(
      "agree_on_rows",
      [](Communicator& comm, std::optional<std::vector<int64_t>> sends,
         std::optional<std::vector<int64_t>> expects, int64_t signature,
         bool padded) -> py::object {
        for (const auto* counts : {&sends, &expects}) {
          if (*counts && static_cast<int>((*counts)->size()) != comm.size())
            throw InvalidArgumentError("agree_on_rows: a list of " +
                                       std::to_string((*counts)->size()) +
                                       " counts for a group of " + std::to_string(comm.size()));
        }
        const auto agreed = agreeOnRows(comm, sends ? &*sends : nullptr,
                                        expects ? &*expects : nullptr, signature, padded);
        if (!agreed)
          return py::none();
        return py::make_tuple(py::cast(agreed->arrives), py::cast(agreed->largest));
      },
      py::arg("native"), py::arg("sends"), py::arg("expects"), py::arg("signature"),
      py::arg("padded"),
      "all_to_all with splits: (the rows each group rank sends here, the most rows any rank "
      "sends one rank or None), None when this rank's own call was refused (sends None); "
      "MismatchError on every rank otherwise (uneven_agreement.h)");
  module.def(
      "agree_on_extents",
      [](Communicator& comm, int64_t extent, int64_t signature, int axis) -> py::object {
        const auto extents = agreeOnExtents(comm, extent, signature, axis);
        return extents ? py::cast(*extents) : py::none();
      },
      py::arg("native"), py::arg("extent"), py::arg("signature"), py::arg("axis"),
      "allgather with uneven=True: every group rank's extent along the axis, None when this "
      "rank's own call was refused (extent -1); MismatchError on every rank otherwise");
}

}  // namespace chorus::python
