"""``benchmarks/bench_http.py``: it starts real servers, loads them with wrk, prints its table.

No figure is asserted (they depend on the machine).  The smoke run needs wrk (Debian's
``wrk`` package; ``.ci/run`` installs it where it can) and skips, saying so, without it;
the target lines are checked on made-up results, which needs nothing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import bench_http  # noqa: E402
from benchmarks.bench_http import Load, Results  # noqa: E402

# The benchmark is the same code on every Python version: tox runs it once, in its slow env.
pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="CPU time from /proc"),
    pytest.mark.slow,
]


def test_bench_http_loads_each_server_and_prints_the_table_and_plots(tmp_path: Path) -> None:
    if shutil.which("wrk") is None:
        pytest.skip("wrk is not installed (apt install wrk)")
    pytest.importorskip("httptools")
    pytest.importorskip("matplotlib")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_http", "--duration", "1", "--rounds", "1",
         "--connections", "20", "--workers", "2", "--servers", "loop", "protocol-iopoll",
         "--idle", "3", "--plot", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )
    assert done.returncode == 0, done.stderr
    assert "wrk -t2 -c20 + 3 idle connections," in done.stdout.splitlines()[0]
    rows = [line.strip("|").split("|") for line in done.stdout.splitlines()
            if line.startswith("| ")]
    assert [cell.strip() for cell in rows[0]] == [
        "server", "1 proc req/s", "2 proc req/s", "1 proc CPU us/req", "2 proc CPU us/req"]
    assert [row[0].strip() for row in rows[1:]] == [
        bench_http.BY_NAME["loop"].title, "Protocol on iopoll.aio"]
    for row in rows[1:]:
        for cell in row[1:]:
            assert float(cell.strip().replace(",", "")) > 0, row
    assert "wrk reported" not in done.stdout  # no socket errors, no non-2xx replies
    # Progress: one line per cell on stderr.
    assert done.stderr.count("round 1/1") == 4
    for name in ("bench_http.png", "bench_http-cpu.png"):
        assert (tmp_path / name).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    # Every server was stopped: nothing still listens from this run.
    assert "target" in done.stdout


def test_bench_http_says_how_to_get_wrk_when_it_is_missing() -> None:
    env = {**os.environ, "PATH": "/nonexistent",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_http", "--rounds", "1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 1
    assert "needs wrk: apt install wrk" in done.stderr


def _results(loads: dict[tuple[str, int], list[tuple[float, float]]]) -> Results:
    results = Results([1, 2], 200)
    for cell, values in loads.items():
        results.rounds[cell] = [Load(rate, 1000, cpu, "") for rate, cpu in values]
    return results


def test_targets_read_paired_ratios_the_right_way_round() -> None:
    results = _results({
        # iopoll.aio faster and cheaper than asyncio in both rounds.
        ("protocol-asyncio", 1): [(100.0, 20.0), (200.0, 30.0)],
        ("protocol-iopoll", 1): [(110.0, 16.0), (240.0, 30.0)],
        # uvicorn on iopoll.aio: more requests/s but dearer per request.
        ("uvicorn-asyncio", 1): [(50.0, 100.0)],
        ("uvicorn-iopoll", 1): [(55.0, 110.0)],
        ("loop", 1): [(300.0, 10.0)],
        ("loop", 2): [(400.0, 12.5)],
        ("protocol-uvloop", 1): [(280.0, 11.0)],
        ("loop-select", 1): [(250.0, 10.5)],
    })
    lines = {line: met for met, line in bench_http.targets(results)}
    assert lines["protocol on iopoll.aio vs asyncio, requests/s, 1 proc: 1.15x (target 1.00x)"]
    assert lines["protocol on iopoll.aio vs asyncio, CPU/request, 1 proc: 1.12x (target 1.00x)"]
    assert lines["uvicorn on iopoll.aio vs asyncio, requests/s, 1 proc: 1.10x (target 1.00x)"]
    assert not lines["uvicorn on iopoll.aio vs asyncio, CPU/request, 1 proc: 0.91x "
                     "(target 1.00x)"]
    assert lines["iopoll.loop IoPollDriver vs uvloop Protocol, CPU/request, 1 proc: 1.10x "
                 "(target 1.00x)"]
    assert lines["IoPollDriver native vs SELECT, requests/s, 1 proc: 1.20x (target 1.00x)"]
    # 10 us at one process, 12.5 us at two: 0.80x the requests per CPU-second.
    assert not lines["IoPollDriver requests per CPU-second, 2 proc vs 1: 0.80x "
                     "(target 0.90x: near-linear)"]
    assert lines["protocol on iopoll.aio vs asyncio, requests/s, 2 proc: not measured"] is None
    assert "target MISSED: IoPollDriver requests per CPU-second" in bench_http.format_targets(
        results)


def test_a_miss_by_less_than_a_hundredth_does_not_print_as_the_target() -> None:
    results = _results({
        ("protocol-asyncio", 1): [(1000.0, 20.0)],
        ("protocol-iopoll", 1): [(996.0, 20.0)],
    })
    lines = {line: met for met, line in bench_http.targets(results)}
    assert lines["protocol on iopoll.aio vs asyncio, requests/s, 1 proc: 0.996x "
                 "(target 1.00x)"] is False
    assert lines["protocol on iopoll.aio vs asyncio, CPU/request, 1 proc: 1.000x "
                 "(target 1.00x)"] is True


def test_cpu_seconds_reads_this_process_and_refuses_a_vanished_one() -> None:
    before = bench_http.cpu_seconds([os.getpid()])
    assert before is not None
    sum(i * i for i in range(2_000_000))  # burn some CPU
    after = bench_http.cpu_seconds([os.getpid()])
    assert after is not None and after > before
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert bench_http.cpu_seconds([child.pid]) is None


def test_idle_connections_are_open_while_held_and_closed_after() -> None:
    with socket.create_server(("127.0.0.1", 0), backlog=16) as listener:
        port = listener.getsockname()[1]
        with bench_http.idle_connections(port, 4):
            accepted = [listener.accept()[0] for _ in range(4)]
            for conn in accepted:
                conn.setblocking(False)
                with pytest.raises(BlockingIOError):  # open, and nothing sent
                    conn.recv(1)
        for conn in accepted:
            conn.setblocking(True)
            conn.settimeout(5)
            assert conn.recv(1) == b""  # closed by the peer
            conn.close()
