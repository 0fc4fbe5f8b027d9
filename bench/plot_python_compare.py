"""Tables and plots of bench/python_compare.py results: chorus against mpi4py or torch.gloo.

    /usr/bin/python3 bench/plot_python_compare.py mpi-1.csv mpi-2.csv mpi-3.csv --table
    /usr/bin/python3 bench/plot_python_compare.py mpi-*.csv -o python-mpi.png [--title TEXT]

Each CSV is what `python_compare.py --csv FILE` wrote: rows of (bytes, mode, library, seconds),
one run each, all against one reference library. Runs are merged by taking, for every size, mode
and library, the median over the files. --table prints the merged medians as one Markdown row
per size: per mode the chorus time, the reference time and reference / chorus (> 1: chorus is
faster). Otherwise it draws one panel per mode, time per call against size on logarithmic axes,
chorus solid and the reference dashed, with the ratio on a second axis below each panel.

A run with `--ops` also has rows of the other operations (mode OP/out, or barrier at 0 bytes):
--table then prints them after the allreduce table, one row per (op, size) with the same three
cells ("n/a" where the reference lacks the op); the plots show allreduce's modes only.

Needs matplotlib (Debian: python3-matplotlib) for drawing (Agg backend, no display needed).
"""

import argparse
import csv
import statistics
import sys

MODES = ("out", "fresh", "inplace")
COLUMNS = ("bytes", "mode", "library", "seconds")


def read_runs(paths):
    """Returns (reference, {(bytes, mode, library): [seconds per file]})."""
    samples, references = {}, set()
    for path in paths:
        with open(path, newline="") as handle:
            reader = csv.DictReader(handle)
            if tuple(reader.fieldnames or ()) != COLUMNS:
                sys.exit(f"plot_python_compare.py: {path} is not a python_compare.py --csv file "
                         f"(columns {reader.fieldnames}, expected {list(COLUMNS)})")
            for row in reader:
                if row["library"] != "chorus":
                    references.add(row["library"])
                key = (int(row["bytes"]), row["mode"], row["library"])
                samples.setdefault(key, []).append(float(row["seconds"]))
    if len(references) != 1:
        sys.exit(f"plot_python_compare.py: expected one reference library, found "
                 f"{sorted(references) or 'none'}")
    return references.pop(), samples


def medians(samples):
    """{key: median seconds over the files}."""
    return {key: statistics.median(values) for key, values in samples.items()}


def human_size(nbytes):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def human_time(seconds):
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.2f} µs"


def table(reference, merged):
    """The Markdown table of allreduce's modes, as a list of lines (none without such rows)."""
    sizes = sorted({n for n, mode, _ in merged if mode in MODES})
    if not sizes:
        return []
    header = ["size"] + [f"{m} {lib}" for m in MODES for lib in ("chorus", reference, "ratio")]
    lines = ["| " + " | ".join(header) + " |", "|---:|" + "---:|" * (3 * len(MODES))]
    for nbytes in sizes:
        cells = [human_size(nbytes)]
        for mode in MODES:
            mine = merged.get((nbytes, mode, "chorus"))
            theirs = merged.get((nbytes, mode, reference))
            if mine is None or theirs is None:
                cells += ["", "", ""]
                continue
            cells += [human_time(mine), human_time(theirs), f"{theirs / mine:.2f}×"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def ops_table(reference, merged):
    """The Markdown table of the other operations (python_compare.py --ops), as a list of lines:
    one row per (op, size), ops in the order they first appear, none without such rows."""
    labels = list(dict.fromkeys(mode for _, mode, _ in merged if mode not in MODES))
    if not labels:
        return []
    lines = [f"| op | size | chorus | {reference} | ratio |", "|:---|---:|---:|---:|---:|"]
    for label in labels:
        for nbytes in sorted({n for n, mode, _ in merged if mode == label}):
            mine = merged.get((nbytes, label, "chorus"))
            theirs = merged.get((nbytes, label, reference))
            cells = [label.replace("/", " "), human_size(nbytes) if nbytes else "-",
                     human_time(mine) if mine is not None else "n/a",
                     human_time(theirs) if theirs is not None else "n/a",
                     f"{theirs / mine:.2f}×" if mine is not None and theirs is not None else "-"]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def plot(reference, merged, output, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axes = plt.subplots(2, len(MODES), figsize=(5 * len(MODES), 6), sharex=True,
                                gridspec_kw={"height_ratios": [3, 1]})
    for column, mode in enumerate(MODES):
        sizes = sorted({n for n, m, lib in merged if m == mode and lib == "chorus"
                        and (n, m, reference) in merged})
        mine = [merged[(n, mode, "chorus")] * 1e6 for n in sizes]
        theirs = [merged[(n, mode, reference)] * 1e6 for n in sizes]
        top, bottom = axes[0][column], axes[1][column]
        top.plot(sizes, mine, "o-", color="C0", label="chorus")
        top.plot(sizes, theirs, "s--", color="C1", label=reference)
        top.set_xscale("log", base=2)
        top.set_yscale("log")
        top.set_title(mode)
        top.set_ylabel("µs per call")
        top.grid(True, which="both", alpha=0.3)
        top.legend()
        bottom.plot(sizes, [t / m for t, m in zip(theirs, mine)], "o-", color="C2")
        bottom.axhline(1.0, color="grey", linewidth=0.8)
        bottom.set_xscale("log", base=2)
        bottom.set_ylabel(f"{reference} / chorus")
        bottom.set_xlabel("bytes")
        bottom.grid(True, which="both", alpha=0.3)
    figure.suptitle(title or f"allreduce from Python: chorus vs {reference}")
    figure.tight_layout()
    figure.savefig(output, dpi=110)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="+", help="python_compare.py --csv files (repeated runs)")
    parser.add_argument("-o", "--output", help="PNG to draw")
    parser.add_argument("--table", action="store_true", help="print the Markdown table")
    parser.add_argument("--title", help="the figure's title")
    args = parser.parse_args(argv)
    if not args.table and not args.output:
        parser.error("give --table, -o FILE, or both")
    reference, samples = read_runs(args.csv)
    merged = medians(samples)
    if args.table:
        tables = [t for t in (table(reference, merged), ops_table(reference, merged)) if t]
        print("\n\n".join("\n".join(t) for t in tables))
    if args.output:
        if not any(mode in MODES for _, mode, _ in merged):
            sys.exit("plot_python_compare.py: no allreduce rows to plot (the plots show "
                     "allreduce's modes; --table shows the other operations)")
        plot(reference, merged, args.output, args.title)


if __name__ == "__main__":
    main()
