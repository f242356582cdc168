"""The benchmark commands work: each runs with a tiny workload and prints its whole table.

No timing is asserted (the figures depend on the machine); the target checks are tested on
made-up results instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import roundtrip  # noqa: E402

# The benchmarks are the same code on every Python version: tox runs them once, in its slow env.
pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="the tables name epoll columns"),
    pytest.mark.slow,
]


def run(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_plotted(output: str, path: Path) -> None:
    """``--plot`` wrote a whole PNG at ``path`` and said so on the last line of ``output``."""
    assert output.splitlines()[-1] == f"plot: {path}", output
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) > 5_000, len(data)  # axes, bars or lines and their labels, not a blank


def table_rows(output: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in output.splitlines()
        if line.startswith("|")
    ]


def test_roundtrip_module_prints_every_column_and_row() -> None:
    # 1,100 idle sockets put fds past FD_SETSIZE: the select columns must say so, not fail.
    output = run("-m", "benchmarks.roundtrip", "--round-trips", "20", "--repeats", "2",
                 "--n", "0", "1100", "--quiet")
    header, rule, *rows = table_rows(output)
    assert header == ["N idle", *(column.title for column in roundtrip.COLUMNS)]
    assert len(rule) == len(header)
    assert [row[0] for row in rows] == ["0", "1,100"]
    for cell in rows[0][1:]:
        assert cell.endswith("x)") and "/s (" in cell, cell
    assert rows[0][1].endswith("(1.00x)")
    titles = header[1:]
    for title, cell in zip(titles, rows[1][1:], strict=True):
        if title in (
            "select.select", "select + FIONREAD", "select + Python floor", "iopoll SELECT",
            "polyfill",
        ):  # fmt: skip
            assert cell == "n/a (FD_SETSIZE)"
        else:
            assert "/s (" in cell, (title, cell)
    # The benchmark imports iopoll from src/: the C code is there only if it was built in place.
    accelerated = run("-c", "import iopoll._native as b; print(b.ACCELERATED)").strip()
    language = "C" if accelerated == "True" else "pure Python"
    assert f"iopoll's wait() in {language}." in output
    targets = [line for line in output.splitlines() if line.startswith("target ")]
    assert len(targets) == (5 if language == "C" else 3), targets
    assert "SKIP" in targets[-2]  # flatness needs N=0 and N=10,000
    floor = [line for line in output.splitlines() if line.startswith("floor: ")]
    assert len(floor) == 3, floor
    assert "x bare epoll at N=" in floor[0] and "x bare select at N=0" in floor[1], floor
    assert "x select + FIONREAD at N=0" in floor[2], floor


def test_roundtrip_script_runs_from_the_repo_root() -> None:
    output = run("benchmarks/roundtrip.py", "--round-trips", "10", "--repeats", "1", "--n", "0",
                 "--quiet")
    header, _, row = table_rows(output)
    assert len(row) == len(header) == len(roundtrip.COLUMNS) + 1


def test_roundtrip_shortens_runs_over_the_budget_and_says_so() -> None:
    output = run("-m", "benchmarks.roundtrip", "--round-trips", "400", "--repeats", "1",
                 "--n", "0", "--budget", "0.000001", "--quiet")
    _, _, row = table_rows(output)
    assert all("/s* (" in cell for cell in row[1:]), row
    assert "fewer round trips (>= 200)" in output


def test_roundtrip_plots_its_table(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    output = run("-m", "benchmarks.roundtrip", "--round-trips", "10", "--repeats", "1",
                 "--n", "0", "1100", "--quiet", "--plot", str(tmp_path))
    assert_plotted(output, tmp_path / "roundtrip.png")


def test_roundtrip_rejects_nonsense_flags() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.roundtrip", "--round-trips", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2
    assert "--round-trips" in done.stderr


@pytest.mark.parametrize("command", [["-m", "benchmarks.memory"], ["benchmarks/memory.py"]])
def test_memory_prints_bytes_per_watcher(command: list[str]) -> None:
    output = run(*command, "--watchers", "200")
    header, _, *rows = table_rows(output)
    assert header == ["backend", "bytes per watcher", "target"]
    assert [row[0] for row in rows] == ["EPOLL", "POLL"]
    for row in rows:
        assert int(row[1].replace(",", "")) > 0
        assert row[2] in ("PASS", "FAIL")


def test_memory_plots_its_table(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    output = run("benchmarks/memory.py", "--watchers", "200", "--plot", str(tmp_path))
    assert_plotted(output, tmp_path / "memory.png")


@pytest.mark.parametrize("command", [["-m", "benchmarks.churn"], ["benchmarks/churn.py"]])
def test_churn_prints_every_column(command: list[str]) -> None:
    output = run(*command, "--ops", "50", "--repeats", "1")
    header, _, *rows = table_rows(output)
    assert header == ["column", "add + remove", "modify"]
    assert [row[0] for row in rows] == [
        "select.epoll (bare)",
        "selectors EpollSelector",
        "iopoll EPOLL",
        "select.poll (bare)",
        "selectors PollSelector",
        "iopoll POLL",
        "iopoll_polyfill (SELECT)",
    ]
    for row in rows:
        assert float(row[1]) > 0 and float(row[2]) > 0


def test_churn_plots_its_table(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    output = run("-m", "benchmarks.churn", "--ops", "50", "--repeats", "1", "--plot", str(tmp_path))
    assert_plotted(output, tmp_path / "churn.png")


def made_up(rates: dict[tuple[int, str], float]) -> roundtrip.Results:
    results = roundtrip.Results(1000, sorted({n for n, _ in rates}), [t for _, t in rates])
    results.cells = {key: 1 / rate for key, rate in rates.items()}
    return results


def test_targets_pass_and_fail_on_the_stated_thresholds() -> None:
    epoll, selector, ours = roundtrip.BARE_EPOLL, roundtrip.EPOLL_SELECTOR, roundtrip.IOPOLL_EPOLL
    poll, our_poll = roundtrip.BARE_POLL, roundtrip.IOPOLL_POLL
    floor, polyfill = roundtrip.SELECT_FIONREAD, roundtrip.POLYFILL
    rates = {
        (0, epoll): 100.0, (0, selector): 90.0, (0, ours): 106.0,
        (0, poll): 100.0, (0, our_poll): 101.0, (0, floor): 100.0, (0, polyfill): 95.0,
        (100, epoll): 100.0, (100, selector): 80.0, (100, ours): 104.0,
        (100, poll): 90.0, (100, our_poll): 89.0, (100, floor): 50.0, (100, polyfill): 44.0,
        (10_000, epoll): 85.0, (10_000, selector): 75.0, (10_000, ours): 92.0,
    }
    checks = roundtrip.targets(made_up(rates), c_wait=True)
    assert [met for met, _ in checks] == [False, True, False, False, False]
    assert "1.04x at N=100" in checks[0][1]
    assert "0.99x at N=100" in checks[2][1]
    assert "-13.2%" in checks[3][1]
    assert "0.88x at N=100" in checks[4][1]
    # The pure-Python wait is held to selectors alone.
    pure = roundtrip.targets(made_up(rates), c_wait=False)
    assert [met for met, _ in pure] == [True, False, False]
    assert "1.18x at N=0" in pure[0][1]
    rates[100, ours], rates[10_000, ours] = 106.0, 96.0
    rates[100, our_poll], rates[100, polyfill] = 90.0, 45.0
    assert [met for met, _ in roundtrip.targets(made_up(rates), c_wait=True)] == [True] * 5


def test_floor_note_reads_the_polyfill_against_select_plus_fionread() -> None:
    select_, floor, polyfill = roundtrip.BARE_SELECT, roundtrip.SELECT_FIONREAD, roundtrip.POLYFILL
    rates = {
        (0, select_): 100.0, (0, floor): 85.0, (0, polyfill): 68.0,
        (100, select_): 50.0, (100, floor): 45.0, (100, polyfill): 40.0,
    }
    (note,) = roundtrip.floor_notes(made_up(rates))
    assert "is 0.85x bare select at N=0" in note
    assert "the polyfill is 0.80x that floor at N=0" in note
    epoll, python_floor, ours = (
        roundtrip.BARE_EPOLL, roundtrip.EPOLL_PYTHON_FLOOR, roundtrip.IOPOLL_EPOLL
    )
    rates.update({(0, epoll): 100.0, (0, python_floor): 90.0, (0, ours): 87.0})
    epoll_note, select_note = roundtrip.floor_notes(made_up(rates))
    assert "is 0.90x bare epoll at N=0" in epoll_note
    assert "iopoll EPOLL is 0.97x that floor at N=0" in epoll_note
    assert select_note == note
    del rates[0, floor], rates[100, floor], rates[0, python_floor]
    assert roundtrip.floor_notes(made_up(rates)) == []


def _aio_rows(output: str, concurrency: list[int]) -> list[list[str]]:
    rows = [line.split() for line in output.splitlines() if line[:8].strip().isdigit()]
    assert [int(row[0]) for row in rows] == concurrency, output
    return rows


def test_bench_aio_prints_median_rates_ratios_and_the_target_line() -> None:
    output = run("-m", "benchmarks.bench_aio", "--slice", "0.05", "--cycles", "2",
                 "--concurrency", "1", "3")
    assert "2 cycles of 0.05 s per server" in output
    header = next(line for line in output.splitlines() if line.lstrip().startswith("clients"))
    for column in ("asyncio req/s", "iopoll.aio req/s", "iopoll.aio ratio"):
        assert column in header
    ratio_columns = header.count(" ratio")
    for row in _aio_rows(output, [1, 3]):
        rates = [float(cell.replace(",", "")) for cell in row[1:3]]
        assert all(rate > 0 for rate in rates), row
        ratio, spread = row[-2 * ratio_columns :][:2]  # iopoll.aio's "1.02x (0.98-1.03)"
        low, high = (float(x) for x in spread.strip("()").split("-"))
        assert low <= float(ratio.rstrip("x")) <= high, row
    assert "Target iopoll.aio >= 1.00x asyncio on every row: " in output


def test_bench_aio_plots_its_table(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    output = run("-m", "benchmarks.bench_aio", "--slice", "0.02", "--cycles", "2",
                 "--concurrency", "1", "--plot", str(tmp_path))
    assert_plotted(output, tmp_path / "bench_aio.png")


@pytest.mark.skipif(shutil.which("callgrind_control") is None, reason="needs valgrind")
def test_bench_aio_counts_instructions_per_round_trip() -> None:
    output = run("-m", "benchmarks.bench_aio", "--instructions", "--round-trips", "200",
                 "--concurrency", "2")
    assert "Instructions per round trip" in output
    (row,) = _aio_rows(output, [2])
    counts = [float(cell.replace(",", "")) for cell in row[1:3]]
    # A round trip is a wait, a recv() and a send() at least: thousands of instructions.
    assert all(count > 1000 for count in counts), row


def test_handles_prints_the_timer_tables_and_the_wake_up_latencies() -> None:
    output = run("-m", "benchmarks.handles", "--round-trips", "30", "--rounds", "2",
                 "--samples", "6", "--armed", "0", "50", "--due", "1", "3", "--quiet")
    tables = [
        [row for row in table_rows(chunk) if row[0] and not set(row[0]) <= set("-:")]
        for chunk in output.split("\nTable ")[1:]
    ]
    assert len(tables) == 3, output
    (armed_header, *armed), (due_header, *due), (latency_header, *latency) = tables
    assert armed_header[:3] == ["A armed", "select.epoll", "iopoll EPOLL, no timer"]
    assert [row[0] for row in armed] == ["0", "50"]
    for row in armed:
        assert all("/s" in row[i] for i in (1, 2, 4)) and row[5].endswith(")"), row
    assert due_header[4:6] == ["timers / armed only", "timer reports/wait"]
    assert [row[0] for row in due] == ["1", "3", "3 + 10,000 armed"]
    # Every wait reports each due timer once (a periodic timer far behind skips, no burst).
    assert [float(row[5]) for row in due] == [1.0, 3.0, 3.0], due
    assert latency_header[:5] == ["wake-up", "samples", "median us", "p90 us", "p99 us"]
    titles = [row[0] for row in latency]
    assert titles[:4] == [
        "epoll + eventfd (bare)", "iopoll Context + NotifyHandle",
        "asyncio call_soon_threadsafe", "iopoll.aio call_soon_threadsafe",
    ]
    for row in latency:
        assert row[1] == "6" and all(float(cell) > 0 for cell in row[2:5]), row


def test_handles_rejects_nonsense_flags() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.handles", "--samples", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2
    assert "--samples" in done.stderr


def test_plots_runs_each_benchmark_and_keeps_its_table_beside_its_picture(
    tmp_path: Path,
) -> None:
    pytest.importorskip("matplotlib")
    run("-m", "benchmarks.plots", str(tmp_path), "--quick", "--only", "memory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["memory.png", "memory.txt"]
    table = (tmp_path / "memory.txt").read_text()
    assert "Memory per watcher with 2,000 watchers" in table
    assert "plot: " not in table
    assert (tmp_path / "memory.png").read_bytes().startswith(PNG_SIGNATURE)
