"""Smoke test: ``python -m benchmarks.bench_loop`` runs and prints every row and column."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# The benchmark is the same code on every Python version: tox runs it once, in its slow env.
pytestmark = pytest.mark.slow


def test_bench_loop_prints_every_row_and_the_target_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_loop", "-n", "1000", "--repeat", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for column in ("IoPollDriver", "pure Python", "SelectorsDriver", "asyncio"):
        assert column in out
    for row in ("defer", "delay(0)", "repeat(0)", "I/O register+cancel", "suspend/resume"):
        assert f"| {row}" in out
    for idle in (0, 100, 1000):
        assert f"round trips, {idle} idle" in out
    assert "Target IoPollDriver >= 3x pure Python on defer, delay(0), repeat(0): " in out
    assert "IoPollDriver's dispatch in " in out


def test_bench_loop_plots_its_table(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("matplotlib")
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_loop", "-n", "200", "--repeat", "1",
         "--plot", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    path = tmp_path / "bench_loop.png"
    assert result.stdout.splitlines()[-1] == f"plot: {path}"
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 5_000, len(data)


def test_bench_loop_child_runs_every_cell_of_the_instruction_table() -> None:
    """``--instructions`` runs each cell as ``--child ROW COLUMN N`` under callgrind; every
    cell must run on its own (without valgrind here: that takes minutes)."""
    from benchmarks.bench_loop import INSTRUCTION_ROWS, _columns

    for row in INSTRUCTION_ROWS:
        for column in _columns():
            result = subprocess.run(
                [sys.executable, "-m", "benchmarks.bench_loop", "--child", row, column, "50"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert result.returncode == 0, (row, column, result.stderr)
