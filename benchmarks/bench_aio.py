"""TCP echo round trips: stock asyncio vs ``iopoll.aio`` vs uvloop.

    python -m benchmarks.bench_aio [--quick] [--repeats R] [--duration SECONDS]
                                   [--concurrency 1 10 100] [--check] [--instructions]
                                   [--plot DIR]

Each column runs the same asyncio ``Protocol`` echo server (1 KiB messages) in its own
process, on its own event loop.  The load comes from one client process, the same for
every column (uvloop when installed, else stock asyncio): N connections, each sending
1 KiB and waiting for the 1 KiB echo before sending again.

Runs are paired.  Each repeat runs every column once, back to back, in an order rotated
from one repeat to the next; a column's ratio in that repeat is its rate over asyncio's.
Reported: each column's median rate, and the median of its paired ratios with their range.
On a shared machine one cell moves by 10% from run to run; a paired ratio moves less,
because a slow spell of the machine tends to hit both runs of the pair.

``--instructions`` counts instead, with valgrind's callgrind, the instructions each server
executes per round trip, in user space (the kernel's share of the system calls is not
counted).  The count does not depend on how busy the machine is.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

try:
    from . import callgrind, plotting
except ImportError:  # run as a script: its folder is on the path
    import callgrind  # type: ignore[no-redef]
    import plotting  # type: ignore[no-redef]

MESSAGE = b"x" * 1024
LOOPS = ("asyncio", "iopoll.aio", "uvloop")
TARGET = 1.0  # iopoll.aio's median paired ratio to stock asyncio, on every row


def _wait_language() -> str:
    import iopoll._native

    return "C" if iopoll._native.ACCELERATED else "pure Python"


def loop_factory(name: str) -> Any:
    """The event loop class or factory for ``name``, one of ``LOOPS``."""
    if name == "asyncio":
        return asyncio.SelectorEventLoop
    if name == "iopoll.aio":
        import iopoll.aio

        return iopoll.aio.new_event_loop
    import uvloop

    return uvloop.new_event_loop


def _run(name: str, coro: Any) -> Any:
    loop = loop_factory(name)()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


# -- server process ----------------------------------------------------------------------


class EchoProtocol(asyncio.Protocol):
    """Writes back whatever it receives."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: Any = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


async def _serve() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(EchoProtocol, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    # Serve until the parent closes our stdin.
    await loop.run_in_executor(None, sys.stdin.read)
    server.close()


# -- client process ----------------------------------------------------------------------


class Lane:
    """The connections to one server, and the round trips they made in the current slice."""

    def __init__(self) -> None:
        self.connections: list[ClientProtocol] = []
        self.active = False
        self.count = 0
        self.in_flight = 0
        self.limit = 0  # stop after this many round trips (0: when the slice ends)
        self.finished: asyncio.Future[None] | None = None
        self.drained: asyncio.Future[None] | None = None


class ClientProtocol(asyncio.Protocol):
    """Sends 1 KiB, waits for it to come back whole, and repeats while its lane is active."""

    def __init__(self, lane: Lane) -> None:
        self.lane = lane
        self.pending = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: Any = transport

    def start(self) -> None:
        self.lane.in_flight += 1
        self._send()

    def _send(self) -> None:
        self.pending = len(MESSAGE)
        self.transport.write(MESSAGE)

    def data_received(self, data: bytes) -> None:
        self.pending -= len(data)
        if self.pending > 0:
            return
        lane = self.lane
        if lane.active:
            lane.count += 1
            if lane.count != lane.limit:
                self._send()
                return
            lane.active = False
            assert lane.finished is not None
            lane.finished.set_result(None)
        lane.in_flight -= 1
        if lane.in_flight == 0 and lane.drained is not None:
            lane.drained.set_result(None)


async def _load(lane: Lane, seconds: float, round_trips: int = 0) -> float:
    """Drive one server for ``seconds``, or for ``round_trips``; its round trips per second.
    Round trips still in flight at the end are waited for but not counted, so that the next
    slice starts quiet."""
    loop = asyncio.get_running_loop()
    lane.count, lane.active, lane.limit = 0, True, round_trips
    lane.finished = loop.create_future()
    start = time.perf_counter()
    for connection in lane.connections:
        connection.start()
    if round_trips:
        await lane.finished
    else:
        await asyncio.sleep(seconds)
    lane.active = False
    rate = lane.count / (time.perf_counter() - start)
    if lane.in_flight:
        lane.drained = loop.create_future()
        await lane.drained
        lane.drained = None
    return rate


async def _client(
    ports: list[int], concurrency: int, seconds: float, cycles: int, round_trips: int
) -> Any:
    """Load the servers in turn, one slice each per cycle; the rates, a list per cycle.

    With ``round_trips`` (counting instructions): 2,000 round trips to warm up, then a line
    ``warm`` on stdout and a wait for a line on stdin, then ``round_trips`` more, then their
    rate on stdout and a wait for the end of stdin before the connections close: the parent
    reads the server's count between those points, so no set-up or teardown is in it.
    """
    loop = asyncio.get_running_loop()
    lanes = [Lane() for _ in ports]
    for lane, port in zip(lanes, ports, strict=True):
        for _ in range(concurrency):
            _, connection = await loop.create_connection(
                lambda lane=lane: ClientProtocol(lane), "127.0.0.1", port
            )
            lane.connections.append(connection)
    if round_trips:
        await _load(lanes[0], 0.0, 2_000)
        await _tell_and_wait("warm", sys.stdin.readline)
        rate = await _load(lanes[0], 0.0, round_trips)
        await _tell_and_wait(json.dumps(rate), sys.stdin.read)
        return rate
    for lane in lanes:  # warm-up
        await _load(lane, seconds)
    rates = []
    for cycle in range(cycles):
        shift = cycle % len(lanes)  # rotated, so that no server always goes first
        rate = dict.fromkeys(range(len(lanes)), 0.0)
        for index in list(range(shift, len(lanes))) + list(range(shift)):
            rate[index] = await _load(lanes[index], seconds)
        rates.append([rate[index] for index in range(len(lanes))])
    for lane in lanes:
        for connection in lane.connections:
            connection.transport.close()
    return rates


async def _tell_and_wait(line: str, read: Any) -> None:
    print(line, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, read)


def _client_loop() -> str:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


# -- driver ------------------------------------------------------------------------------


# asyncio reads into a fresh 256 KiB buffer per recv().  Whether glibc serves that from mmap
# (three system calls a message) or from the heap depends on its dynamic threshold, i.e. on
# what the process happened to allocate and free before: the same server then runs at one
# speed or at a third of it.  Fixed thresholds give every server the heap, kept between
# messages (no brk() to grow and trim it each time).  bench_http's servers get them too.
FIXED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "1048576", "MALLOC_TRIM_THRESHOLD_": "8388608"}


def _environment() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))


def _start_server(loop_name: str, prefix: list[str]) -> tuple[subprocess.Popen[str], int]:
    env = dict(_environment(), **FIXED_MALLOC)
    server = subprocess.Popen(
        [*prefix, sys.executable, "-m", "benchmarks.bench_aio", "--serve", loop_name],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert server.stdout is not None
    return server, int(server.stdout.readline())


def _finish(process: subprocess.Popen[str]) -> None:
    """Close the process's stdin, which tells it to finish, and wait for it."""
    if process.stdin is not None:
        process.stdin.close()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _run_client(ports: list[int], concurrency: int, seconds: float, cycles: int) -> Any:
    args = [",".join(map(str, ports)), str(concurrency), str(seconds), str(cycles), "0"]
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_aio", "--client", *args],
        check=True,
        capture_output=True,
        text=True,
        env=_environment(),
        timeout=len(ports) * (cycles + 1) * (seconds + 1) + 600,
    ).stdout
    return json.loads(out)


def _measure(columns: list[str], concurrency: int, seconds: float, cycles: int) -> list[Any]:
    """Round trips per second of every column's server, a list per cycle (see _client)."""
    servers = [_start_server(name, []) for name in columns]
    try:
        return list(_run_client([port for _, port in servers], concurrency, seconds, cycles))
    finally:
        for server, _ in servers:
            _finish(server)


def _count_instructions(server_loop: str, concurrency: int, round_trips: int) -> float:
    """Instructions the server executes per round trip, warm-up excluded (callgrind)."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "callgrind.out"
        server, port = _start_server(server_loop, callgrind.prefix(out))
        args = [str(port), str(concurrency), "0", "0", str(round_trips)]
        client = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.bench_aio", "--client", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=_environment(),
            text=True,
        )
        try:
            assert client.stdin is not None and client.stdout is not None
            assert client.stdout.readline().strip() == "warm"
            callgrind.zero(server.pid)
            client.stdin.write("go\n")
            client.stdin.flush()
            client.stdout.readline()  # the measured round trips are done
            count = callgrind.dumped(server.pid, out)
        finally:
            _finish(client)
            _finish(server)
    return count / round_trips


def _available(name: str) -> bool:
    try:
        loop_factory(name)
    except ImportError:
        return False
    return True


def _pin_to_cpu(index: int) -> None:
    # The servers (one busy at a time) get one core and the client the other: left to the
    # scheduler, a server and the client sometimes share a core and sometimes not, and the
    # figures jump between two modes (3x apart here).
    if hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) >= 2:
            os.sched_setaffinity(0, {cpus[index]})


def _table_header(columns: list[str], unit: str, ratio: str) -> str:
    header = f"{'clients':>8} " + " ".join(f"{name + ' ' + unit:>18}" for name in columns)
    return header + " " + " ".join(f"{name + ' ' + ratio:>22}" for name in columns[1:])


# Concurrency -> column -> its figures: one per cycle, or the one instruction count.
Rows = dict[int, dict[str, list[float]]]


def plot(rows: Rows, directory: Path, title: str, name: str, ylabel: str) -> Path:
    """``<name>.png`` in ``directory``: a group of bars per concurrency, a bar per column.

    A bar is the median of the column's figures; the error bar, their lowest and highest,
    where there are several (not for the instruction counts).
    """
    columns = list(next(iter(rows.values())))
    groups = [f"{concurrency:,} client{'s' * (concurrency != 1)}" for concurrency in rows]
    series = {c: [statistics.median(row[c]) for row in rows.values()] for c in columns}
    spread = None
    if any(len(figures) > 1 for row in rows.values() for figures in row.values()):
        spread = {c: [(min(row[c]), max(row[c])) for row in rows.values()] for c in columns}
    return plotting.bars(directory, name, title, ylabel, groups, series, spread)


def _throughput(columns: list[str], args: argparse.Namespace) -> tuple[bool, Rows, str]:
    """Print the round-trip table; whether iopoll.aio meets its target, the rates per cycle
    and the table's header line."""
    header = (
        f"TCP echo, 1 KiB messages, {args.cycles} cycles of {args.slice:g} s per server, "
        f"client on {_client_loop()}, "
        f"Python {sys.version.split()[0]}, iopoll's wait() in {_wait_language()}"
    )
    print(header)
    print("req/s: median over the cycles; ratio: median of the per-cycle ratios to asyncio")
    print("(interquartile range)")
    print(_table_header(columns, "req/s", "ratio"))
    met = True
    rows: Rows = {}
    for concurrency in args.concurrency:
        cycles = _measure(columns, concurrency, args.slice, args.cycles)
        rates = {name: [cycle[index] for cycle in cycles] for index, name in enumerate(columns)}
        rows[concurrency] = rates
        row = f"{concurrency:>8} "
        row += " ".join(f"{statistics.median(rates[name]):>18,.0f}" for name in columns)
        for name in columns[1:]:
            ratios = [mine / base for mine, base in zip(rates[name], rates["asyncio"], strict=True)]
            low, median, high = statistics.quantiles(ratios, n=4, method="inclusive")
            row += f" {median:>8.2f}x ({low:.2f}-{high:.2f})"
            if name == "iopoll.aio" and median < TARGET:
                met = False
        print(row, flush=True)
    print(f"Target iopoll.aio >= {TARGET:.2f}x asyncio on every row: {'met' if met else 'MISSED'}")
    return met, rows, header


def _instructions(columns: list[str], args: argparse.Namespace) -> tuple[Rows, str]:
    """Print the instruction table; the counts and the table's header line."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("--instructions needs valgrind (callgrind and callgrind_control) on PATH")
    header = (
        f"Instructions per round trip in the server (callgrind, user space), "
        f"{args.round_trips:,} round trips after 2,000 to warm up, "
        f"Python {sys.version.split()[0]}, iopoll's wait() in {_wait_language()}"
    )
    print(header)
    print(_table_header(columns, "instr", "vs asyncio"))
    rows: Rows = {}
    for concurrency in args.concurrency:
        counts = {
            name: _count_instructions(name, concurrency, args.round_trips) for name in columns
        }
        rows[concurrency] = {name: [count] for name, count in counts.items()}
        row = f"{concurrency:>8} " + " ".join(f"{counts[name]:>18,.0f}" for name in columns)
        row += " " + " ".join(
            f"{counts[name] / counts['asyncio']:>21.2f}x" for name in columns[1:]
        )
        print(row, flush=True)
    return rows, header


def main(argv: list[str] | None = None) -> None:
    """Command line entry point (also the server and client processes)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 cycles of 0.1 s slices")
    parser.add_argument("--slice", type=float, default=0.25, help="seconds per server per cycle")
    parser.add_argument("--cycles", type=int, default=16, help="cycles per row (at least 2)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--check", action="store_true", help="exit 1 when the target is missed")
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions (valgrind) instead"
    )
    parser.add_argument("--round-trips", type=int, default=10_000, help="with --instructions")
    plotting.add_argument(parser)
    parser.add_argument("--serve", choices=LOOPS, help=argparse.SUPPRESS)
    parser.add_argument("--client", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.serve:
        _pin_to_cpu(0)
        _run(args.serve, _serve())
        return
    if args.client:
        _pin_to_cpu(1)
        ports, concurrency, seconds, cycles, round_trips = args.client
        load = _client(
            [int(port) for port in ports.split(",")],
            int(concurrency),
            float(seconds),
            int(cycles),
            int(round_trips),
        )
        result = _run(_client_loop(), load)
        if not int(round_trips):  # with round_trips, _client has printed its result
            print(json.dumps(result))
        return

    columns = [name for name in LOOPS if _available(name)]
    if args.instructions:
        rows, header = _instructions(columns, args)
        if args.plot:
            path = plot(rows, args.plot, header, "bench_aio-instructions",
                        "instructions per round trip")
            print(f"plot: {path}")
        return
    if args.quick:
        args.cycles, args.slice = 2, 0.1
    args.cycles = max(2, args.cycles)
    met, rows, header = _throughput(columns, args)
    if args.plot:
        title = f"{header}; bars: median, error bars: the slowest and fastest cycle"
        print(f"plot: {plot(rows, args.plot, title, 'bench_aio', 'round trips per second')}")
    if args.check and not met:
        sys.exit(1)


if __name__ == "__main__":
    main()
