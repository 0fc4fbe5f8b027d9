"""Plots chorus-bench --csv results: bus bandwidth and latency against size, chorus vs MPI.

    /usr/bin/python3 bench/plot.py results.csv [more.csv ...] -o perf.png [--title TEXT]
    /usr/bin/python3 bench/plot.py run1.csv run2.csv run3.csv --table

Each CSV is what `chorus-bench --csv FILE` wrote (one line per size; with --compare mpi also the
MPI library's columns). Rows of the same collective, rank count, chorus backend and reference
from several files (repeated runs) are merged: each size is drawn at the median over the files of
its time, and its bandwidths recomputed from that time. Every such series becomes one solid line
for chorus and, when it has MPI's columns, one dashed line of the same colour for MPI. Both axes
are logarithmic. --table prints the merged series as Markdown tables instead of drawing.

Needs matplotlib (Debian: python3-matplotlib) for drawing; draws with the Agg backend, no display
needed.
"""

import argparse
import csv
import statistics
import sys
from collections import OrderedDict

REQUIRED = ("collective", "ranks", "backend", "size_bytes", "time_us", "busbw_gbps")


def read_rows(paths):
    """Returns {(collective, ranks, backend, reference): {size: [row, ...]}}, one row per file."""
    series = OrderedDict()
    for path in paths:
        with open(path, newline="") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
            if missing:
                sys.exit(f"plot.py: {path} is not a chorus-bench --csv file "
                         f"(missing columns {', '.join(missing)})")
            for row in reader:
                size = int(row["size_bytes"])
                if size <= 0:  # barrier moves nothing: no point on a log axis
                    continue
                key = (row["collective"], int(row["ranks"]), row["backend"],
                       row.get("reference", ""))
                series.setdefault(key, OrderedDict()).setdefault(size, []).append(row)
    if not series:
        sys.exit("plot.py: no rows with a size in " + ", ".join(paths))
    return series


def merged(rows_by_size):
    """Per size: the median time over the files of chorus and the reference, the bandwidths
    scaled from the first row (bandwidth is inversely proportional to time), and the run count."""
    points = []
    for size, rows in rows_by_size.items():
        point = {"size": size, "count": int(rows[0]["count"]), "runs": len(rows)}
        for prefix in ("", "ref_"):
            times = [float(r[prefix + "time_us"]) for r in rows if r.get(prefix + "time_us")]
            if not times:
                continue
            time = statistics.median(times)
            first = float(rows[0][prefix + "time_us"])
            point[prefix + "time"] = time
            for name in ("algbw", "busbw"):
                value = float(rows[0][f"{prefix}{name}_gbps"]) * first / time if time else 0.0
                point[prefix + name] = value
        if "ref_time" in point and point["time"] > 0:
            point["speedup"] = point["ref_time"] / point["time"]
        points.append(point)
    return points


def size_label(value):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= scale:
            return f"{value / scale:g} {unit}"
    return f"{value:g} B"


def print_table(key, points):
    collective, ranks, backend, reference = key
    runs = sorted({p["runs"] for p in points})
    print(f"{collective}, {ranks} ranks, chorus backend {backend}"
          + (f", vs {reference}" if reference else "")
          + f" (median of {'/'.join(map(str, runs))} runs)\n")
    has_ref = any("ref_time" in p for p in points)
    head = "| size | chorus time (us) | chorus busbw (GB/s) |"
    rule = "|---:|---:|---:|"
    if has_ref:
        head += " MPI time (us) | MPI busbw (GB/s) | speedup (MPI/chorus) |"
        rule += "---:|---:|---:|"
    print(head)
    print(rule)
    for p in points:
        line = f"| {size_label(p['size'])} | {p['time']:.1f} | {p['busbw']:.4f} |"
        if has_ref:
            line += f" {p['ref_time']:.1f} | {p['ref_busbw']:.4f} | {p['speedup']:.2f} |"
        print(line)
    print()


def draw(series, output, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    figure, (bandwidth, latency) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=90)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (key, rows_by_size) in enumerate(series.items()):
        collective, ranks, backend, reference = key
        points = merged(rows_by_size)
        colour = colours[index % len(colours)]
        sizes = [p["size"] for p in points]
        name = f"{collective} np{ranks}"
        bandwidth.plot(sizes, [p["busbw"] for p in points], "-o", color=colour, markersize=3,
                       label=f"chorus ({backend}) {name}")
        latency.plot(sizes, [p["time"] for p in points], "-o", color=colour, markersize=3)
        if all("ref_time" in p for p in points):
            library = reference.split(" of ", 1)[-1]
            bandwidth.plot(sizes, [p["ref_busbw"] for p in points], "--s", color=colour,
                           markersize=3, label=f"{library} {name}")
            latency.plot(sizes, [p["ref_time"] for p in points], "--s", color=colour,
                         markersize=3)
    for axes, ylabel in ((bandwidth, "bus bandwidth (GB/s)"), (latency, "time (us)")):
        axes.set_xscale("log", base=2)
        axes.set_yscale("log")
        axes.set_xlabel("size")
        axes.set_ylabel(ylabel)
        axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _pos: size_label(value)))
        axes.tick_params(axis="x", labelrotation=45, labelsize=7)
        axes.grid(True, which="major", alpha=0.3)
    bandwidth.set_title("bus bandwidth (higher is better)", fontsize=10)
    latency.set_title("latency (lower is better)", fontsize=10)
    bandwidth.legend(fontsize=7)
    if title:
        figure.suptitle(title, fontsize=11)
    figure.tight_layout()
    figure.savefig(output)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="+", help="chorus-bench --csv files")
    parser.add_argument("-o", "--output", help="the PNG to write")
    parser.add_argument("--title", default="", help="a title above both plots")
    parser.add_argument("--table", action="store_true",
                        help="print Markdown tables of the merged series instead of drawing")
    args = parser.parse_args(argv)
    series = read_rows(args.csv)
    if args.table:
        for key, rows_by_size in series.items():
            print_table(key, merged(rows_by_size))
        return
    if not args.output:
        parser.error("name the PNG to write with -o (or pass --table)")
    draw(series, args.output, args.title)
    print(f"plot.py: wrote {args.output}")


if __name__ == "__main__":
    main()
