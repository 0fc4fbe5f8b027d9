"""Rendezvous and every deadline must not depend on the nodes' wall clocks agreeing (issue 25: a
node whose clock is skewed joins like any other; docs/launching.md, "Clocks"). So no source under
src/ or tools/chorusrun reads the wall clock: deadlines use CLOCK_MONOTONIC (steady_clock), and the
store's challenge carries no timestamp. Exit 1 naming each read found.

    /usr/bin/python3 tests/tools/no_wall_clock.py [ROOT]
"""

import pathlib
import re
import sys

WALL_CLOCK = re.compile(r"\b(system_clock|CLOCK_REALTIME|gettimeofday|time\s*\(\s*(nullptr|NULL|0)\s*\)"
                        r"|std::time\b|localtime|gmtime)")


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else
                        pathlib.Path(__file__).resolve().parents[2])
    found = []
    for folder in ("src", "tools/chorusrun"):
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in (".h", ".cc", ".cu"):
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if WALL_CLOCK.search(line):
                    found.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    for item in found:
        print(f"wall clock read: {item}")
    print("no_wall_clock:", "FAIL" if found else "OK")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
