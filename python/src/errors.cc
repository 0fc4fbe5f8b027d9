// Maps the C++ error hierarchy (include/chorus/error.h) onto Python exception classes of the same
// names: chorus.Error (a RuntimeError) and its subclasses InvalidArgumentError (also a ValueError),
// TimeoutError (also the builtin TimeoutError), PeerError, MismatchError, UnsupportedError and
// InternalError. The structured fields travel as attributes: missing_ranks, peer_rank, field,
// ranks.
#include <pybind11/stl.h>

#include "bindings.h"

namespace chorus::python {
namespace {

struct ErrorClasses {
  PyObject* error = nullptr;
  PyObject* invalidArgument = nullptr;
  PyObject* timeout = nullptr;
  PyObject* peer = nullptr;
  PyObject* mismatch = nullptr;
  PyObject* unsupported = nullptr;
  PyObject* internal = nullptr;
};

// Owned by the module for the life of the interpreter (module attributes keep them alive).
ErrorClasses classes;

PyObject* makeClass(py::module_& module, const char* name, py::tuple bases, const char* doc) {
  std::string qualified = std::string("chorus.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (type == nullptr)
    throw py::error_already_set();
  module.attr(name) = py::handle(type);
  return type;
}

// Raises an instance of `type` carrying `message` and the given attributes.
void raise(PyObject* type, const char* message, py::dict attributes) {
  py::object instance = py::reinterpret_borrow<py::object>(type)(message);
  for (auto item : attributes) py::setattr(instance, item.first, item.second);
  PyErr_SetObject(type, instance.ptr());
}

void translate(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const InvalidArgumentError& e) {
    raise(classes.invalidArgument, e.what(), py::dict());
  } catch (const TimeoutError& e) {
    raise(classes.timeout, e.what(), py::dict(py::arg("missing_ranks") = e.missingRanks()));
  } catch (const PeerError& e) {
    raise(classes.peer, e.what(), py::dict(py::arg("peer_rank") = e.peerRank()));
  } catch (const MismatchError& e) {
    raise(classes.mismatch, e.what(),
          py::dict(py::arg("field") = e.field(), py::arg("ranks") = e.ranks()));
  } catch (const UnsupportedError& e) {
    raise(classes.unsupported, e.what(), py::dict());
  } catch (const InternalError& e) {
    raise(classes.internal, e.what(), py::dict());
  } catch (const Error& e) {
    raise(classes.error, e.what(), py::dict());
  }
}

}  // namespace

void bindErrors(py::module_& module) {
  py::object builtins = py::module_::import("builtins");
  classes.error = makeClass(module, "Error", py::make_tuple(builtins.attr("RuntimeError")),
                            "Base class of every chorus failure.");
  py::handle base(classes.error);
  classes.invalidArgument =
      makeClass(module, "InvalidArgumentError", py::make_tuple(base, builtins.attr("ValueError")),
                "A bad argument; nothing was sent and nothing was changed.");
  classes.timeout =
      makeClass(module, "TimeoutError", py::make_tuple(base, builtins.attr("TimeoutError")),
                "A deadline passed; missing_ranks lists the ranks not heard from.");
  classes.peer = makeClass(module, "PeerError", py::make_tuple(base),
                           "A peer died or aborted; peer_rank names it (-1 when unknown).");
  classes.mismatch =
      makeClass(module, "MismatchError", py::make_tuple(base),
                "Ranks called a collective inconsistently; field and ranks say how.");
  classes.unsupported = makeClass(module, "UnsupportedError", py::make_tuple(base),
                                  "A valid request this build or backend cannot serve.");
  classes.internal = makeClass(module, "InternalError", py::make_tuple(base),
                               "A bug in chorus; please report it with the message.");
  py::register_exception_translator(&translate);
}

}  // namespace chorus::python
