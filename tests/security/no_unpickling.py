#!/usr/bin/python3
"""Checks that nothing in the given directories deserializes code-carrying formats.

DESIGN §8: "Nothing is unpickled." Received or stored data must be parsed as plain data (raw
tensors, JSON, fixed binary headers), never with pickle and its relatives, which run code while
loading. This scans Python sources (and the pybind11 C++ that could call into Python) for:
pickle / cPickle / marshal / shelve / dill / cloudpickle / jsonpickle / joblib, eval / exec /
compile / __import__ on anything, torch.load without weights_only=True, numpy loads with
allow_pickle=True, and yaml.load / yaml.unsafe_load. Comment lines are ignored. A self-test first
feeds it known-bad and known-good lines, so the scan itself is checked.

Usage: no_unpickling.py DIR [DIR...]; exits 1 naming every offending file:line.
"""

import os
import re
import sys

UNSAFE_MODULES = r"(?:c?pickle|_pickle|marshal|shelve|dill|cloudpickle|jsonpickle|joblib)"
PYTHON_PATTERNS = [
    (re.compile(r"^\s*(?:import|from)\s+" + UNSAFE_MODULES + r"\b"), "imports a pickle-like module"),
    (re.compile(r"(?<![\w.])" + UNSAFE_MODULES + r"\s*\."), "uses a pickle-like module"),
    (re.compile(r"__import__\s*\(\s*['\"]" + UNSAFE_MODULES), "imports a pickle-like module"),
    (re.compile(r"(?<![\w.])(?:eval|exec|compile|__import__)\s*\("), "evaluates code"),
    (re.compile(r"\btorch\.load\s*\((?!.*weights_only\s*=\s*True)"),
     "torch.load without weights_only=True (unpickles)"),
    (re.compile(r"allow_pickle\s*=\s*True"), "allow_pickle=True (unpickles)"),
    (re.compile(r"\byaml\.(?:unsafe_)?load\s*\("), "yaml.load (constructs arbitrary objects)"),
    (re.compile(r"__reduce(?:_ex)?__|__setstate__"), "defines pickling hooks"),
]
CXX_PATTERNS = [
    (re.compile(r"\"(?:c?pickle|_pickle|marshal|shelve|dill|cloudpickle)\""),
     "imports a pickle-like module from C++"),
    (re.compile(r"\bpy::(?:eval|exec|eval_file)\b|\bPyRun_|\bPyMarshal_"), "evaluates Python code"),
    (re.compile(r"py::pickle\s*\("), "makes a type picklable"),
]
PYTHON_SUFFIXES = (".py", ".pyi", ".pyx")
CXX_SUFFIXES = (".cc", ".cpp", ".cxx", ".h", ".hpp")


def offences(line, patterns):
    stripped = line.strip()
    if stripped.startswith("#") or stripped.startswith("//"):
        return []
    return [why for pattern, why in patterns if pattern.search(line)]


def self_test():
    bad = ["import pickle", "from pickle import loads", "obj = pickle.loads(data)",
           "import marshal", "x = marshal.loads(b)", "import shelve", "import cloudpickle",
           "value = eval(text)", "exec(payload)", "code = compile(src, 'f', 'exec')",
           "m = __import__('pickle')", "state = torch.load(path)",
           "a = np.load(f, allow_pickle=True)", "cfg = yaml.load(stream)",
           "    def __reduce__(self):", "import _pickle as p"]
    good = ["state = torch.load(path, weights_only=True)", "pattern = re.compile(r'x')",
            "# pickle is never used", "a = np.load(f)", "cfg = yaml.safe_load(stream)",
            "result = evaluate(x)", "os.execvp(prog, args)", "picklable = False",
            "self.executor = None"]
    bad_cxx = ['auto pickle = py::module_::import("pickle");', "py::eval(code);",
               'PyRun_SimpleString("x");']
    good_cxx = ['py::module_::import("numpy");', "// \"pickle\" is never imported"]
    wrong = [line for line in bad if not offences(line, PYTHON_PATTERNS)]
    wrong += [line for line in good if offences(line, PYTHON_PATTERNS)]
    wrong += [line for line in bad_cxx if not offences(line, CXX_PATTERNS)]
    wrong += [line for line in good_cxx if offences(line, CXX_PATTERNS)]
    for line in wrong:
        print(f"self-test: misjudged {line!r}")
    return not wrong


def scan(root):
    found = []
    scanned = 0
    for directory, _, files in os.walk(root):
        if "__pycache__" in directory:
            continue
        for name in files:
            if name.endswith(PYTHON_SUFFIXES):
                patterns = PYTHON_PATTERNS
            elif name.endswith(CXX_SUFFIXES):
                patterns = CXX_PATTERNS
            else:
                continue
            path = os.path.join(directory, name)
            scanned += 1
            with open(path, encoding="utf-8", errors="replace") as f:
                for number, line in enumerate(f, 1):
                    for why in offences(line, patterns):
                        found.append(f"{path}:{number}: {why}: {line.strip()}")
    return found, scanned


def main():
    roots = sys.argv[1:]
    if not roots:
        print(__doc__)
        return 2
    if not self_test():
        return 1
    problems = []
    for root in roots:
        if not os.path.isdir(root):
            problems.append(f"{root}: not a directory")
            continue
        found, scanned = scan(root)
        print(f"{root}: scanned {scanned} source files")
        if scanned == 0:
            problems.append(f"{root}: no source files found (wrong directory?)")
        problems += found
    for problem in problems:
        print(problem)
    print("no_unpickling: " + ("OK" if not problems else f"{len(problems)} problem(s)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
