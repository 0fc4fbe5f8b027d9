"""Tests of tools/layers.py on small synthetic trees, each written to a temporary directory.

    /usr/bin/python3 -m unittest discover -s tests/tools -p '*_test.py' -v

The script runs as a subprocess (as ctest and a maintainer run it) with --root on the tree; expected
outputs are written out by hand, never computed with the script's own functions.
"""

import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "layers.py"


def run_layers(files, *args):
    """Writes {relative path: text} under a fresh root and runs the script there."""
    with tempfile.TemporaryDirectory(prefix="layers-test-") as root:
        for rel, text in files.items():
            path = Path(root, rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return subprocess.run([sys.executable, str(SCRIPT), "--root", root, *args],
                              capture_output=True, text=True, timeout=60)


def includes(*names):
    return "".join(f'#include "{name}"\n' for name in names)


class CheckTest(unittest.TestCase):
    def test_allowed_edges_pass(self):
        result = run_layers({
            "src/core/tensor.cc": includes("core/tensor.h") + "#include <vector>\n",
            "src/store/hash_store.cc": includes("core/check.h", "chorus/error.h"),
            "src/transport/tcp/pair.cc": includes("store/store.h", "transport/transport.h"),
            "src/backend/algorithmic.cc": includes("transport/transport.h", "algorithms/peers.h",
                                                   "gtest/gtest.h"),
            "src/parallel/reducer.cc": includes("chorus/communicator.h", "core/reduce_kernels.h"),
            "python/src/bindings.h": includes("chorus/chorus.h"),
            "python/src/reducer.cc": includes("bindings.h", "chorus/gradient_reducer.h"),
            "include/chorus/communicator.h": includes("chorus/tensor.h"),
            "include/chorus/tensor.h": "",
            "include/chorus/error.h": "",
            "include/chorus/chorus.h": includes("chorus/communicator.h", "chorus/error.h"),
        }, "--check")
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("OK", result.stdout)
        self.assertEqual(result.stdout.count("\n"), 1)  # one summary line

    def test_upward_include_is_reported(self):
        result = run_layers({"src/core/tensor.cc": includes("core/tensor.h", "backend/backend.h")})
        self.assertEqual(result.returncode, 1)
        self.assertIn('src/core/tensor.cc:2: core -> backend (upward): '
                      '#include "backend/backend.h"', result.stdout)

    def test_upward_through_a_public_header_is_reported(self):
        result = run_layers({"src/store/store.cc": includes("chorus/work.h"),
                             "include/chorus/work.h": ""})
        self.assertEqual(result.returncode, 1)
        self.assertIn('src/store/store.cc:1: store -> runtime (upward): #include "chorus/work.h"',
                      result.stdout)

    def test_skipping_include_is_reported(self):
        result = run_layers({"src/runtime/communicator_ops.h":
                             "// ops\n" + includes("backend/backend.h", "transport/transport.h")})
        self.assertEqual(result.returncode, 1)
        self.assertEqual(result.stdout.splitlines(), [
            'src/runtime/communicator_ops.h:3: runtime -> transport (skips a layer): '
            '#include "transport/transport.h"'])

    def test_python_including_a_src_internal_header_is_reported(self):
        result = run_layers({"python/src/zero.cc": includes("chorus/gradient_reducer.h",
                                                            "parallel/zero_engine.h",
                                                            "core/huge_pages.h"),
                             "include/chorus/gradient_reducer.h": ""})
        self.assertEqual(result.returncode, 1)
        self.assertEqual(result.stdout.splitlines(), [
            'python/src/zero.cc:2: python -> parallel (internal header): '
            '#include "parallel/zero_engine.h"',
            'python/src/zero.cc:3: python -> core (internal header): #include "core/huge_pages.h"'])

    def test_parallel_including_runtime_internals_is_reported(self):
        result = run_layers({"src/parallel/engine.cc": includes("runtime/communicator_state.h")})
        self.assertEqual(result.returncode, 1)
        self.assertIn("parallel -> runtime (internal header)", result.stdout)

    def test_unknown_public_header_is_an_error(self):
        result = run_layers({"include/chorus/mystery.h": "", "src/core/a.cc": ""})
        self.assertEqual(result.returncode, 2)
        self.assertIn("include/chorus/mystery.h", result.stderr)
        self.assertIn("PUBLIC_HEADERS", result.stderr)

    def test_unknown_src_folder_is_an_error(self):
        result = run_layers({"src/gadgets/gadget.cc": ""})
        self.assertEqual(result.returncode, 2)
        self.assertIn("src/gadgets/gadget.cc", result.stderr)


class MarkdownTest(unittest.TestCase):
    # store: 2 lines to core; transport: 1 to core, 1 to store; runtime: 1 to core (via chorus/),
    # 2 to transport (both skip a layer). Same-layer and system includes are not counted.
    TREE = {
        "src/store/file_store.cc": includes("store/store.h", "core/check.h", "core/env.h"),
        "src/transport/pair.cc": includes("core/check.h", "store/store.h") + "#include <mutex>\n",
        "src/runtime/ops.h": includes("transport/transport.h", "chorus/error.h"),
        "src/runtime/census.h": includes("transport/transport.h"),
        "include/chorus/error.h": "",
    }

    def test_counts_table_and_diagram(self):
        result = run_layers(self.TREE, "--markdown")
        self.assertEqual(result.returncode, 0, result.stderr)
        out = result.stdout
        self.assertIn("| includes → | core | store | transport | runtime |\n"
                      "|---|---|---|---|---|\n"
                      "| **core** |  |  |  |  |\n"
                      "| **store** | 2 |  |  |  |\n"
                      "| **transport** | 1 | 1 |  |  |\n"
                      "| **runtime** | 1 |  | 2 (2 violating) |  |\n", out)
        self.assertIn("```mermaid\ngraph TD\n"
                      '  runtime -.->|"2"| transport\n'
                      "  runtime -->|1| core\n"
                      "  transport -->|1| store\n"
                      "  transport -->|1| core\n"
                      "  store -->|2| core\n"
                      "  linkStyle 0 stroke:#d00,color:#d00\n", out)
        self.assertIn("class runtime violation", out)
        self.assertIn("Violations: 2\n", out)

    def test_output_is_deterministic(self):
        first = run_layers(self.TREE, "--markdown").stdout
        reordered = dict(reversed(list(self.TREE.items())))
        self.assertEqual(first, run_layers(reordered, "--markdown").stdout)


if __name__ == "__main__":
    unittest.main()
