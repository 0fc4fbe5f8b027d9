// The communicators of the rank_lists the package has resolved, for the fronts' short paths
// (front_calls.cc): a call with rank_list= that the package has seen before, written the same way,
// runs on its group's communicator without entering Python.
//
// The package resolves a rank_list once (python/chorus/_groups.py: checked, normalized, its
// communicator made, which is collective) and then tells C++ with
// _chorus.note_rank_list(given, native, members): `given` is the rank_list as the caller wrote it,
// as tuples (_groups._as_given: a tuple of ints, or of tuples of ints); `native` the caller's
// group's Communicator; `members` its world ranks in group-rank order. forget_rank_lists() drops
// them all (_groups.reset). Only the GIL holder reads or changes the table.
//
// A rank_list matches an entry when it has the same structure and ints: a list or tuple of ints,
// or of lists or tuples of ints, each an exact int (bool is not). Anything else, or a rank_list
// not noted yet, finds nothing, and the call takes the package's general path.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "bindings.h"

namespace chorus::python {

struct RankListTarget {
  py::object native;             // the caller's group's Communicator (a Python object)
  std::vector<int64_t> members;  // world ranks, by group rank
  // The group rank of world rank `worldRank`, or nullopt when it is not a member.
  std::optional<int64_t> groupRankOf(int64_t worldRank) const;
};

// The target of the noted rank_list that `rankList` matches, or null. Valid until the caller
// runs Python code or releases the GIL (which may note or forget rank_lists).
const RankListTarget* findRankList(PyObject* rankList);

void bindRankLists(py::module_& module);

}  // namespace chorus::python
