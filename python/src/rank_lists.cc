// The table of noted rank_lists (rank_lists.h). A rank_list is compared by its encoding: each
// top-level int as itself, each inner list as kOpen, its ints, kClose (ranks are never negative,
// so the markers cannot be ranks). Encoding the caller's rank_list reuses one buffer, so a warm
// lookup allocates nothing.
#include "rank_lists.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <limits>

namespace chorus::python {
namespace {

constexpr int64_t kOpen = std::numeric_limits<int64_t>::min();
constexpr int64_t kClose = kOpen + 1;
// Beyond this many rank_lists the table stops growing: the package's own cache still serves them.
constexpr size_t kMostRankLists = 64;

struct Entry {
  std::vector<int64_t> encoding;
  RankListTarget target;
};

std::vector<Entry>& table() {
  static auto* entries = new std::vector<Entry>();  // leaked: outlives interpreter teardown
  return *entries;
}

// Appends the exact int `item` (a rank: not negative); false for anything else.
bool appendRank(PyObject* item, std::vector<int64_t>& out) {
  if (!PyLong_CheckExact(item))
    return false;
  int overflow = 0;
  const long long value = PyLong_AsLongLongAndOverflow(item, &overflow);
  if (overflow != 0 || value < 0) {
    PyErr_Clear();
    return false;
  }
  out.push_back(value);
  return true;
}

// The items of a list or tuple, or null for anything else.
PyObject* const* itemsOf(PyObject* sequence, Py_ssize_t& count) {
  if (PyList_CheckExact(sequence)) {
    count = PyList_GET_SIZE(sequence);
    return reinterpret_cast<PyListObject*>(sequence)->ob_item;
  }
  if (PyTuple_CheckExact(sequence)) {
    count = PyTuple_GET_SIZE(sequence);
    return reinterpret_cast<PyTupleObject*>(sequence)->ob_item;
  }
  return nullptr;
}

// `rankList` encoded into `out` (cleared first); false when it is not a list or tuple of ranks or
// of lists or tuples of ranks.
bool encode(PyObject* rankList, std::vector<int64_t>& out) {
  out.clear();
  Py_ssize_t count = 0;
  PyObject* const* entries = itemsOf(rankList, count);
  if (entries == nullptr)
    return false;
  for (Py_ssize_t i = 0; i < count; ++i) {
    if (PyLong_CheckExact(entries[i])) {
      if (!appendRank(entries[i], out))
        return false;
      continue;
    }
    Py_ssize_t ranks = 0;
    PyObject* const* group = itemsOf(entries[i], ranks);
    if (group == nullptr)
      return false;
    out.push_back(kOpen);
    for (Py_ssize_t r = 0; r < ranks; ++r) {
      if (!appendRank(group[r], out))
        return false;
    }
    out.push_back(kClose);
  }
  return true;
}

void noteRankList(const py::object& given, py::object native, const std::vector<int64_t>& members) {
  std::vector<int64_t> encoding;
  if (!encode(given.ptr(), encoding))
    return;  // not as _groups._as_given writes it: never matched, so not kept
  (void)native.cast<Communicator&>();  // a TypeError for anything else
  auto& entries = table();
  for (Entry& entry : entries) {
    if (entry.encoding == encoding) {
      entry.target = RankListTarget{std::move(native), members};
      return;
    }
  }
  if (entries.size() < kMostRankLists)
    entries.push_back(Entry{std::move(encoding), {std::move(native), members}});
}

void forgetRankLists() {
  std::vector<Entry> dropped;
  dropped.swap(table());  // the Communicators go when `dropped` does, the table already empty
}

}  // namespace

std::optional<int64_t> RankListTarget::groupRankOf(int64_t worldRank) const {
  const auto at = std::find(members.begin(), members.end(), worldRank);
  if (at == members.end())
    return std::nullopt;
  return at - members.begin();
}

const RankListTarget* findRankList(PyObject* rankList) {
  static std::vector<int64_t> scratch;  // the GIL holder's
  if (table().empty() || !encode(rankList, scratch))
    return nullptr;
  for (const Entry& entry : table()) {
    if (entry.encoding == scratch)
      return &entry.target;
  }
  return nullptr;
}

void bindRankLists(py::module_& module) {
  module.def("note_rank_list", &noteRankList, py::arg("given"), py::arg("native"),
             py::arg("members"),
             "Tells the fronts' short paths the communicator of a rank_list as the caller wrote it "
             "(as _groups._as_given makes it), and its members' world ranks in group-rank order");
  module.def("forget_rank_lists", &forgetRankLists,
             "Drops every noted rank_list: their calls take the package's general path again");
}

}  // namespace chorus::python
