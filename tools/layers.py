"""Checks and draws the #include edges between chorus's layers (DESIGN §2, docs/design.md).

    /usr/bin/python3 tools/layers.py             # same as --check
    /usr/bin/python3 tools/layers.py --check     # exit 1 on an upward, skipping or internal include
    /usr/bin/python3 tools/layers.py --markdown  # table and Mermaid diagram of the edges, for docs/
    /usr/bin/python3 tools/layers.py --root DIR  # another tree (a worktree, a synthetic test tree)

Every file under src/, include/chorus/*.h and python/src/ belongs to a layer: src/<folder>/ to that
folder, a public header to the layer that implements it (PUBLIC_HEADERS), python/src/ to python.
Each `#include "x/y.h"` names its target layer by its first component ("core/...", "transport/...")
or, for "chorus/...", by PUBLIC_HEADERS. Includes within a layer and includes of anything else
(system, third-party, same-folder "bindings.h") are not edges. An edge not in ALLOWED is a
violation: "upward" if the target is above the source in ORDER, else "skips a layer"; an allowed
edge from a layer in PUBLIC_ONLY that names a src-internal header instead of "chorus/..." is an
"internal header". Standard library only. Exit status: 0 clean, 1 violations, 2 an unknown public
header or src/ folder (add it to the tables below).
"""

import argparse
import fnmatch
import os
import re
import sys
from collections import Counter
from pathlib import Path

# Bottom to top; layers on one row share a rank. trace (the flight recorder, DESIGN §2) sits just
# above core: a leaf that the runtime records into and that parallel marks spans in.
ORDER = [["core"], ["trace"], ["store"], ["connector"], ["transport"], ["algorithms"], ["backend"],
         ["runtime"], ["parallel"], ["python", "api"]]
RANK = {layer: rank for rank, row in enumerate(ORDER) for layer in row}
SRC_LAYERS = {"core", "trace", "store", "connector", "transport", "algorithms", "backend",
              "runtime", "parallel"}

# include/chorus/<name>: the layer that implements it (fnmatch patterns allowed).
PUBLIC_HEADERS = [
    ("types.h", "core"), ("tensor.h", "core"), ("error.h", "core"), ("huge_pages.h", "core"),
    ("copy_bytes.h", "core"),
    ("key_value_store.h", "core"),  # an interface only: vocabulary, like tensor.h
    ("work.h", "runtime"), ("communicator.h", "runtime"), ("dist_context.h", "runtime"),
    ("stream.h", "runtime"),
    ("gradient_reducer.h", "parallel"), ("zero*.h", "parallel"), ("shard_plan.h", "parallel"),
    ("*optimizer*.h", "parallel"),
    ("trace.h", "trace"),
    ("chorus.h", "api"),  # the umbrella: everything a user includes
]

# Who may include whom, besides core, which every layer may include (the shared vocabulary: tensors,
# dtypes, errors, the collective descriptor, argument structs, workspaces).
ALLOWED = {
    "core": set(),  # the bottom: includes nobody
    "trace": set(),  # a leaf utility (preallocated rings); records, calls nobody
    "store": set(),  # rendezvous needs only core's sockets and errors
    "connector": {"store"},  # bootstrap = fill a store from chorusrun's or MPI's environment
    # peers exchange addresses (and shm segment names) through the store; over MPI, the members'
    # MPI communicator comes from the connector's MPI environment (connector/mpi_comm.h)
    "transport": {"store", "connector"},
    "algorithms": {"transport"},  # an algorithm knows only send/recv/wait on peers
    # owns the transport it runs over (shm and mpi use no algorithm); runs algorithms over it
    "backend": {"store", "connector", "transport", "algorithms", "trace"},
    # builds a backend from a store and a connector; records operations (the flight recorder)
    "runtime": {"store", "connector", "backend", "trace"},
    "parallel": {"runtime", "trace"},  # training on top of Communicator and Work; marks spans
    # bindings of the public API (python/src/bindings.h includes the umbrella chorus.h)
    "python": {"runtime", "parallel", "api", "trace"},
    "api": {"runtime", "parallel", "trace"},  # the umbrella header lists the public headers
}
# Layers whose includes of these layers must name a public "chorus/..." header: the public API is
# the boundary there (python/src is type conversion only; parallel sees the runtime as a user does).
PUBLIC_ONLY = {"python": {"core", "runtime", "parallel", "trace"},
               "parallel": {"runtime", "trace"}}

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
SOURCE_SUFFIXES = {".h", ".hpp", ".cc", ".cpp", ".cu", ".cuh"}


class LayerError(Exception):
    """A file or include the tables do not know: the maintainer adds a row."""


def public_header_layer(name):
    for pattern, layer in PUBLIC_HEADERS:
        if fnmatch.fnmatchcase(name, pattern):
            return layer
    raise LayerError(f'include/chorus/{name}: unknown public header; add it to PUBLIC_HEADERS in '
                     f'tools/layers.py with the layer that implements it')


def source_files(root):
    """Yields (path relative to root, layer) for every C++ file of a layer, sorted."""
    found = []
    for base in ("src", "python/src"):
        for directory, _, names in os.walk(root / base):
            for name in names:
                path = Path(directory, name)
                if path.suffix in SOURCE_SUFFIXES:
                    found.append(path.relative_to(root))
    found += [p.relative_to(root) for p in (root / "include/chorus").glob("*.h")]
    for rel in sorted(found, key=lambda p: p.as_posix()):
        parts = rel.parts
        if parts[0] == "python":
            yield rel, "python"
        elif parts[0] == "include":
            yield rel, public_header_layer(parts[-1])
        elif len(parts) > 2 and parts[1] in SRC_LAYERS:
            yield rel, parts[1]
        else:
            raise LayerError(f"{rel.as_posix()}: not in a known layer folder; add the folder to "
                             f"SRC_LAYERS, ORDER and ALLOWED in tools/layers.py")


def target_layer(include):
    """The layer an include names, or None when it is not one of chorus's headers."""
    first, _, rest = include.partition("/")
    if not rest:
        return None
    if first == "chorus":
        return public_header_layer(rest)
    return first if first in SRC_LAYERS else None


def classify(source, target, include):
    """None for an allowed edge, else the kind of violation."""
    if target != "core" and target not in ALLOWED[source]:
        return "upward" if RANK[target] > RANK[source] else "skips a layer"
    if target in PUBLIC_ONLY.get(source, ()) and not include.startswith("chorus/"):
        return "internal header"
    return None


def scan(root):
    """Returns the list of edges (file, line, source layer, target layer, include, violation)."""
    edges = []
    for rel, source in source_files(root):
        with open(root / rel, encoding="utf-8", errors="replace") as handle:
            for number, text in enumerate(handle, 1):
                match = INCLUDE.match(text)
                if not match:
                    continue
                include = match.group(1)
                target = target_layer(include)
                if target is None or target == source:
                    continue
                edges.append((rel.as_posix(), number, source, target, include,
                              classify(source, target, include)))
    return edges


def check(edges):
    violations = [e for e in edges if e[5]]
    for path, number, source, target, include, kind in violations:
        print(f'{path}:{number}: {source} -> {target} ({kind}): #include "{include}"')
    if violations:
        print(f"layers: {len(violations)} violation(s) of the allowed table in tools/layers.py "
              f"(see docs/design.md)", file=sys.stderr)
        return 1
    pairs = {(e[2], e[3]) for e in edges}
    print(f"layers: OK: {len(edges)} include lines over {len(pairs)} layer pairs, "
          f"none upward, skipping a layer or through an internal header")
    return 0


def by_rank(layers):
    return sorted(layers, key=lambda layer: (RANK[layer], layer))


def markdown(edges):
    counts = Counter((e[2], e[3]) for e in edges)
    bad = Counter((e[2], e[3]) for e in edges if e[5])
    layers = by_rank({e[2] for e in edges} | {e[3] for e in edges})
    lines = ["Include lines from the layer of the row to the layer of the column (generated by",
             "`tools/layers.py --markdown`; a cell with violations says how many).", "",
             "| includes → | " + " | ".join(layers) + " |",
             "|---|" + "---|" * len(layers)]
    for source in layers:
        cells = []
        for target in layers:
            n, k = counts[(source, target)], bad[(source, target)]
            cells.append("" if n == 0 else f"{n} ({k} violating)" if k else str(n))
        lines.append(f"| **{source}** | " + " | ".join(cells) + " |")
    lines += ["", "```mermaid", "graph TD"]
    red = []
    for index, (source, target) in enumerate(
            sorted(counts, key=lambda p: (-RANK[p[0]], p[0], -RANK[p[1]], p[1]))):
        n, k = counts[(source, target)], bad[(source, target)]
        if k:
            label = f"{n}, {k} violating" if k < n else str(n)
            lines.append(f'  {source} -.->|"{label}"| {target}')
            red.append(str(index))
        else:
            lines.append(f"  {source} -->|{n}| {target}")
    if red:  # dashed red edges; the layers they leave get the class "violation"
        lines.append(f"  linkStyle {','.join(red)} stroke:#d00,color:#d00")
        lines.append("  classDef violation stroke:#d00,stroke-width:2px")
        violators = by_rank({e[2] for e in edges if e[5]})
        lines.append("  class " + ",".join(violators) + " violation")
    lines.append("```")
    violations = [e for e in edges if e[5]]
    lines += ["", f"Violations: {len(violations) or 'none'}"]
    lines += [f'- `{path}:{number}`: {source} → {target} ({kind}): `#include "{include}"`'
              for path, number, source, target, include, kind in violations]
    print("\n".join(lines))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="report violations, exit 1 if any")
    mode.add_argument("--markdown", action="store_true", help="print the table and diagram")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="repository root (default: the one holding this script)")
    args = parser.parse_args(argv)
    try:
        edges = scan(args.root.resolve())
    except LayerError as error:
        print(f"layers: error: {error}", file=sys.stderr)
        return 2
    return markdown(edges) if args.markdown else check(edges)


if __name__ == "__main__":
    sys.exit(main())
