#!/usr/bin/env python3
"""chorus-trace: merges, summarizes and plots a chorus trace (CHORUS_TRACE=path, Note [Timeline]).

    chorus-trace merge PATH                         # join PATH.rank<R>.part into PATH (mpirun jobs)
    chorus-trace summary PATH [--top K]             # who made me wait: blame per rank
    chorus-trace plot PATH [--out FILE.png] [--bins N]  # compute / communication / waiting per rank

Input. A merged trace is Chrome trace JSON, {"displayTimeUnit":"ms","traceEvents":[...]}, one pid
per world rank. Operations are "X" events with cat "operation", ts and dur in microseconds already
on rank 0's clock, and args {seq, op, bytes, count, group, ...}; collectives have seq > 0, point-
to-point operations seq 0. Marks (cat "mark") and metadata ("M") are read but not analysed, except
process_name's args.dropped, which the summary reports. A part, PATH.rank<R>.part (R decimal), is
one rank's events separated by ",\n", without brackets (src/trace/timeline.cc writes it).

merge. Every part next to PATH, in rank order, is concatenated into {"traceEvents": [...]} at PATH
(what chorusrun and chorus::trace::merge do), after each part is checked to parse; then the parts
are deleted. Nothing is written or deleted if a part does not parse.

summary: who made me wait. Each collective (operation with seq > 0) is keyed by (args.group,
args.seq): the ranks with an event for that key took part (a rank whose record is missing, e.g.
dropped from its ring, is simply not counted). The last to arrive is the rank with the largest ts.
Every other participant r waited w_r = min(latest_ts - ts_r, dur_r): the gap to the last arrival,
at most the length of r's own operation (a broadcast root that returns before the others arrive
did not wait). The sum of those waits is blamed on the last arrival.
  Ties: when several participants share the largest ts, the waiting is split evenly between them
  and each counts as arriving last; when every participant started at the same instant nobody
  waited and nobody counts as last. So the blame over all ranks always equals the waiting.
Per rank it prints: the waiting it caused the others (ms), at how many of its collectives (those
with two or more participants) it arrived last, its time in communication (sum of dur of all its
operation events, point-to-point included), its own waiting (sum of its w_r), and its K worst
collectives, those where the waiting it caused was largest. Limits: two communicators with the
same description ("group [0, 1] (shm)") and the same sequence numbers cannot be told apart; a
rank's second event for one key is ignored.

plot. [first ts, last end] is cut into N equal bins. Per rank and bin: waiting is the time covered
by the waiting intervals [ts, ts + w_r] of its collectives, communication the time covered by its
operations less the waiting, compute the rest of the bin. Overlapping operations (concurrent
communicators) count once here, while the summary sums their durations. The PNG has one row of
stacked areas (fraction of each bin) per rank and a bar chart of the waiting each rank caused.

Standard library only, except plot, which needs matplotlib (Agg). Exit status: 0 success (also
"no collectives"), 1 merge found no parts, 2 a missing or unreadable file, invalid JSON, or a trace
that is not a chorus trace.
"""

import argparse
import bisect
import json
import os
import re
import sys
from collections import defaultdict


class TraceError(Exception):
    """A file that cannot be read or is not a chorus trace; main() prints it and exits 2."""


# --------------------------------------------------------------------------------------------------
# Reading and merging

def part_paths(path):
    """[(rank, part path)] of every PATH.rank<R>.part next to PATH (R decimal), in rank order."""
    directory = os.path.dirname(path) or "."
    pattern = re.compile(re.escape(os.path.basename(path)) + r"\.rank([0-9]+)\.part")
    try:
        names = os.listdir(directory)
    except OSError as error:
        raise TraceError(f"cannot list '{directory}': {error.strerror}") from error
    parts = []
    for name in names:
        match = pattern.fullmatch(name)
        if match:
            parts.append((int(match.group(1)), os.path.join(directory, name)))
    return sorted(parts)


def read_part(part):
    """A part's text without its trailing ",\\n" / "\\n"; raises TraceError if it does not parse."""
    try:
        with open(part, encoding="utf-8") as stream:
            text = stream.read()
    except (OSError, UnicodeDecodeError) as error:
        raise TraceError(f"cannot read the trace part '{part}': {error}") from error
    text = text.rstrip(",\n\r\t ")
    try:
        json.loads("[" + text + "]")
    except json.JSONDecodeError as error:
        raise TraceError(f"the trace part '{part}' is not valid JSON ({error}); was its rank "
                         "killed while writing it? Nothing was merged") from error
    return text


def merge(path):
    """Merges PATH's parts into PATH (the C++ merge's format) and deletes them; returns how many."""
    parts = part_paths(path)
    if not parts:
        return 0
    texts = [read_part(part) for _, part in parts]  # all checked before anything is written
    body = ",\n".join(text for text in texts if text)
    try:
        with open(path, "w", encoding="utf-8") as stream:
            stream.write('{"displayTimeUnit":"ms","traceEvents":[\n' + body + "\n]}\n")
    except OSError as error:
        raise TraceError(f"cannot write the merged trace '{path}': {error.strerror}") from error
    for _, part in parts:
        os.remove(part)
    return len(parts)


def _check_operation(event, index, path):
    """Raises TraceError unless an operation event has the fields the analysis reads."""
    args = event.get("args")
    numbers = all(isinstance(event.get(key), (int, float)) for key in ("pid", "ts", "dur"))
    if not numbers or not isinstance(args, dict) or not isinstance(args.get("seq"), int):
        raise TraceError(f"'{path}': event {index} ({event.get('name')!r}) is an operation without "
                         "numeric pid, ts, dur and args.seq; is this a chorus trace?")


def load(path):
    """The events of the merged trace at PATH (a list of dicts); raises TraceError."""
    try:
        with open(path, encoding="utf-8") as stream:
            trace = json.load(stream)
    except FileNotFoundError as error:
        hint = ""
        if os.path.isdir(os.path.dirname(path) or ".") and part_paths(path):
            hint = f" (its parts are there: run 'chorus-trace merge {path}' first)"
        raise TraceError(f"no trace file '{path}'{hint}") from error
    except OSError as error:
        raise TraceError(f"cannot read the trace '{path}': {error.strerror}") from error
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise TraceError(f"the trace '{path}' is not valid JSON: {error}") from error
    # Chrome accepts both {"traceEvents": [...]} and a bare array of events.
    events = trace.get("traceEvents") if isinstance(trace, dict) else trace
    if not isinstance(events, list) or not all(isinstance(event, dict) for event in events):
        raise TraceError(f"'{path}' is not a Chrome trace (no traceEvents list of events)")
    for index, event in enumerate(events):
        if is_operation(event):
            _check_operation(event, index, path)
    return events


def is_operation(event):
    return event.get("ph") == "X" and event.get("cat") == "operation"


def operations(events):
    """The operation events (collectives and point-to-point), in file order."""
    return [event for event in events if is_operation(event)]


def ranks_of(events):
    """Every rank the trace names: those with a process_name or with any operation."""
    ranks = {event["pid"] for event in operations(events)}
    ranks.update(event["pid"] for event in events
                 if event.get("ph") == "M" and event.get("name") == "process_name"
                 and isinstance(event.get("pid"), int))
    return sorted(ranks)


# --------------------------------------------------------------------------------------------------
# Who made me wait

def collectives(events):
    """{(group, seq): {rank: event}}: each collective's participants; see the module docstring."""
    keyed = defaultdict(dict)
    for event in operations(events):
        args = event["args"]
        if args["seq"] > 0:
            # setdefault: a rank's second event for one key (an ambiguous group name) is ignored.
            keyed[(args.get("group", "?"), args["seq"])].setdefault(event["pid"], event)
    return dict(keyed)


def waits(participants):
    """Resolves one collective: ({rank: wait in us}, [last ranks], total wait in us).

    w_r = min(latest_ts - ts_r, dur_r). The last ranks are those with the largest ts, or none when
    every participant started together (nobody waited for anybody).
    """
    latest = max(event["ts"] for event in participants.values())
    waited = {rank: min(latest - event["ts"], event["dur"]) for rank, event in participants.items()}
    last = sorted(rank for rank, event in participants.items() if event["ts"] == latest)
    if len(last) == len(participants):
        last = []
    return waited, last, sum(waited.values())


def _empty_stats():
    return {"caused_ms": 0.0, "last": 0, "collectives": 0, "comm_ms": 0.0, "waited_ms": 0.0,
            "worst": []}


def who_made_me_wait(events, top=3):
    """{rank: stats} for every rank in `events`. Times in milliseconds. Stats:

    caused_ms: the waiting of the others blamed on this rank; last: collectives it arrived last at
    (ties included); collectives: collectives it took part in with two or more participants;
    comm_ms: sum of dur of its operation events; waited_ms: its own waiting; worst: up to `top`
    (name, group, caused ms) with caused ms > 0, largest first (equal ones in (group, seq) order).
    """
    stats = {rank: _empty_stats() for rank in ranks_of(events)}
    caused_by = defaultdict(list)  # rank -> [(caused ms, order, name, group)]
    for event in operations(events):
        stats[event["pid"]]["comm_ms"] += event["dur"] / 1000.0
    for order, ((group, seq), participants) in enumerate(sorted(collectives(events).items())):
        if len(participants) < 2:
            continue  # nobody to wait for
        waited, last, total = waits(participants)
        for rank, wait in waited.items():
            stats[rank]["collectives"] += 1
            stats[rank]["waited_ms"] += wait / 1000.0
        op = next(iter(participants.values()))["args"].get("op", "collective")
        for rank in last:
            share = total / len(last) / 1000.0  # ties split the blame evenly
            stats[rank]["last"] += 1
            stats[rank]["caused_ms"] += share
            if share > 0:
                caused_by[rank].append((share, order, f"{op} #{seq}", group))
    for rank, entries in caused_by.items():
        entries.sort(key=lambda entry: (-entry[0], entry[1]))
        stats[rank]["worst"] = [(name, group, ms) for ms, _, name, group in entries[:top]]
    return stats


def dropped_records(events):
    """{rank: records its ring dropped} for ranks that dropped any (their early events are gone)."""
    return {event["pid"]: event["args"]["dropped"] for event in events
            if event.get("ph") == "M" and event.get("name") == "process_name"
            and isinstance(event.get("args"), dict) and event["args"].get("dropped", 0) > 0}


def format_summary(events, top=3):
    """The summary's lines (see the module docstring); one line if there is no collective."""
    if not any(len(p) > 1 for p in collectives(events).values()):
        return ["no collectives with two or more participants in this trace: nobody waited"]
    stats = who_made_me_wait(events, top)
    # The largest blame; ties go to the lowest rank.
    worst_rank = min(stats, key=lambda rank: (-stats[rank]["caused_ms"], rank))
    worst = stats[worst_rank]
    if worst["caused_ms"] > 0:
        lines = [f"rank {worst_rank} made the others wait longest: {worst['caused_ms']:.1f} ms in "
                 f"all, last to arrive at {worst['last']} of {worst['collectives']} collectives"]
    else:
        lines = ["no rank made the others wait: in every collective, no participant waited"]
    header = ("rank", "made others wait (ms)", "last to arrive", "communication (ms)",
              "waiting (ms)")
    rows = [(str(rank), f"{s['caused_ms']:.1f}", f"{s['last']} of {s['collectives']}",
             f"{s['comm_ms']:.1f}", f"{s['waited_ms']:.1f}") for rank, s in sorted(stats.items())]
    widths = [max(len(row[i]) for row in [header] + rows) for i in range(len(header))]
    lines.append("")
    for row in [header] + rows:
        lines.append("  ".join(cell.rjust(width) for cell, width in zip(row, widths)))
    for rank, s in sorted(stats.items()):
        if s["worst"]:
            lines.append("")
            lines.append(f"rank {rank}'s worst collectives (the waiting it caused the others):")
            lines.extend(f"  {name} on {group}: {ms:.1f} ms" for name, group, ms in s["worst"])
    for rank, count in sorted(dropped_records(events).items()):
        lines.append(f"note: rank {rank} dropped {count} records (its ring was full); its earliest "
                     "operations are missing and not counted")
    return lines


# --------------------------------------------------------------------------------------------------
# Activity over time, for plot

def union(intervals):
    """Disjoint, sorted intervals covering the same time as `intervals` ([(start, end)])."""
    merged = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def covered_per_bin(intervals, edges):
    """Per bin [edges[i], edges[i+1]], the time `intervals` cover (any overlap counts once).

    With C(t) the covered time before t, a bin's share is C(edges[i+1]) - C(edges[i]); C is found
    by bisecting the union's starts and adding the lengths of the intervals before.
    """
    disjoint = union(intervals)
    starts = [start for start, _ in disjoint]
    before = [0.0]  # before[i]: total length of disjoint[:i]
    for start, end in disjoint:
        before.append(before[-1] + end - start)

    def covered_until(t):
        i = bisect.bisect_right(starts, t) - 1
        if i < 0:
            return 0.0
        start, end = disjoint[i]
        return before[i] + min(t, end) - start

    marks = [covered_until(edge) for edge in edges]
    return [marks[i + 1] - marks[i] for i in range(len(edges) - 1)]


def binned_activity(events, bins=50):
    """(edges, {rank: {"compute", "communication", "waiting": [ms per bin]}}), edges in ms.

    The bins cut [first ts, last end] of the operation events into `bins` equal parts; edges are
    measured from the first ts. See the module docstring. Raises ValueError if there is no
    operation or bins < 1.
    """
    ops = operations(events)
    if not ops or bins < 1:
        raise ValueError("binned_activity needs operations and bins >= 1")
    first = min(event["ts"] for event in ops)
    span = max(max(event["ts"] + event["dur"] for event in ops) - first, 1.0)  # us, at least 1
    edges_us = [first + span * i / bins for i in range(bins + 1)]
    busy = defaultdict(list)  # rank -> operation intervals, us
    waiting = defaultdict(list)  # rank -> waiting intervals, us
    for event in ops:
        busy[event["pid"]].append((event["ts"], event["ts"] + event["dur"]))
    for participants in collectives(events).values():
        for rank, wait in waits(participants)[0].items():
            start = participants[rank]["ts"]
            waiting[rank].append((start, start + wait))
    activity = {}
    for rank in ranks_of(events):
        busy_us = covered_per_bin(busy[rank], edges_us)
        wait_us = covered_per_bin(waiting[rank], edges_us)  # inside busy: w_r <= dur_r
        width_us = [edges_us[i + 1] - edges_us[i] for i in range(bins)]
        activity[rank] = {
            "compute": [(w - b) / 1000.0 for w, b in zip(width_us, busy_us)],
            "communication": [(b - w) / 1000.0 for b, w in zip(busy_us, wait_us)],
            "waiting": [w / 1000.0 for w in wait_us],
        }
    return [(edge - first) / 1000.0 for edge in edges_us], activity


def default_plot_path(path):
    root, extension = os.path.splitext(path)
    return root + ".png" if extension == ".json" else path + ".png"


def plot(events, out, bins=50, title=""):
    """Writes the PNG (see the module docstring) to `out`; needs matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as pyplot
    except ImportError as error:
        raise TraceError("plot needs matplotlib (run with /usr/bin/python3, or pip install "
                         "matplotlib)") from error
    edges_ms, activity = binned_activity(events, bins)
    stats = who_made_me_wait(events)
    ranks = sorted(activity)
    edges_s = [edge / 1000.0 for edge in edges_ms]
    width_ms = edges_ms[1] - edges_ms[0]
    kinds = [("compute", "#9ecae1"), ("communication", "#31a354"), ("waiting", "#de2d26")]
    figure = pyplot.figure(figsize=(12, max(3.0, 0.9 * len(ranks) + 1.5)))
    grid = figure.add_gridspec(len(ranks), 2, width_ratios=[4, 1], hspace=0.15, wspace=0.15)
    shared = None
    for row, rank in enumerate(ranks):
        axes = figure.add_subplot(grid[row, 0], sharex=shared)
        shared = shared or axes
        # step="post" over the edges draws each bin flat; the last value is repeated to close it.
        fractions = [[ms / width_ms for ms in activity[rank][kind]] for kind, _ in kinds]
        axes.stackplot(edges_s, *[f + f[-1:] for f in fractions],
                       colors=[color for _, color in kinds], labels=[kind for kind, _ in kinds],
                       step="post")
        axes.set_xlim(edges_s[0], edges_s[-1])
        axes.set_ylim(0, 1)
        axes.set_yticks([])
        axes.set_ylabel(f"rank {rank}", rotation=0, ha="right", va="center")
        if row < len(ranks) - 1:
            axes.tick_params(labelbottom=False)
    shared.legend(loc="upper center", bbox_to_anchor=(0.5, 1.0 + 0.6), ncol=3, frameon=False)
    axes.set_xlabel("time since the first operation (s); share of each bin")
    blame = figure.add_subplot(grid[:, 1])
    blame.barh([str(rank) for rank in ranks], [stats[rank]["caused_ms"] for rank in ranks],
               color="#de2d26")
    blame.invert_yaxis()  # rank 0 on top, as in the rows
    blame.set_xlabel("made the others wait (ms)")
    blame.set_ylabel("rank")
    figure.suptitle(title or "chorus trace", y=0.995)
    try:
        figure.savefig(out, dpi=100, bbox_inches="tight")
    except OSError as error:
        raise TraceError(f"cannot write the plot '{out}': {error.strerror}") from error
    finally:
        pyplot.close(figure)


# --------------------------------------------------------------------------------------------------
# Command line

def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="chorus-trace", description="Merge, summarize and plot a chorus trace (CHORUS_TRACE).")
    commands = parser.add_subparsers(dest="command", required=True)
    merge_parser = commands.add_parser("merge", help="join PATH.rank<R>.part into PATH")
    merge_parser.add_argument("path")
    summary_parser = commands.add_parser("summary", help="who made the others wait")
    summary_parser.add_argument("path")
    summary_parser.add_argument("--top", type=int, default=3, metavar="K",
                                help="worst collectives listed per rank (default 3)")
    plot_parser = commands.add_parser("plot", help="compute/communication/waiting per rank (PNG)")
    plot_parser.add_argument("path")
    plot_parser.add_argument("--out", metavar="FILE.png",
                             help="output (default: PATH with .png for .json)")
    plot_parser.add_argument("--bins", type=int, default=50, metavar="N",
                             help="time bins (default 50)")
    args = parser.parse_args(argv)
    if getattr(args, "bins", 1) < 1 or getattr(args, "top", 0) < 0:
        parser.error("--bins must be at least 1 and --top at least 0")
    return args


def run(args):
    """Runs one parsed command; returns the exit status. Raises TraceError."""
    if args.command == "merge":
        count = merge(args.path)
        if count == 0:
            print(f"chorus-trace: no parts '{args.path}.rank<R>.part' found to merge",
                  file=sys.stderr)
            return 1
        print(f"merged {count} parts into {args.path}")
        return 0
    events = load(args.path)
    if args.command == "summary":
        print("\n".join(format_summary(events, args.top)))
        return 0
    if not operations(events):
        print(f"no operations in '{args.path}': nothing to plot")
        return 0
    out = args.out or default_plot_path(args.path)
    plot(events, out, args.bins, title=os.path.basename(args.path))
    print(out)
    return 0


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return run(args)
    except TraceError as error:
        print(f"chorus-trace: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `chorus-trace summary t.json | head`: stop quietly, and keep Python from failing again
        # when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
