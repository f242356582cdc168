"""HTTP "hello" under wrk: iopoll.loop, asyncio Protocols and uvicorn, 1 and N processes.

    python -m benchmarks.bench_http [--duration 3] [--rounds 3] [--connections 200]
                                    [--workers N] [--servers NAME ...] [--plot DIR] [--check]
    python -m benchmarks.bench_http --idle 700   # and 700 connections that send nothing

Workerman's table, for Python: a keep-alive HTTP/1.1 responder that answers every request
with "Hello, World!", loaded by ``wrk -t2 -c200`` on loopback, one server process and then
N (``--workers``, default the core count), each of the N with its own ``SO_REUSEPORT``
listener.  The servers (rows):

- ``examples/http_hello.py`` on ``iopoll.loop``: ``IoPollDriver`` on the native backend,
  the same driver on the polyfill's ``SELECT``, and ``SelectorsDriver``;
- the same responder (its ``HelloRequests``, httptools underneath) as an
  ``asyncio.Protocol`` on stock asyncio, ``iopoll.aio`` and uvloop
  (``benchmarks/http_servers.py``);
- uvicorn (httptools parser, no access log) with a three-line ASGI app on the same three loops.

Every server is started and stopped by the benchmark.  Each round loads every server once,
in an order rotated from round to round, for ``--duration`` seconds, after one warm-up
second each.  Two figures per cell: requests/s as wrk counts them, and the server's CPU
time per request, read from ``/proc/PID/stat`` of every worker before and after the load.
Cells show the median over the rounds and the lowest-highest range; the target lines
compare paired ratios (two servers' figures from the same round), median over the rounds.

In the one-process column the server is pinned to the last core and wrk to the others
(``--no-pin`` leaves both to the scheduler, which moves requests/s by 20% from run to run
here); with N processes nothing is pinned.  Where wrk's share of the cores is the
bottleneck (on two cores wrk has one), requests/s says more about wrk than about the
server, and CPU per request is the figure to compare.

The listeners are made by ``http_hello.listener()``: ``IPPROTO_TCP`` spelled out and
``TCP_NODELAY`` set on the listener.  uvicorn's own multi-worker mode makes its socket
with protocol 0, and asyncio turns Nagle's algorithm off only on sockets whose ``proto``
says TCP (uvicorn issue 3149): with its own listener every server runs with Nagle off.

wrk comes from the system's packages (Debian/Ubuntu: ``apt install wrk``; macOS:
``brew install wrk``); httptools, uvicorn and uvloop from the ``bench`` extra.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import callgrind, plotting

try:
    import resource
except ImportError:  # Windows
    resource = None  # type: ignore[assignment]
from benchmarks.bench_aio import FIXED_MALLOC

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "http_hello.py"


@dataclass(frozen=True)
class Server:
    """One row: how to start the server, and what it needs installed."""

    name: str  # for --servers
    title: str
    argv: tuple[str, ...]  # after ``python``; --port and --workers are appended
    needs: tuple[str, ...] = ()


def _servers() -> tuple[Server, ...]:
    import iopoll

    native = iopoll.Backend.AUTO.resolve().name
    proto = ("-m", "benchmarks.http_servers", "protocol", "--loop")
    uvi = ("-m", "benchmarks.http_servers", "uvicorn", "--loop")
    return (
        Server("loop", f"iopoll.loop IoPollDriver ({native})",
               (str(EXAMPLE), "--driver", "native"), ("httptools",)),
        Server("loop-select", "iopoll.loop IoPollDriver (SELECT)",
               (str(EXAMPLE), "--driver", "select"), ("httptools",)),
        Server("loop-selectors", "iopoll.loop SelectorsDriver",
               (str(EXAMPLE), "--driver", "selectors"), ("httptools",)),
        Server("protocol-asyncio", "Protocol on asyncio", (*proto, "asyncio"), ("httptools",)),
        Server("protocol-iopoll", "Protocol on iopoll.aio", (*proto, "iopoll.aio"),
               ("httptools",)),
        Server("protocol-uvloop", "Protocol on uvloop", (*proto, "uvloop"),
               ("httptools", "uvloop")),
        Server("uvicorn-asyncio", "uvicorn on asyncio", (*uvi, "asyncio"),
               ("httptools", "uvicorn")),
        Server("uvicorn-iopoll", "uvicorn on iopoll.aio", (*uvi, "iopoll.aio"),
               ("httptools", "uvicorn")),
        Server("uvicorn-uvloop", "uvicorn on uvloop", (*uvi, "uvloop"),
               ("httptools", "uvicorn", "uvloop")),
    )


SERVERS = _servers()
BY_NAME = {server.name: server for server in SERVERS}


def missing(server: Server) -> str | None:
    """The first package ``server`` needs that is not installed, or None."""
    import importlib.util

    for package in server.needs:
        if importlib.util.find_spec(package) is None:
            return package
    return None


# -- one server: start, CPU time, stop ---------------------------------------------------


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pids: Sequence[int]) -> float | None:
    """User + system CPU time of ``pids`` (all their threads), from ``/proc``; None elsewhere."""
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        total += int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15
    return total / _TICKS


@dataclass
class Running:
    """A started server: its process, its workers' pids, its port."""

    server: Server
    process: subprocess.Popen[str]
    port: int
    pids: list[int] = field(default_factory=list)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cores() -> tuple[set[int], set[int]] | None:
    """(the server's core, wrk's cores) for the one-process column, or None on one core.

    Left to the scheduler, a single-process server sometimes shares a core with a wrk
    thread and sometimes not, and its requests/s jumps between the two cases; pinned, it
    has one core to itself and wrk has the rest.  N-process servers are not pinned: they
    need every core.
    """
    if not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    return ({cpus[-1]}, set(cpus[:-1])) if len(cpus) >= 2 else None


def _pinned(cpus: set[int] | None) -> Callable[[], None] | None:
    return None if cpus is None else lambda: os.sched_setaffinity(0, cpus)


def start(
    server: Server, workers: int, cpus: set[int] | None = None, prefix: Sequence[str] = ()
) -> Running:
    """Start ``server`` with ``workers`` processes (on ``cpus``, if given; under ``prefix``,
    such as valgrind); return once every worker listens."""
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
        **FIXED_MALLOC,  # asyncio's 256 KiB reads: bench_aio's note
    }
    process = subprocess.Popen(
        [*prefix, sys.executable, *server.argv, "--port", str(port), "--workers", str(workers)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True, preexec_fn=_pinned(cpus),
    )
    running = Running(server, process, port)
    assert process.stdout is not None
    while len(running.pids) < workers:
        line = process.stdout.readline()  # "worker PID serving ..."
        if not line:
            running.stop()
            raise RuntimeError(f"{server.title} exited before it listened")
        if line.startswith("worker "):
            running.pids.append(int(line.split()[1]))
    if workers > 1:
        running.pids.append(process.pid)  # the parent, which only waits
    return running


# -- wrk ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Load:
    """What one wrk run measured."""

    rate: float  # requests/s, as wrk reports it
    requests: int
    cpu_us: float | None  # server CPU time per request, microseconds
    errors: str  # wrk's socket errors and non-2xx count, "" when none


def wrk(
    port: int, seconds: float, connections: int, threads: int, cpus: set[int] | None = None,
    patience: int = 2,
) -> tuple[float, int, str]:
    """One wrk run: requests/s, requests, errors.  A request not answered within
    ``patience`` seconds counts as a timeout, not a request (wrk's default is 2)."""
    done = subprocess.run(
        ["wrk", f"-t{threads}", f"-c{connections}", f"-d{max(1, round(seconds))}s",
         f"--timeout={patience}s", f"http://127.0.0.1:{port}/"],
        capture_output=True, text=True, check=True, timeout=seconds + 60,
        preexec_fn=_pinned(cpus),
    )
    rate = re.search(r"Requests/sec:\s+([\d.]+)", done.stdout)
    count = re.search(r"(\d+) requests in", done.stdout)
    if rate is None or count is None:
        raise RuntimeError(f"wrk printed no rate:\n{done.stdout}{done.stderr}")
    errors = [m.group(0) for m in re.finditer(
        r"Socket errors:.*|Non-2xx or 3xx responses: \d+", done.stdout)]
    return float(rate.group(1)), int(count.group(1)), "; ".join(errors)


@contextlib.contextmanager
def idle_connections(port: int, count: int) -> Iterator[None]:
    """``count`` connections to the server on ``port`` that send nothing, held open: what a
    server's poller carries beside wrk's busy connections.  select() looks at every one of
    them on every wait; epoll and kqueue only at the ready ones."""
    held: list[socket.socket] = []
    try:
        for _ in range(count):
            held.append(socket.create_connection(("127.0.0.1", port)))
        if held:
            time.sleep(0.2)  # accepted by now, and watched for reading
        yield
    finally:
        for sock in held:
            sock.close()


def load(
    running: Running, seconds: float, connections: int, threads: int, cpus: set[int] | None,
    idle: int = 0,
) -> Load:
    with idle_connections(running.port, idle):
        before = cpu_seconds(running.pids)
        rate, requests, errors = wrk(running.port, seconds, connections, threads, cpus)
        after = cpu_seconds(running.pids)
    cpu = None if before is None or after is None or not requests else (
        (after - before) / requests * 1e6)
    return Load(rate, requests, cpu, errors)


# -- the run -----------------------------------------------------------------------------


Cell = tuple[str, int]  # (server name, processes)


@dataclass
class Results:
    """Every round's load of every cell, and why a cell was not run."""

    processes: list[int]
    connections: int
    rounds: dict[Cell, list[Load]] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)

    def rates(self, cell: Cell) -> list[float]:
        return [load.rate for load in self.rounds.get(cell, [])]

    def cpus(self, cell: Cell) -> list[float]:
        return [load.cpu_us for load in self.rounds.get(cell, []) if load.cpu_us is not None]

    def paired(self, cell: Cell, baseline: Cell, cpu: bool) -> float | None:
        """Median over the rounds of cell / baseline (requests/s), or baseline / cell (CPU),
        so that above 1.0 means ``cell`` did better either way."""
        a, b = self.rounds.get(cell, []), self.rounds.get(baseline, [])
        ratios = []
        for x, y in zip(a, b, strict=False):
            if cpu and x.cpu_us and y.cpu_us:
                ratios.append(y.cpu_us / x.cpu_us)
            elif not cpu and y.rate:
                ratios.append(x.rate / y.rate)
        return statistics.median(ratios) if ratios else None


def run(
    servers: Sequence[Server], processes: Sequence[int], rounds: int, duration: float,
    connections: int, threads: int, pin: bool = True, progress: bool = True, idle: int = 0,
) -> Results:
    results = Results(list(processes), connections)
    usable = []
    for server in servers:
        why = missing(server)
        if why:
            results.refused[server.name] = f"n/a ({why} not installed)"
        else:
            usable.append(server)
    for count in processes:
        pinned = cores() if pin and count == 1 else None
        server_cpus, wrk_cpus = pinned or (None, None)
        started = [start(server, count, server_cpus) for server in usable]
        try:
            for running in started:  # warm-up: imports, caches, the accept backlog
                wrk(running.port, 1, connections, threads, wrk_cpus)
            for r in range(rounds):
                k = r % len(started)
                for running in started[k:] + started[:k]:
                    measured = load(running, duration, connections, threads, wrk_cpus, idle)
                    results.rounds.setdefault((running.server.name, count), []).append(measured)
                    if progress:
                        cpu = f"{measured.cpu_us:.1f} us/req" if measured.cpu_us else "no CPU"
                        print(f"[{count} proc, round {r + 1}/{rounds}] {running.server.title}: "
                              f"{measured.rate:,.0f} req/s, {cpu}"
                              + (f" ({measured.errors})" if measured.errors else ""),
                              file=sys.stderr, flush=True)
        finally:
            for running in started:
                running.stop()
    return results


def count_instructions(
    servers: Sequence[Server], seconds: float, connections: int, threads: int
) -> dict[str, float]:
    """Instructions each server runs per request under wrk, one process, callgrind.

    Under valgrind a server is some 50 times slower, so each readiness report carries many
    requests: the count is that of a server under full load.  The warm-up's instructions
    are dropped with ``callgrind_control --zero``, the teardown's by ``--dump`` before it.
    """
    import tempfile

    counts: dict[str, float] = {}
    for server in servers:
        if missing(server):
            continue
        with tempfile.TemporaryDirectory() as scratch:
            out = Path(scratch) / "callgrind.out"
            running = start(server, 1, prefix=callgrind.prefix(out))
            try:
                # Warm-up: under valgrind uvicorn takes many seconds to start serving
                # after its socket listens, so load until requests come back, then once more.
                # wrk's patience is raised too: 200 connections on a server 50 times slower
                # wait longer than 2 s each, and would count as timeouts, not requests.
                deadline = time.monotonic() + 180
                while not wrk(running.port, 2, connections, threads, patience=60)[1]:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{server.title} never answered under callgrind")
                wrk(running.port, 2, connections, threads, patience=60)
                callgrind.zero(running.pids[0])
                _, requests, _ = wrk(running.port, seconds, connections, threads, patience=60)
                if not requests:
                    raise RuntimeError(f"{server.title} answered nothing in {seconds:g} s "
                                       "under callgrind: give it a longer --duration")
                counts[server.name] = callgrind.dumped(running.pids[0], out) / requests
            finally:
                running.stop()
        print(f"{server.title}: {counts[server.name]:,.0f} instructions/request "
              f"({requests:,} requests)", file=sys.stderr, flush=True)
    return counts


def format_instructions(counts: dict[str, float], servers: Sequence[Server]) -> str:
    """The count per server, and its ratio to the asyncio server of its kind (the asyncio
    Protocol for the iopoll.loop rows, which run the same responder)."""
    lines = ["| server | instructions/request | vs asyncio (loop rows: vs its Protocol) |",
             "|---|---:|---:|"]
    for server in servers:
        count = counts.get(server.name)
        if count is None:
            lines.append(f"| {server.title} | n/a | |")
            continue
        kind = server.name.split("-")[0]
        base = counts.get("protocol-asyncio" if kind == "loop" else f"{kind}-asyncio")
        ratio = f"{count / base:.2f}x" if base else ""
        lines.append(f"| {server.title} | {count:,.0f} | {ratio} |")
    return "\n".join(lines)


# -- the table, the targets, the plots ---------------------------------------------------


def _spread(values: Sequence[float], digits: int) -> str:
    if not values:
        return "n/a"
    fmt = f"{{:,.{digits}f}}"
    median = fmt.format(statistics.median(values))
    if len(values) == 1:
        return median
    return f"{median} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def format_table(results: Results, servers: Sequence[Server]) -> str:
    header = ["server", *(f"{n} proc req/s" for n in results.processes),
              *(f"{n} proc CPU us/req" for n in results.processes)]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for server in servers:
        if server.name in results.refused:
            cells = [results.refused[server.name]] * (2 * len(results.processes))
        else:
            cells = [_spread(results.rates((server.name, n)), 0) for n in results.processes]
            cells += [_spread(results.cpus((server.name, n)), 1) for n in results.processes]
        lines.append("| " + " | ".join([server.title, *cells]) + " |")
    errors = sorted({f"{BY_NAME[name].title}, {n} proc: {load.errors}"
                     for (name, n), loads in results.rounds.items()
                     for load in loads if load.errors})
    lines += [f"wrk reported: {line}" for line in errors]
    return "\n".join(lines)


def targets(results: Results) -> list[tuple[bool | None, str]]:
    """Each target of issue 15 as (met, line); met is None where a column is missing."""
    out: list[tuple[bool | None, str]] = []
    single, many = results.processes[0], results.processes[-1]

    def at_least(cell: Cell, baseline: Cell, cpu: bool, floor: float, what: str) -> None:
        ratio = results.paired(cell, baseline, cpu)
        if ratio is None:
            out.append((None, f"{what}: not measured"))
        else:
            # Three decimals where two would print a miss as the target itself ("1.00x").
            shown = f"{ratio:.2f}" if f"{ratio:.2f}" != f"{floor:.2f}" else f"{ratio:.3f}"
            out.append((ratio >= floor, f"{what}: {shown}x (target {floor:.2f}x)"))

    for n in results.processes:
        for kind in ("protocol", "uvicorn"):
            for cpu in (False, True):
                figure = "CPU/request" if cpu else "requests/s"
                at_least((f"{kind}-iopoll", n), (f"{kind}-asyncio", n), cpu, 1.0,
                         f"{kind} on iopoll.aio vs asyncio, {figure}, {n} proc")
    at_least(("loop", single), ("protocol-uvloop", single), True, 1.0,
             f"iopoll.loop IoPollDriver vs uvloop Protocol, CPU/request, {single} proc")
    for cpu in (False, True):
        figure = "CPU/request" if cpu else "requests/s"
        at_least(("loop", single), ("loop-select", single), cpu, 1.0,
                 f"IoPollDriver native vs SELECT, {figure}, {single} proc")
    if many != single:
        # Near-linear scale-out: requests per second of server CPU as high with N workers
        # as with one (wrk shares the cores, so requests/s itself cannot scale N-fold here).
        one, n_proc = results.cpus(("loop", single)), results.cpus(("loop", many))
        if one and n_proc:
            ratio = statistics.median(one) / statistics.median(n_proc)
            out.append((ratio >= 0.9, f"IoPollDriver requests per CPU-second, {many} proc vs "
                        f"{single}: {ratio:.2f}x (target 0.90x: near-linear)"))
    return out


def format_targets(results: Results) -> str:
    lines = []
    for met, line in targets(results):
        mark = {True: "met", False: "MISSED", None: "n/a"}[met]
        lines.append(f"target {mark}: {line}")
    return "\n".join(lines)


def plot(results: Results, servers: Sequence[Server], directory: Path, title: str) -> list[Path]:
    shown = [s for s in servers if s.name not in results.refused]
    groups = [s.title.replace("iopoll.loop ", "loop ") for s in shown]
    written = []
    for name, label, values in (
        ("bench_http", f"requests/s (wrk -c{results.connections})", results.rates),
        ("bench_http-cpu", "server CPU per request (us)", results.cpus),
    ):
        series: dict[str, list[float | None]] = {}
        spread: dict[str, list[plotting.Spread | None]] = {}
        for n in results.processes:
            column = f"{n} process" + ("es" if n > 1 else "")
            cells = [values((s.name, n)) for s in shown]
            series[column] = [statistics.median(c) if c else None for c in cells]
            spread[column] = [(min(c), max(c)) if c else None for c in cells]
        written.append(plotting.bars(directory, name, title, label, groups, series, spread))
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per load (3)")
    parser.add_argument("--rounds", type=int, default=3, help="loads per cell (3)")
    parser.add_argument("--connections", type=int, default=200, help="wrk -c (200)")
    parser.add_argument("--threads", type=int, default=2, help="wrk -t (2)")
    parser.add_argument("--idle", type=int, default=0,
                        help="connections held open without requests during each load (0); "
                             "the SELECT row fails past FD_SETSIZE (1024 fds)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="processes of the N-process column (default: the core count)")
    parser.add_argument("--servers", nargs="+", choices=list(BY_NAME), metavar="NAME",
                        help="only these rows: " + ", ".join(BY_NAME))
    parser.add_argument("--no-pin", action="store_true",
                        help="let the scheduler place the one-process servers and wrk")
    parser.add_argument("--instructions", action="store_true",
                        help="count each server's instructions per request (valgrind)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    plotting.add_argument(parser)
    args = parser.parse_args(argv)
    if args.duration < 1 or args.rounds < 1 or args.workers < 1 or args.connections < 1:
        parser.error("--duration, --rounds, --workers and --connections must be at least 1")
    if args.idle < 0:
        parser.error("--idle must be 0 or more")
    if args.idle and resource is not None:  # the benchmark holds them: an fd each
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = args.idle + 64
        if soft != resource.RLIM_INFINITY and soft < wanted:
            if hard != resource.RLIM_INFINITY and hard < wanted:
                parser.error(f"--idle {args.idle} needs {wanted} fds; the hard limit is {hard}")
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    if shutil.which("wrk") is None:
        raise SystemExit("bench_http needs wrk: apt install wrk (Debian, Ubuntu), "
                         "brew install wrk (macOS)")
    servers = [BY_NAME[name] for name in args.servers] if args.servers else list(SERVERS)
    processes = [1] if args.workers == 1 else [1, args.workers]

    import iopoll.loop._iopoll_driver as loop_driver

    language = "C" if loop_driver.ACCELERATED else "pure Python"
    idle = f" + {args.idle} idle connections" if args.idle else ""
    title = (f"Python {sys.version.split()[0]}, wrk -t{args.threads} -c{args.connections}"
             f"{idle}, {args.duration:g} s x {args.rounds} rounds; iopoll.loop dispatch in "
             f"{language}")
    if args.instructions:
        if shutil.which("callgrind_control") is None:
            raise SystemExit("--instructions needs valgrind: apt install valgrind")
        print(f"Python {sys.version.split()[0]}, wrk -t{args.threads} -c{args.connections}, "
              f"{args.duration:g} s under callgrind per server; iopoll.loop dispatch in "
              f"{language}; the server's user-space instructions per request")
        print(format_instructions(
            count_instructions(servers, args.duration, args.connections, args.threads),
            servers))
        return 0
    results = run(servers, processes, args.rounds, args.duration, args.connections,
                  args.threads, pin=not args.no_pin, progress=not args.quiet, idle=args.idle)
    print(title)
    print(format_table(results, servers))
    print(format_targets(results))
    if args.plot:
        for path in plot(results, servers, args.plot, title):
            print(f"plot: {path}")
    return 1 if args.check and any(met is False for met, _ in targets(results)) else 0


if __name__ == "__main__":
    sys.exit(main())
