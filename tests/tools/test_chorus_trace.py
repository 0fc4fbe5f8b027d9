"""Tests of tools/chorus_trace/chorus_trace.py (chorus-trace) on synthetic traces.

    /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/tools/test_chorus_trace.py

Each trace is built here, event by event, in the format src/trace/timeline.cc writes; expected
values are closed forms of how the trace was built (delays times counts), never computed with the
tool's own functions. Commands run through main([...]) with stdout captured, and once as a
subprocess, as a user runs the script.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "chorus_trace" / "chorus_trace.py"
sys.path.insert(0, str(SCRIPT.parent))
import chorus_trace  # noqa: E402

MS = 1000.0  # trace times are microseconds
GROUP4 = "group [0, 1, 2, 3] (shm)"
GROUP2 = "group [0, 1] (tcp)"


def metadata(rank, dropped=0):
    return [
        {"name": "process_name", "ph": "M", "pid": rank,
         "args": {"name": f"rank {rank}", "dropped": dropped, "clock_offset_ns": 0}},
        {"name": "process_sort_index", "ph": "M", "pid": rank, "args": {"sort_index": rank}},
        {"name": "thread_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": "marks"}},
    ]


def collective(rank, seq, ts_ms, dur_ms, group=GROUP4, op="allreduce", tid=1):
    return {"name": f"{op} #{seq}", "cat": "operation", "ph": "X", "pid": rank, "tid": tid,
            "ts": ts_ms * MS, "dur": dur_ms * MS,
            "args": {"seq": seq, "op": op, "bytes": 4096, "count": 1024, "dtype": "float32",
                     "reduce_op": "sum", "algorithm": 0, "group": group}}


def point_to_point(rank, peer, send, ts_ms, dur_ms):
    return {"name": f"send to {peer}" if send else f"recv from {peer}", "cat": "operation",
            "ph": "X", "pid": rank, "tid": 1, "ts": ts_ms * MS, "dur": dur_ms * MS,
            "args": {"seq": 0, "op": "send/recv", "bytes": 64, "count": 16, "dtype": "float32",
                     "algorithm": 0, "group": GROUP4}}


def mark(rank, index, ts_ms, dur_ms):
    return {"name": f"bucket {index}", "cat": "mark", "ph": "X", "pid": rank, "tid": 0,
            "ts": ts_ms * MS, "dur": dur_ms * MS, "args": {"index": index}}


def late_rank_trace(ranks=4, late=2, delay_ms=5.0, count=10):
    """`count` allreduces 100 ms apart; rank `late` starts each `delay_ms` after the others, and
    all end together 1 ms after it starts (the others last delay_ms + 1 ms, it 1 ms)."""
    events = [e for rank in range(ranks) for e in metadata(rank)]
    for seq in range(1, count + 1):
        start = 100.0 * seq
        for rank in range(ranks):
            if rank == late:
                events.append(collective(rank, seq, start + delay_ms, 1.0))
            else:
                events.append(collective(rank, seq, start, delay_ms + 1.0))
    return events


def write_trace(path, events):
    path.write_text(json.dumps({"displayTimeUnit": "ms", "traceEvents": events}))
    return str(path)


# --------------------------------------------------------------------------------------------------
# who_made_me_wait

def test_late_rank_is_blamed_for_the_others_waiting():
    stats = chorus_trace.who_made_me_wait(late_rank_trace())
    assert sorted(stats) == [0, 1, 2, 3]
    # 3 others x 5 ms x 10 collectives.
    assert stats[2]["caused_ms"] == pytest.approx(3 * 5.0 * 10)
    assert stats[2]["last"] == 10
    assert stats[2]["collectives"] == 10
    assert stats[2]["waited_ms"] == pytest.approx(0.0)
    assert stats[2]["comm_ms"] == pytest.approx(10 * 1.0)
    for rank in (0, 1, 3):
        assert stats[rank]["caused_ms"] == pytest.approx(0.0)
        assert stats[rank]["last"] == 0
        assert stats[rank]["waited_ms"] == pytest.approx(5.0 * 10)
        assert stats[rank]["comm_ms"] == pytest.approx(6.0 * 10)
        assert stats[rank]["worst"] == []


def test_worst_collectives_are_the_largest_blame_first():
    # 3 ranks; rank 1 starts i ms late at allreduce #i, so #i cost the other two 2*i ms.
    events = []
    for seq in range(1, 6):
        events.append(collective(0, seq, 100.0 * seq, seq + 1.0))
        events.append(collective(1, seq, 100.0 * seq + seq, 1.0))
        events.append(collective(2, seq, 100.0 * seq, seq + 1.0))
    stats = chorus_trace.who_made_me_wait(events, top=3)
    assert [(name, group) for name, group, _ in stats[1]["worst"]] == [
        ("allreduce #5", GROUP4), ("allreduce #4", GROUP4), ("allreduce #3", GROUP4)]
    assert [ms for _, _, ms in stats[1]["worst"]] == pytest.approx([10.0, 8.0, 6.0])
    assert stats[1]["caused_ms"] == pytest.approx(2 * (1 + 2 + 3 + 4 + 5))
    assert len(chorus_trace.who_made_me_wait(events, top=1)[1]["worst"]) == 1


def test_two_interleaved_groups_are_not_mixed():
    # Group A (4 ranks): rank 3 is 4 ms late at each #k, at 100k ms. Group B (ranks 0, 1) uses the
    # same sequence numbers 50 ms later, rank 0 2 ms late. Keyed by seq alone, B's events would
    # join A's and rank 0 (at 100k + 52 ms) would be blamed for about 50 ms per rank per k.
    events = []
    for seq in range(1, 6):
        for rank in range(4):
            late = rank == 3
            events.append(collective(rank, seq, 100.0 * seq + (4.0 if late else 0.0),
                                     1.0 if late else 5.0))
        events.append(collective(0, seq, 100.0 * seq + 52.0, 1.0, group=GROUP2, tid=2))
        events.append(collective(1, seq, 100.0 * seq + 50.0, 3.0, group=GROUP2, tid=2))
    stats = chorus_trace.who_made_me_wait(events)
    assert stats[3]["caused_ms"] == pytest.approx(3 * 4.0 * 5)
    assert stats[0]["caused_ms"] == pytest.approx(1 * 2.0 * 5)
    assert stats[1]["caused_ms"] == pytest.approx(0.0)
    assert stats[2]["caused_ms"] == pytest.approx(0.0)
    assert (stats[0]["last"], stats[0]["collectives"]) == (5, 10)
    assert (stats[3]["last"], stats[3]["collectives"]) == (5, 5)
    assert stats[1]["waited_ms"] == pytest.approx(5 * 4.0 + 5 * 2.0)
    assert stats[0]["worst"][0][1] == GROUP2


def test_point_to_point_is_not_a_collective_but_is_communication():
    events = late_rank_trace()
    # Rank 0 sends to rank 3 long after everything; a late receive must blame nobody.
    events.append(point_to_point(0, 3, True, 2000.0, 2.0))
    events.append(point_to_point(3, 0, False, 2050.0, 7.0))
    events.append(mark(1, 0, 0.0, 3000.0))  # marks are not operations
    stats = chorus_trace.who_made_me_wait(events)
    assert [stats[rank]["caused_ms"] for rank in range(4)] == pytest.approx([0, 0, 150.0, 0])
    assert stats[3]["waited_ms"] == pytest.approx(50.0)
    assert stats[0]["comm_ms"] == pytest.approx(60.0 + 2.0)
    assert stats[3]["comm_ms"] == pytest.approx(60.0 + 7.0)
    assert stats[1]["comm_ms"] == pytest.approx(60.0)


def test_only_participants_count_when_a_rank_misses_a_collective():
    events = late_rank_trace(count=1)
    events = [e for e in events if not (e.get("pid") == 3 and e.get("cat") == "operation")]
    stats = chorus_trace.who_made_me_wait(events)
    assert stats[2]["caused_ms"] == pytest.approx(2 * 5.0)  # ranks 0 and 1 only
    assert stats[3]["collectives"] == 0
    assert stats[3]["waited_ms"] == 0.0
    assert stats[2]["collectives"] == 1


def test_ties_split_the_blame_evenly():
    # Ranks 1 and 2 both start 10 ms after rank 0: rank 0's 10 ms is split, 5 ms each.
    events = [collective(0, 1, 0.0, 11.0), collective(1, 1, 10.0, 1.0),
              collective(2, 1, 10.0, 1.0)]
    stats = chorus_trace.who_made_me_wait(events)
    assert [stats[r]["caused_ms"] for r in range(3)] == pytest.approx([0.0, 5.0, 5.0])
    assert [stats[r]["last"] for r in range(3)] == [0, 1, 1]
    assert stats[0]["waited_ms"] == pytest.approx(10.0)


def test_nobody_is_last_when_all_start_together():
    events = [collective(rank, 1, 7.0, 1.0) for rank in range(3)]
    stats = chorus_trace.who_made_me_wait(events)
    assert [stats[r]["last"] for r in range(3)] == [0, 0, 0]
    assert [stats[r]["caused_ms"] for r in range(3)] == [0.0, 0.0, 0.0]
    assert [stats[r]["collectives"] for r in range(3)] == [1, 1, 1]


def test_a_wait_is_at_most_the_operation_itself():
    # A broadcast root that returns after 1 ms, 5 ms before the receiver arrives, waited 1 ms.
    events = [collective(0, 1, 0.0, 1.0, op="broadcast"),
              collective(1, 1, 5.0, 2.0, op="broadcast")]
    stats = chorus_trace.who_made_me_wait(events)
    assert stats[0]["waited_ms"] == pytest.approx(1.0)
    assert stats[1]["caused_ms"] == pytest.approx(1.0)


# --------------------------------------------------------------------------------------------------
# summary

def test_summary_names_the_slow_rank_first(tmp_path, capsys):
    path = write_trace(tmp_path / "trace.json", late_rank_trace())
    assert chorus_trace.main(["summary", path]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("rank 2 made the others wait longest: 150.0 ms in all, last to arrive at "
                        "10 of 10 collectives")
    assert "  allreduce #1 on group [0, 1, 2, 3] (shm): 15.0 ms" in lines
    rows = {line.split()[0]: line.split() for line in lines[2:7]}
    assert rows["2"][1:5] == ["150.0", "10", "of", "10"]
    assert rows["0"][1:] == ["0.0", "0", "of", "10", "60.0", "50.0"]


def test_summary_top_and_dropped_note(tmp_path, capsys):
    events = late_rank_trace()
    events[0]["args"]["dropped"] = 12  # rank 0's process_name
    path = write_trace(tmp_path / "trace.json", events)
    assert chorus_trace.main(["summary", path, "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count(" on group [0, 1, 2, 3] (shm): 15.0 ms") == 1
    assert "rank 0 dropped 12 records" in out


def test_summary_without_collectives(tmp_path, capsys):
    events = metadata(0) + metadata(1) + [point_to_point(0, 1, True, 0.0, 1.0),
                                          point_to_point(1, 0, False, 3.0, 1.0)]
    path = write_trace(tmp_path / "trace.json", events)
    assert chorus_trace.main(["summary", path]) == 0
    assert capsys.readouterr().out.startswith("no collectives")


def test_missing_and_invalid_files_exit_2(tmp_path, capsys):
    missing = str(tmp_path / "nothing.json")
    assert chorus_trace.main(["summary", missing]) == 2
    assert missing in capsys.readouterr().err
    broken = tmp_path / "broken.json"
    broken.write_text('{"traceEvents": [')
    assert chorus_trace.main(["plot", str(broken)]) == 2
    assert str(broken) in capsys.readouterr().err
    not_trace = tmp_path / "other.json"
    not_trace.write_text('{"a": 1}')
    assert chorus_trace.main(["summary", str(not_trace)]) == 2
    assert str(not_trace) in capsys.readouterr().err


def test_script_runs_as_a_command(tmp_path):
    path = write_trace(tmp_path / "trace.json", late_rank_trace())
    result = subprocess.run([sys.executable, str(SCRIPT), "summary", path], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("rank 2 made the others wait longest: 150.0 ms")
    assert os.access(SCRIPT, os.X_OK)


# --------------------------------------------------------------------------------------------------
# merge

def write_part(path, rank, events):
    """A part as timeline.cc writes it: events joined by ",\\n", a final newline, no brackets."""
    Path(f"{path}.rank{rank}.part").write_text(
        ",\n".join(json.dumps(e, separators=(",", ":")) for e in events) + "\n")


def test_merge_joins_parts_in_rank_order_and_deletes_them(tmp_path, capsys):
    path = str(tmp_path / "trace.json")
    expected = []
    for rank in (0, 1, 2, 10):  # 10 sorts after 2 (numeric, not text, order)
        events = metadata(rank) + [collective(rank, seq, 100.0 * seq, 1.0) for seq in (1, 2)]
        events.append(mark(rank, 0, 0.0, 300.0))
        write_part(path, rank, events)
        expected += events
    decoys = [tmp_path / "trace.json.rankX.part", tmp_path / "trace.json.rank1.part.bak",
              tmp_path / "other.json.rank0.part"]
    for decoy in decoys:
        decoy.write_text("not a part")
    assert chorus_trace.main(["merge", path]) == 0
    assert capsys.readouterr().out.strip() == f"merged 4 parts into {path}"
    merged = json.loads(Path(path).read_text())
    assert merged["displayTimeUnit"] == "ms"
    assert merged["traceEvents"] == expected  # every event once, in rank order
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".part") and
            p not in decoys] == []
    assert all(decoy.exists() for decoy in decoys)
    assert chorus_trace.load(path) == expected


def test_merge_without_parts_exits_1(tmp_path, capsys):
    assert chorus_trace.main(["merge", str(tmp_path / "trace.json")]) == 1
    assert "no parts" in capsys.readouterr().err
    assert not (tmp_path / "trace.json").exists()


def test_merge_keeps_the_parts_when_one_is_broken(tmp_path, capsys):
    path = str(tmp_path / "trace.json")
    write_part(path, 0, metadata(0))
    Path(f"{path}.rank1.part").write_text('{"name":"process_name","ph":"M",\n')  # cut short
    assert chorus_trace.main(["merge", path]) == 2
    assert f"{path}.rank1.part" in capsys.readouterr().err
    assert Path(f"{path}.rank0.part").exists() and Path(f"{path}.rank1.part").exists()
    assert not Path(path).exists()


# --------------------------------------------------------------------------------------------------
# plot

def simple_plot_trace():
    """Two ranks over [0, 100] ms. allreduce #1: rank 0 at 0 ms, rank 1 at 20 ms, both end at
    30 ms, so rank 0 waits over [0, 20]. allreduce #2: both over [90, 100], no wait."""
    return metadata(0) + metadata(1) + [
        collective(0, 1, 0.0, 30.0), collective(1, 1, 20.0, 10.0),
        collective(0, 2, 90.0, 10.0), collective(1, 2, 90.0, 10.0)]


def test_binned_activity_matches_the_intervals():
    edges, activity = chorus_trace.binned_activity(simple_plot_trace(), bins=10)
    assert edges == pytest.approx([10.0 * i for i in range(11)])
    zeros = [0.0] * 10
    # Rank 0: waiting fills bins 0-1, communication bins 2 and 9, compute the rest.
    assert activity[0]["waiting"] == pytest.approx([10.0, 10.0] + zeros[2:])
    assert activity[0]["communication"] == pytest.approx(
        [0, 0, 10.0, 0, 0, 0, 0, 0, 0, 10.0])
    assert activity[0]["compute"] == pytest.approx([0, 0, 0] + [10.0] * 6 + [0])
    assert activity[1]["waiting"] == pytest.approx(zeros)
    assert activity[1]["communication"] == pytest.approx([0, 0, 10.0, 0, 0, 0, 0, 0, 0, 10.0])
    assert sum(activity[0]["waiting"]) == pytest.approx(20.0)


def test_binned_activity_splits_partial_bins_and_counts_overlap_once():
    # One rank: operations [0, 15] and [5, 25] ms overlap; span [0, 25] in 5 bins of 5 ms.
    events = [collective(0, 1, 0.0, 15.0), collective(0, 2, 5.0, 20.0, group=GROUP2),
              collective(1, 1, 12.0, 3.0), collective(1, 2, 5.0, 1.0, group=GROUP2)]
    edges, activity = chorus_trace.binned_activity(events, bins=5)
    assert edges == pytest.approx([0.0, 5.0, 10.0, 15.0, 20.0, 25.0])
    # Rank 0 waits [0, 12] for rank 1 at #1: bins 5, 5, 2 ms.
    assert activity[0]["waiting"] == pytest.approx([5.0, 5.0, 2.0, 0.0, 0.0])
    assert activity[0]["communication"] == pytest.approx([0.0, 0.0, 3.0, 5.0, 5.0])
    assert activity[0]["compute"] == pytest.approx([0.0] * 5)
    # Rank 1: [5, 6] and [12, 15].
    assert activity[1]["communication"] == pytest.approx([0.0, 1.0, 3.0, 0.0, 0.0])
    assert activity[1]["compute"] == pytest.approx([5.0, 4.0, 2.0, 5.0, 5.0])


def test_plot_writes_a_png(tmp_path, capsys):
    path = write_trace(tmp_path / "trace.json", simple_plot_trace())
    assert chorus_trace.main(["plot", path, "--bins", "10"]) == 0
    out = tmp_path / "trace.png"  # default: .json -> .png
    assert capsys.readouterr().out.strip() == str(out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    chosen = tmp_path / "chosen.png"
    assert chorus_trace.main(["plot", path, "--out", str(chosen)]) == 0
    assert chosen.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
