"""Dispatch benchmarks of ``iopoll.loop`` against asyncio and uvloop.

    python -m benchmarks.bench_loop            # 100,000 ops per row (round trips: 20,000)
    python -m benchmarks.bench_loop --quick    # 10x fewer
    python -m benchmarks.bench_loop --instructions   # callgrind: instructions per operation
    python -m benchmarks.bench_loop --quick --plot plots   # also plots/bench_loop.png

Rows (ext-eventloop's benchmark, plus PR #128's round trips):
* defer: N defer() then one run()                   | asyncio: call_soon
* delay(0): N delay(0) then one run()               | asyncio: call_later(0)
* repeat(0): one repeat(0) counting to N            | asyncio: call_later(0) re-armed by itself
* I/O register+cancel: N on_readable + cancel, loop not run
                                                    | asyncio: add_reader + remove_reader (these do
                                                      epoll_ctl system calls; ours only queue work)
* suspend/resume: N suspend() resumed by a defer, in a callback
                                                    | asyncio: await a Future resolved by call_soon
* round trips, K idle: ping-pong over a socketpair through on_readable, with K other
  sockets watched for reading that are never ready    | asyncio: add_reader

Columns: ``IoPollDriver`` (its dispatch in C when ``iopoll.loop._speedups`` was built), the
same driver in pure Python (``PyIoPollDriver``, the reference), ``SelectorsDriver``, asyncio
and uvloop.  uvloop runs ``call_later(0)`` as ``call_soon`` (no timer), which is why its
delay(0) row is its defer row; asyncio's goes through its timer heap, as ours does.

Wall-clock rates on a shared machine drift; ``--instructions`` counts, with valgrind's
callgrind, the instructions one operation costs each column (a run of 6,000 operations less
one of 1,000, each in a fresh process, so that start-up cancels out), which come back the
same on every run.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from iopoll.loop import Driver, IoPollDriver, SelectorsDriver
from iopoll.loop._iopoll_driver import ACCELERATED, PyIoPollDriver

from . import callgrind, plotting

try:
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None  # type: ignore[assignment]


def timed(fn: Callable[[], None], ops: int) -> float:
    started = time.perf_counter()
    fn()
    return ops / (time.perf_counter() - started)


@contextlib.contextmanager
def socket_pairs(count: int) -> Iterator[list[tuple[socket.socket, socket.socket]]]:
    """``count`` connected socket pairs, all closed on exit."""
    pairs = [socket.socketpair() for _ in range(count)]
    try:
        yield pairs
    finally:
        for x, y in pairs:
            x.close()
            y.close()


def ping_pong(
    a: socket.socket, b: socket.socket, n: int, stop: Callable[[], None]
) -> tuple[Callable[..., None], Callable[..., None]]:
    """The reader callbacks of ``n`` round trips over the pair ``(a, b)``: ``echo`` (for ``b``)
    sends back what it reads; ``pong`` (for ``a``) counts a trip and starts the next, or calls
    ``stop`` after the last.  They take what their loop passes as optional parameters (a
    driver's callback id and stream; asyncio's nothing): a ``*args`` signature would make
    the driver's call build a tuple that asyncio's, with no arguments, never does."""
    count = [0]

    def echo(cid: object = None, stream: object = None) -> None:
        b.send(b.recv(16))

    def pong(cid: object = None, stream: object = None) -> None:
        a.recv(16)
        count[0] += 1
        if count[0] == n:
            stop()
        else:
            a.send(b"x")

    return echo, pong


# -- iopoll.loop drivers ----------------------------------------------------------------------


def loop_burst(make: Callable[[], Driver], n: int, delay: float | None) -> float:
    """N ``defer()`` (``delay`` None) or ``delay(delay)`` calls, then one ``run()``.

    The callback counts and stops the loop at the last one, as the asyncio column's must
    (``run()`` would end by itself once nothing is left): every column's callback does the
    same work, so the rows compare the loops, not the callbacks.
    """
    d = make()
    count = [0]

    def cb(cid: str) -> None:
        count[0] += 1
        if count[0] == n:
            d.stop()

    def body() -> None:
        count[0] = 0
        if delay is None:
            for _ in range(n):
                d.defer(cb)
        else:
            for _ in range(n):
                d.delay(delay, cb)
        d.run()

    return timed(body, n)


def loop_repeat(make: Callable[[], Driver], n: int) -> float:
    d = make()
    count = [0]

    def cb(cid: str) -> None:
        count[0] += 1
        if count[0] == n:
            d.cancel(cid)

    def body() -> None:
        d.repeat(0, cb)
        d.run()

    return timed(body, n)


def loop_register(make: Callable[[], Driver], n: int) -> float:
    d = make()

    def cb(cid: str, stream: Any) -> None:
        pass

    with socket_pairs(1) as [(a, _)]:

        def body() -> None:
            for _ in range(n):
                d.cancel(d.on_readable(a, cb))

        return timed(body, n)


def loop_suspend(make: Callable[[], Driver], n: int) -> float:
    """N suspensions in one callback, each resumed by a deferred ``resume``.

    The defer runs ``suspension.resume(id)`` itself, as the asyncio column's ``call_soon``
    runs ``future.set_result(None)``: a bound method in both, and no closure in either.
    """
    d = make()

    def cb(cid: str) -> None:
        for _ in range(n):
            suspension = d.get_suspension()
            d.defer(suspension.resume)
            suspension.suspend()

    def body() -> None:
        d.defer(cb)
        d.run()

    return timed(body, n)


def loop_round_trips(make: Callable[[], Driver], n: int, idle: int) -> float:
    d = make()
    with socket_pairs(1 + idle) as [(a, b), *idles]:
        for x, _ in idles:
            d.unreference(d.on_readable(x, lambda cid, s: None))
        echo, pong = ping_pong(a, b, n, d.stop)
        d.on_readable(b, echo)
        d.on_readable(a, pong)
        d.delay(0, lambda cid: d.stop())
        d.run()  # warm-up: every registration is in the backend before the clock starts

        def body() -> None:
            a.send(b"x")
            d.run()

        return timed(body, n)


# -- asyncio / uvloop --------------------------------------------------------------------------


def aio_burst(make: Callable[[], asyncio.AbstractEventLoop], n: int, later: bool) -> float:
    """N ``call_soon`` (or, ``later``, ``call_later(0)``) callbacks, the last one stops."""
    with contextlib.closing(make()) as loop:
        count = [0]

        def cb() -> None:
            count[0] += 1
            if count[0] == n:
                loop.stop()

        def body() -> None:
            if later:
                for _ in range(n):
                    loop.call_later(0, cb)
            else:
                for _ in range(n):
                    loop.call_soon(cb)
            loop.run_forever()

        return timed(body, n)


def aio_repeat(make: Callable[[], asyncio.AbstractEventLoop], n: int) -> float:
    with contextlib.closing(make()) as loop:
        count = [0]

        def cb() -> None:
            count[0] += 1
            if count[0] == n:
                loop.stop()
            else:
                loop.call_later(0, cb)

        def body() -> None:
            loop.call_later(0, cb)
            loop.run_forever()

        return timed(body, n)


def aio_register(make: Callable[[], asyncio.AbstractEventLoop], n: int) -> float:
    with socket_pairs(1) as [(a, _)], contextlib.closing(make()) as loop:

        def cb() -> None:
            pass

        def body() -> None:
            for _ in range(n):
                loop.add_reader(a, cb)
                loop.remove_reader(a)

        return timed(body, n)


def aio_suspend(make: Callable[[], asyncio.AbstractEventLoop], n: int) -> float:
    with contextlib.closing(make()) as loop:

        async def main() -> None:
            for _ in range(n):
                future = loop.create_future()
                loop.call_soon(future.set_result, None)
                await future

        return timed(lambda: loop.run_until_complete(main()), n)


def aio_round_trips(make: Callable[[], asyncio.AbstractEventLoop], n: int, idle: int) -> float:
    with socket_pairs(1 + idle) as [(a, b), *idles], contextlib.closing(make()) as loop:
        a.setblocking(False)
        b.setblocking(False)
        for x, _ in idles:
            loop.add_reader(x, lambda: None)
        echo, pong = ping_pong(a, b, n, loop.stop)
        loop.add_reader(b, echo)
        loop.add_reader(a, pong)
        loop.call_soon(loop.stop)
        loop.run_forever()  # warm-up, as for the drivers

        def body() -> None:
            a.send(b"x")
            loop.run_forever()

        return timed(body, n)


# -- instructions (--instructions) -------------------------------------------------------------

# Row -> (the driver function, the asyncio function), each run as f(make, n).
INSTRUCTION_ROWS: dict[str, tuple[Callable[[Any, int], float], Callable[[Any, int], float]]] = {
    "defer": (lambda m, n: loop_burst(m, n, None), lambda m, n: aio_burst(m, n, False)),
    "delay(0)": (lambda m, n: loop_burst(m, n, 0), lambda m, n: aio_burst(m, n, True)),
    "repeat(0)": (loop_repeat, aio_repeat),
    "I/O register+cancel": (loop_register, aio_register),
    "suspend/resume": (loop_suspend, aio_suspend),
    "round trips, 0 idle": (
        lambda m, n: loop_round_trips(m, n, 0),
        lambda m, n: aio_round_trips(m, n, 0),
    ),
}


def _columns() -> dict[str, tuple[Callable[[], Any], bool]]:
    """Column -> (its factory, whether it is an asyncio loop)."""
    columns: dict[str, tuple[Callable[[], Any], bool]] = {
        "IoPollDriver": (IoPollDriver, False),
        "pure Python": (PyIoPollDriver, False),
        "asyncio": (asyncio.new_event_loop, True),
    }
    if uvloop is not None:
        columns["uvloop"] = (uvloop.new_event_loop, True)
    return columns


def _child(row: str, column: str, n: int) -> None:
    """Run ``n`` operations of one cell (``--instructions``, in a callgrind child)."""
    make, is_asyncio = _columns()[column]
    ours, theirs = INSTRUCTION_ROWS[row]
    (theirs if is_asyncio else ours)(make, n)


def _instructions_of(row: str, column: str, n: int) -> int:
    """Instructions ``n`` operations of one cell cost, in a callgrind child."""
    return callgrind.instructions_of("bench_loop", row, column, str(n))


def count_instructions(
    short: int = 1000, long: int = 6000, table: dict[str, list[float]] | None = None
) -> str:
    """The table of instructions per operation: (long run - short run) / difference.

    ``table``, when given, receives each row's figures, in the order of ``_columns()``.
    """
    columns = list(_columns())
    jobs = {
        (row, column, n): None
        for row in INSTRUCTION_ROWS
        for column in columns
        for n in (short, long)
    }
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        futures = {key: pool.submit(_instructions_of, *key) for key in jobs}
        counts = {key: future.result() for key, future in futures.items()}
    lines = [
        "| row | " + " | ".join(columns) + " | IoPollDriver vs pure | uvloop / IoPollDriver |",
        "|---|" + "---:|" * (len(columns) + 2),
    ]
    for row in INSTRUCTION_ROWS:
        per = {
            column: (counts[row, column, long] - counts[row, column, short]) / (long - short)
            for column in columns
        }
        if table is not None:
            table[row] = [per[column] for column in columns]
        cells = [f"{per[column]:,.0f}" for column in columns]
        cells.append(f"{per['pure Python'] / per['IoPollDriver']:.2f}x fewer")
        cells.append(f"{per['uvloop'] / per['IoPollDriver']:.2f}" if "uvloop" in per else "n/a")
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -- the table -----------------------------------------------------------------------------------


def plot(
    table: dict[str, list[float]],
    columns: Sequence[str],
    directory: Path,
    title: str,
    name: str = "bench_loop",
    ylabel: str = "operations per second",
) -> Path:
    """``<name>.png`` in ``directory``: a group of bars per row, one bar per column.

    The y axis is logarithmic: the rows' rates are 10x apart.
    """
    series = {column: [cells[i] for cells in table.values()] for i, column in enumerate(columns)}
    return plotting.bars(directory, name, title, ylabel, list(table), series, log=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10x fewer operations")
    parser.add_argument("-n", type=int, default=None, help="operations per row")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs per cell")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions per operation with valgrind instead of timing",
    )
    plotting.add_argument(parser)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        row, column, count = args.child
        _child(row, column, int(count))
        return 0
    if args.instructions:
        if not callgrind.available():
            parser.error("--instructions needs valgrind on PATH (Debian: apt install valgrind)")
        header = (
            f"Python {sys.version.split()[0]}, instructions per operation (callgrind), "
            f"IoPollDriver's dispatch in {'C' if ACCELERATED else 'pure Python'}"
        )
        print(header)
        counts: dict[str, list[float]] = {}
        print(count_instructions(table=counts))
        if args.plot:
            path = plot(counts, list(_columns()), args.plot, header,
                        "bench_loop-instructions", "instructions per operation")
            print(f"plot: {path}")
        return 0
    n = args.n or (10_000 if args.quick else 100_000)
    trips = max(n // 5, 1000)

    drivers: dict[str, Callable[[], Any]] = {
        "IoPollDriver": IoPollDriver,
        "pure Python": PyIoPollDriver,
        "SelectorsDriver": SelectorsDriver,
    }
    loops: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {"asyncio": asyncio.new_event_loop}
    if uvloop is not None:
        loops["uvloop"] = uvloop.new_event_loop

    rows: list[tuple[str, Callable[[Any], float], Callable[[Any], float]]] = [
        ("defer", lambda m: loop_burst(m, n, None), lambda m: aio_burst(m, n, False)),
        ("delay(0)", lambda m: loop_burst(m, n, 0), lambda m: aio_burst(m, n, True)),
        ("repeat(0)", lambda m: loop_repeat(m, n), lambda m: aio_repeat(m, n)),
        ("I/O register+cancel", lambda m: loop_register(m, n), lambda m: aio_register(m, n)),
        ("suspend/resume", lambda m: loop_suspend(m, n), lambda m: aio_suspend(m, n)),
    ]

    def trips_row(idle: int) -> tuple[str, Callable[[Any], float], Callable[[Any], float]]:
        return (
            f"round trips, {idle} idle",
            lambda m: loop_round_trips(m, trips, idle),
            lambda m: aio_round_trips(m, trips, idle),
        )

    rows.extend(trips_row(idle) for idle in (0, 100, 1000))

    columns = [*drivers, *loops]
    header = (
        f"Python {sys.version.split()[0]}, {n:,} ops per row ({trips:,} round trips), "
        f"best of {args.repeat}, ops/s; IoPollDriver's dispatch in "
        f"{'C' if ACCELERATED else 'pure Python'}"
    )
    print(header)
    print(f"| {'row':<24} | " + " | ".join(f"{c:>15}" for c in columns) + " |")
    print(f"|{'-' * 26}|" + "|".join("-" * 17 for _ in columns) + "|")
    below_uvloop: list[str] = []
    below_3x: list[str] = []
    table: dict[str, list[float]] = {}  # row -> its cells, for --plot
    for name, ours, theirs in rows:
        # Round-robin over the columns, keeping each one's best: load bursts on a shared
        # machine then hit every column alike.
        runs = [(ours, make) for make in drivers.values()]
        runs += [(theirs, make) for make in loops.values()]
        cells = [0.0] * len(runs)
        for _ in range(max(args.repeat, 1)):
            for column, (bench, make) in enumerate(runs):
                cells[column] = max(cells[column], bench(make))
        print(f"| {name:<24} | " + " | ".join(f"{c:>15,.0f}" for c in cells) + " |", flush=True)
        table[name] = cells
        if "uvloop" in loops and cells[0] < cells[columns.index("uvloop")]:
            below_uvloop.append(f"{name} ({cells[0] / cells[columns.index('uvloop')]:.2f}x)")
        if name in ("defer", "delay(0)", "repeat(0)") and cells[0] < 3 * cells[1]:
            below_3x.append(f"{name} ({cells[0] / cells[1]:.2f}x)")
    if "uvloop" in loops:
        print(
            "Target IoPollDriver >= uvloop: "
            + (f"missed on {', '.join(below_uvloop)}" if below_uvloop else "met on every row")
        )
    print(
        "Target IoPollDriver >= 3x pure Python on defer, delay(0), repeat(0): "
        + (f"missed on {', '.join(below_3x)}" if below_3x else "met")
    )
    print("suspend/resume for asyncio/uvloop: a Future resolved by call_soon, awaited in a task")
    if args.plot:
        print(f"plot: {plot(table, columns, args.plot, header)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
