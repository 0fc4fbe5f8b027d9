"""Tests of bench/plot_python_compare.py on synthetic python_compare.py CSV files.

    /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/tools/test_plot_python_compare.py

The runs are written here with chosen times, so the medians and ratios the table must show are
closed forms of those choices.
"""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "plot_python_compare.py"
sys.path.insert(0, str(SCRIPT.parent))
import plot_python_compare  # noqa: E402

MODES = ("out", "fresh", "inplace")


def write_run(path, reference, chorus_us, reference_us, sizes=(8, 1 << 20)):
    """One run: every size and mode at the given microseconds (a size's time times its index+1)."""
    lines = ["bytes,mode,library,seconds"]
    for index, nbytes in enumerate(sizes):
        for mode in MODES:
            lines.append(f"{nbytes},{mode},chorus,{chorus_us * (index + 1) * 1e-6}")
            lines.append(f"{nbytes},{mode},{reference},{reference_us * (index + 1) * 1e-6}")
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_the_table_takes_the_median_of_the_runs_and_the_ratio_of_the_medians(tmp_path, capsys):
    runs = [write_run(tmp_path / f"run{i}.csv", "mpi4py", chorus, theirs)
            for i, (chorus, theirs) in enumerate([(1.0, 3.0), (2.0, 4.0), (9.0, 50.0)])]
    plot_python_compare.main(runs + ["--table"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| size | out chorus | out mpi4py | out ratio | fresh chorus")
    # medians: chorus 2 µs, mpi4py 4 µs at 8 B; twice that at 1 MiB; ratio 2 either way.
    assert lines[2] == "| 8 B |" + " 2.00 µs | 4.00 µs | 2.00× |" * 2 + " 2.00 µs | 4.00 µs | 2.00× |"
    assert lines[3] == "| 1 MiB |" + " 4.00 µs | 8.00 µs | 2.00× |" * 3
    assert len(lines) == 4


def test_it_draws_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    run = write_run(tmp_path / "run.csv", "torch.gloo", 1.0, 30.0)
    output = tmp_path / "plot.png"
    subprocess.run([sys.executable, str(SCRIPT), run, "-o", str(output)], check=True)
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_it_refuses_a_file_of_another_tool_and_mixed_references(tmp_path):
    other = tmp_path / "bench.csv"
    other.write_text("collective,ranks,backend,size_bytes,time_us,busbw_gbps\n")
    with pytest.raises(SystemExit, match="not a python_compare.py --csv file"):
        plot_python_compare.main([str(other), "--table"])
    mixed = [write_run(tmp_path / "a.csv", "mpi4py", 1, 2), write_run(tmp_path / "b.csv", "torch.gloo", 1, 2)]
    with pytest.raises(SystemExit, match="one reference library"):
        plot_python_compare.main(mixed + ["--table"])


def test_the_rows_of_other_operations_make_a_second_table(tmp_path, capsys):
    """A python_compare.py --ops run: allreduce's modes, then OP/out rows and barrier at 0 B; an
    op the reference lacks has chorus's time only."""
    run = tmp_path / "ops.csv"
    lines = ["bytes,mode,library,seconds"]
    for mode in MODES:
        lines += [f"8,{mode},chorus,1e-6", f"8,{mode},mpi4py,2e-6"]
    lines += ["8,broadcast/out,chorus,1e-6", "8,broadcast/out,mpi4py,3e-6",
              "4096,broadcast/out,chorus,4e-6", "4096,broadcast/out,mpi4py,2e-6",
              "8,reduce_scatter/out,chorus,5e-6", "0,barrier,chorus,1e-6", "0,barrier,mpi4py,1e-6"]
    run.write_text("\n".join(lines) + "\n")
    plot_python_compare.main([str(run), "--table"])
    out = capsys.readouterr().out.splitlines()
    assert out[2] == "| 8 B |" + " 1.00 µs | 2.00 µs | 2.00× |" * 3
    assert len(out) == 3 + 1 + 2 + 4
    assert out[4:] == ["| op | size | chorus | mpi4py | ratio |", "|:---|---:|---:|---:|---:|",
                       "| broadcast out | 8 B | 1.00 µs | 3.00 µs | 3.00× |",
                       "| broadcast out | 4 KiB | 4.00 µs | 2.00 µs | 0.50× |",
                       "| reduce_scatter out | 8 B | 5.00 µs | n/a | - |",
                       "| barrier | - | 1.00 µs | 1.00 µs | 1.00× |"]
    with pytest.raises(SystemExit, match="no allreduce rows"):
        run.write_text("bytes,mode,library,seconds\n0,barrier,chorus,1e-6\n0,barrier,mpi4py,1e-6\n")
        plot_python_compare.main([str(run), "-o", str(tmp_path / "p.png")])
