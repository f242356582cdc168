"""Handles that are not streams (SPEC 10): what timers cost a ``wait()``, and how fast a
``NotifyHandle`` wakes a thread blocked in one.

    python -m benchmarks.handles              # 20,000 round trips, 5 rounds; 2,000 wake-ups
    python -m benchmarks.handles --quick      # 3,000 round trips, 3 rounds; 200 wake-ups
    python -m benchmarks.handles --armed 0 100 --due 1 --round-trips 500 --samples 50

**Armed timers** (table 1).  The round trip of ``benchmarks.roundtrip`` (A sends 16 bytes,
wait, B reads and replies, wait, A reads: two waits) over one AF_UNIX socketpair, in a
context that also holds A one-shot timers of 3600 s, which never fire.  A wait costs O(log n)
per *due* timer and O(1) for the armed ones (it peeks at the heap), so the rate should not
move from A = 1 to A = 10,000.  It does pay once for the first armed timer: ``wait()`` then
leaves its fast path (in C when built) for the general one in Python; the A = 1 row shows that
step apart from any growth.  Each row also measures, in the same rounds, the bare
``select.epoll`` loop and iopoll ``EPOLL`` with no timer, exactly as ``benchmarks.roundtrip``'s
columns of those names do: a context with no timer must keep that speed.  In the A = 0 row the
"with timers" context is a second no-timer one, so its ratio shows the noise.

**Due timers** (table 2).  The same round trips with D periodic timers of 1 us beside one
armed timer: every wait finds all D due, reports them first, then polls the socket without
blocking.  A timer's ``data`` has a ``recv`` method that counts, so every report is dispatched
the same way (``watcher.data.recv(16)``, the call a program would make).  The baseline is the
same context without the due timers ("armed only": the general path, nothing due), so the
extra time per timer report is what a due timer costs; the no-timer column is for scale.  The
last row has 10,000 armed timers (in both columns) beside the due ones: what the heap's
log n adds.  "timer reports/wait" is what the waits actually returned.

**Notify wake-up** (table 3).  A thread records ``time.perf_counter_ns()``, then wakes the
main thread, which is blocked with nothing else to do and records the time it ran; a random
pause of 0.2-0.8 ms before each wake-up lets the waiter fall asleep.  Columns: a bare
``select.epoll`` on an ``os.eventfd`` (the floor: kernel wake-up and GIL hand-over); an iopoll
``Context`` in ``wait(None)`` on a ``NotifyHandle`` (``notify()``, then ``clear()``); and
``loop.call_soon_threadsafe(cb)`` into a loop in ``run_forever()``, measured when ``cb`` runs,
for stock asyncio, ``iopoll.aio`` and uvloop (if installed).  Percentiles in microseconds
over every sample.

Rounds are interleaved: each round runs every column of a row once, in an order rotated from
round to round, so that a slow spell of the machine hits them alike.  Rates are the median
over rounds with the half-range in percent; ratios are the median of the per-round (paired)
ratios with their range.  A timed run that would take longer than ``--budget`` seconds does
fewer round trips (at least 200); its cell is marked ``*``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import select
import socket
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence

import iopoll
import iopoll._native

from . import roundtrip

try:
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None  # type: ignore[assignment]

__all__ = ["main"]

DEFAULT_ROUND_TRIPS, QUICK_ROUND_TRIPS = 20_000, 3_000
DEFAULT_ROUNDS, QUICK_ROUNDS = 5, 3
DEFAULT_SAMPLES, QUICK_SAMPLES = 2_000, 200
DEFAULT_ARMED = (0, 1, 100, 1_000, 10_000)
DEFAULT_DUE = (1, 10, 100)
BESIDE_DUE = 10_000  # armed timers in the extra due-timer row
FOREVER = 3600.0  # an armed timer's timeout: never reached
PERIOD = 1e-6  # a due timer's period: shorter than any wait
PAUSE = (0.0002, 0.0008)  # seconds before each wake-up
BUDGET, MIN_ROUND_TRIPS = 1.0, 200

BARE, IOPOLL = roundtrip.BARE_EPOLL, roundtrip.IOPOLL_EPOLL
NO_TIMER, TIMERS = "iopoll EPOLL, no timer", "iopoll EPOLL + timers"
ARMED_ONLY = "iopoll EPOLL, armed only"
_COLUMNS = {column.title: column.setup for column in roundtrip.COLUMNS}
Drain = Callable[[int], None]
Close = Callable[[], None]
Setup = Callable[[socket.socket, socket.socket], "tuple[Drain, Close]"]
Latency = Callable[[int, random.Random], list[int]]  # n samples -> nanoseconds each


class Tick:
    """A timer watcher's ``data``: ``recv`` counts the reports, as a callback would run."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def recv(self, size: int) -> None:
        self.count += 1


def _from_roundtrip(title: str) -> Setup:
    def setup(a: socket.socket, b: socket.socket) -> tuple[Drain, Close]:
        prepared = _COLUMNS[title]([a, b])
        if isinstance(prepared, str):
            raise SystemExit(f"{title}: {prepared}")
        return prepared

    return setup


def _with_timers(armed: int, due: int, tick: Tick) -> Setup:
    """iopoll EPOLL watching both sockets, ``armed`` timers that never fire, ``due`` periodic
    timers due on every wait; dispatched as roundtrip's iopoll columns do."""

    def setup(a: socket.socket, b: socket.socket) -> tuple[Drain, Close]:
        context = iopoll.Context(iopoll.Backend.EPOLL)
        for sock in (a, b):
            context.add(sock, iopoll.Event.READ, data=sock)
        for _ in range(armed):
            context.add(iopoll.TimerHandle(FOREVER), iopoll.Event.TIMER, data=tick)
        for _ in range(due):
            context.add(iopoll.TimerHandle(PERIOD, periodic=True), iopoll.Event.TIMER, data=tick)
        wait = context.wait

        def drain(size: int) -> None:
            for watcher in wait():
                watcher.data.recv(size)

        return drain, context.close

    return setup


class Row:
    """Seconds per round trip of each column over the rounds, and the ticks per wait seen."""

    def __init__(self, label: str, columns: dict[str, Setup], tick: Tick) -> None:
        self.label, self.columns, self.tick = label, columns, tick
        self.seconds: dict[str, list[float]] = {title: [] for title in columns}
        self.shortened: set[str] = set()
        self.ticks_per_wait: list[float] = []

    def measure(self, count: int, rounds: int, budget: float) -> None:
        a, b = roundtrip.socket_pairs(1)[0]
        titles = list(self.columns)
        try:
            for round_ in range(rounds):
                shift = round_ % len(titles)
                for title in titles[shift:] + titles[:shift]:
                    drain, close = self.columns[title](a, b)
                    try:
                        warm = min(count, 500)
                        each = roundtrip.round_trips(drain, a, b, warm) / warm
                        todo = count
                        if budget and each * count > budget:
                            todo = max(min(count, MIN_ROUND_TRIPS), int(budget / each))
                            self.shortened.add(title)
                        self.tick.count = 0
                        self.seconds[title].append(roundtrip.round_trips(drain, a, b, todo) / todo)
                        if title == TIMERS:
                            self.ticks_per_wait.append(self.tick.count / (2 * todo))
                    finally:
                        close()
        finally:
            a.close()
            b.close()

    def rate(self, title: str) -> str:
        rates = [1 / s for s in self.seconds[title]]
        mid = statistics.median(rates)
        mark = "*" if title in self.shortened else ""
        return f"{mid:,.0f}/s{mark} ±{(max(rates) - min(rates)) / 2 / mid:.0%}"

    def ratio(self, title: str, baseline: str) -> str:
        ratios = [b / t for t, b in zip(self.seconds[title], self.seconds[baseline], strict=True)]
        return f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"

    def extra_us_per_report(self, baseline: str) -> str:
        """The median over rounds of the extra time per timer report, against ``baseline``."""
        pairs = zip(self.seconds[TIMERS], self.seconds[baseline], self.ticks_per_wait, strict=True)
        return f"{statistics.median((t - n) / 2 / k * 1e6 for t, n, k in pairs):.2f} us"


def armed_rows(armed: Sequence[int]) -> list[Row]:
    rows = []
    for a in armed:
        tick = Tick()
        timers = _with_timers(a, 0, tick) if a else _from_roundtrip(IOPOLL)
        columns = {BARE: _from_roundtrip(BARE), NO_TIMER: _from_roundtrip(IOPOLL), TIMERS: timers}
        rows.append(Row(f"{a:,}", columns, tick))
    return rows


def due_rows(due: Sequence[int], beside: int) -> list[Row]:
    """D due (with 1 armed) for each D, then the largest D with ``beside`` armed; the baseline
    column is the same context without the due timers: the general path, no due report."""
    rows = []
    for d, armed in [(d, 1) for d in due] + ([(max(due), beside)] if beside else []):
        tick = Tick()
        columns = {
            NO_TIMER: _from_roundtrip(IOPOLL),
            ARMED_ONLY: _with_timers(armed, 0, tick),
            TIMERS: _with_timers(armed, d, tick),
        }
        rows.append(Row(f"{d:,}" + (f" + {armed:,} armed" if armed > 1 else ""), columns, tick))
    return rows


def table(header: Sequence[str], lines: Sequence[Sequence[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(["---:"] * len(header)) + "|"]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join(out)


# -- notify wake-up latency --------------------------------------------------------------------


class Pacer:
    """A thread making ``n`` wake-ups: each after the waiter said ``ready()`` and a random
    pause; it records ``perf_counter_ns()`` just before calling ``trigger``."""

    def __init__(self, n: int, trigger: Callable[[], object], rng: random.Random) -> None:
        self.starts: list[int] = []
        self._ready = threading.Event()
        self.ready = self._ready.set
        pauses = [rng.uniform(*PAUSE) for _ in range(n)]

        def run() -> None:
            for pause in pauses:
                self._ready.wait()
                self._ready.clear()
                time.sleep(pause)
                self.starts.append(time.perf_counter_ns())
                trigger()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()


def _blocked(n: int, rng: random.Random, trigger: Callable[[], object],
             wait: Callable[[], object], clear: Callable[[], object]) -> list[int]:
    """``n`` wake-ups of this thread, blocked in ``wait()``; ``clear()`` after each."""
    pacer = Pacer(n, trigger, rng)
    ends = []
    for _ in range(n):
        pacer.ready()
        if not wait():
            raise AssertionError("a wait with no timeout returned nothing")
        ends.append(time.perf_counter_ns())
        clear()
    pacer.thread.join()
    return [end - start for start, end in zip(pacer.starts, ends, strict=True)]


def bare_eventfd(n: int, rng: random.Random) -> list[int]:
    fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    epoll = select.epoll()
    epoll.register(fd, select.EPOLLIN)
    try:
        return _blocked(n, rng, lambda: os.eventfd_write(fd, 1), lambda: epoll.poll(-1),
                        lambda: os.eventfd_read(fd))
    finally:
        epoll.close()
        os.close(fd)


def context_notify(n: int, rng: random.Random) -> list[int]:
    handle = iopoll.NotifyHandle()
    with iopoll.Context(iopoll.Backend.EPOLL) as context:
        context.add(handle, iopoll.Event.NOTIFY)
        taken = _blocked(n, rng, handle.notify, lambda: context.wait(None), handle.clear)
    handle.close()
    return taken


def call_soon_threadsafe(factory: Callable[[], asyncio.AbstractEventLoop]) -> Latency:
    def measure(n: int, rng: random.Random) -> list[int]:
        loop = factory()
        ends: list[int] = []

        def callback() -> None:
            ends.append(time.perf_counter_ns())
            if len(ends) == n:
                loop.stop()
            else:
                pacer.ready()

        pacer = Pacer(n, lambda: loop.call_soon_threadsafe(callback), rng)
        try:
            loop.call_soon(pacer.ready)
            loop.run_forever()
            pacer.thread.join()
        finally:
            loop.close()
        return [end - start for start, end in zip(pacer.starts, ends, strict=True)]

    return measure


def latency_columns() -> dict[str, Latency]:
    import iopoll.aio

    columns = {
        "epoll + eventfd (bare)": bare_eventfd,
        "iopoll Context + NotifyHandle": context_notify,
        "asyncio call_soon_threadsafe": call_soon_threadsafe(asyncio.SelectorEventLoop),
        "iopoll.aio call_soon_threadsafe": call_soon_threadsafe(iopoll.aio.new_event_loop),
    }
    if uvloop is not None:
        columns["uvloop call_soon_threadsafe"] = call_soon_threadsafe(uvloop.new_event_loop)
    return columns


def latency_table(samples: int, rounds: int, seed: int = 10) -> str:
    columns = latency_columns()
    titles = list(columns)
    pooled: dict[str, list[int]] = {title: [] for title in titles}
    medians: dict[str, list[float]] = {title: [] for title in titles}
    rng = random.Random(seed)
    for round_ in range(rounds):
        shift = round_ % len(titles)
        per_round = max(samples // rounds + (round_ < samples % rounds), 1)
        for title in titles[shift:] + titles[:shift]:
            taken = columns[title](per_round, rng)
            pooled[title] += taken
            medians[title].append(statistics.median(taken) / 1e3)
    lines = []
    for title in titles:
        cuts = statistics.quantiles(pooled[title], n=100, method="inclusive")
        mid = statistics.median(pooled[title]) / 1e3
        lines.append([
            title, f"{len(pooled[title]):,}", f"{mid:.1f}", f"{cuts[89] / 1e3:.1f}",
            f"{cuts[98] / 1e3:.1f}", f"{min(medians[title]):.1f}-{max(medians[title]):.1f}",
        ])
    header = ["wake-up", "samples", "median us", "p90 us", "p99 us", "round medians us"]
    return table(header, lines)


# -- the command ---------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.handles", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="fewer round trips, rounds, samples")
    parser.add_argument("--round-trips", type=int, help=f"default {DEFAULT_ROUND_TRIPS:,}")
    parser.add_argument("--rounds", type=int, help=f"interleaved (default {DEFAULT_ROUNDS})")
    parser.add_argument("--samples", type=int, help=f"wake-ups per column ({DEFAULT_SAMPLES:,})")
    parser.add_argument("--armed", type=int, nargs="+", default=DEFAULT_ARMED, metavar="A")
    parser.add_argument("--due", type=int, nargs="+", default=DEFAULT_DUE, metavar="D")
    parser.add_argument("--budget", type=float, default=BUDGET, help="seconds per timed run")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    count = args.round_trips or (QUICK_ROUND_TRIPS if args.quick else DEFAULT_ROUND_TRIPS)
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else DEFAULT_ROUNDS)
    samples = args.samples or (QUICK_SAMPLES if args.quick else DEFAULT_SAMPLES)
    if min(count, rounds, samples - 1) < 1 or min(args.armed) < 0 or min(args.due) < 1:
        parser.error("--round-trips, --rounds, --due must be >= 1, --samples >= 2, --armed >= 0")
    roundtrip.raise_fd_limit(4096)

    def progress(text: str) -> None:
        if not args.quiet:
            print(text, file=sys.stderr, flush=True)

    language = "C" if iopoll._native.ACCELERATED else "pure Python"
    print(
        f"Python {sys.version.split()[0]}, {sys.platform}; iopoll's fast wait() in {language}. "
        f"{count:,} round trips per timed run, {rounds} interleaved rounds: median rate "
        f"±half-range, median paired ratio (range)."
    )

    def measured(title: str, rows: list[Row], cells: Callable[[Row], list[str]]) -> list[list[str]]:
        print(f"\n{title}\n")
        for row in rows:
            row.measure(count, rounds, args.budget)
            progress(f"{title.split(':')[0]}, {row.label}: done")
        return [cells(row) for row in rows]

    armed = armed_rows(args.armed)
    lines = measured(
        "Table 1: round trips/s with A armed timers that never fire (two waits each)", armed,
        lambda row: [row.label, row.rate(BARE), row.rate(NO_TIMER), row.ratio(NO_TIMER, BARE),
                     row.rate(TIMERS), row.ratio(TIMERS, NO_TIMER)],
    )
    print(table(["A armed", BARE, NO_TIMER, "no timer / epoll", TIMERS, "timers / no timer"],
                lines))
    due = due_rows(args.due, BESIDE_DUE)
    lines = measured(
        f"Table 2: round trips/s with D periodic timers of {PERIOD * 1e6:g} us, due each wait",
        due,
        lambda row: [row.label, row.rate(NO_TIMER), row.rate(ARMED_ONLY), row.rate(TIMERS),
                     row.ratio(TIMERS, ARMED_ONLY), f"{statistics.median(row.ticks_per_wait):.2f}",
                     row.extra_us_per_report(ARMED_ONLY)],
    )
    print(table(["D due", NO_TIMER, ARMED_ONLY, TIMERS, "timers / armed only",
                 "timer reports/wait", "extra per report"], lines))
    if any(row.shortened for row in [*armed, *due]):
        print()
        print(f"\\* fewer round trips (>= {MIN_ROUND_TRIPS}) to fit {args.budget:g} s per run.")
    print()
    print(
        f"Table 3: notify wake-up latency, thread to a blocked waiter ({samples:,} samples per "
        f"column over {rounds} rounds, {PAUSE[0] * 1e3:g}-{PAUSE[1] * 1e3:g} ms apart)"
    )
    print()
    print(latency_table(samples, rounds))
    progress("latency done")
    if uvloop is None:
        print("(uvloop is not installed: no uvloop column)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
