"""Round trips per second over an AF_UNIX socketpair, with N idle watched sockets alongside.

One round trip: side A sends a small message; the waiting layer reports B readable; B reads
and replies; the layer reports A readable; A reads.  Every column is the loop a program would
write on that layer: wait, then dispatch each report to the socket it names and read from it
(a dict from fd to socket for the bare loops, ``key.fileobj`` for selectors, ``watcher.data``
for iopoll).  The reads are non-blocking, so a layer that reported a socket that is not
readable would fail loudly with ``BlockingIOError``; only the waiting layer differs.  The
columns are measured in the same run, interleaved per repeat so that machine noise hits them
alike; each cell is the best of the repeats, with its ratio to the bare ``select.epoll`` loop.

    python -m benchmarks.roundtrip              # 5,000 round trips, best of 9, N = 0 to 10,000
    python -m benchmarks.roundtrip --quick      # a few thousand, N = 0 and 100
    python benchmarks/roundtrip.py --n 0 1000 --repeats 5
    python -m benchmarks.roundtrip --instructions --n 0 100   # callgrind: instructions instead
    python -m benchmarks.roundtrip --quick --plot plots   # also plots/roundtrip.png

Wall-clock rates on a shared machine drift; ``--instructions`` counts, with valgrind's
callgrind, the instructions one round trip costs in user space for each column (two runs of
different lengths, subtracted, so that start-up cancels out): the same figure on every run.
The kernel's share of a round trip (three system calls a side) is not in it.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import iopoll_polyfill.fallback as polyfill

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import callgrind, plotting
from benchmarks.roundtrip_columns import (
    BARE_EPOLL,
    BARE_POLL,
    BARE_SELECT,
    COLUMNS,
    EPOLL_PYTHON_FLOOR,
    EPOLL_SELECTOR,
    IOPOLL_EPOLL,
    IOPOLL_POLL,
    POLYFILL,
    SELECT_FIONREAD,
    SELECT_PYTHON_FLOOR,
    Column,
    Drain,
)

try:
    import resource
except ImportError:  # Windows
    resource = None  # type: ignore[assignment]

__all__ = [
    "COLUMNS",
    "Column",
    "Results",
    "floor_notes",
    "format_table",
    "main",
    "plot",
    "run",
    "targets",
]

MESSAGE = b"x" * 16
# Many short runs rather than a few long ones: a VM's speed drifts by 10% and more over
# seconds, and each column's best run is the one that met the quietest moment.
DEFAULT_ROUND_TRIPS = 5_000
DEFAULT_REPEATS = 9
DEFAULT_NS = (0, 100, 1000, 10_000)
QUICK_ROUND_TRIPS = 3_000
QUICK_NS = (0, 100)
WARM_UP = 500
# Seconds one timed run may take: O(N) columns at N=10,000 run ~300 round trips/s.
DEFAULT_BUDGET = 0.5
MIN_ROUND_TRIPS = 200
FD_SETSIZE = polyfill.FD_SETSIZE
# fds the process holds besides the benchmark's sockets (stdio, the poller, imports).
FD_HEADROOM = 64


def round_trips(drain: Drain, a: socket.socket, b: socket.socket, count: int) -> float:
    """Seconds that ``count`` round trips between ``a`` and ``b`` take through ``drain``."""
    a_send, b_send = a.send, b.send
    message = MESSAGE
    size = len(message)
    start = time.perf_counter()
    for _ in range(count):
        a_send(message)
        drain(size)  # B reads
        b_send(message)
        drain(size)  # A reads
    return time.perf_counter() - start


def raise_fd_limit(needed: int) -> bool:
    """Raise the soft ``RLIMIT_NOFILE`` to ``needed``, and the hard one too where the process
    may (root, up to the kernel's ``fs.nr_open``); False if it cannot."""
    if resource is None:
        return True
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return True
    if hard != resource.RLIM_INFINITY and hard < needed:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (needed, needed))
        except (ValueError, OSError):  # not privileged, or above fs.nr_open
            return False
        return True
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    return True


def socket_pairs(count: int) -> list[tuple[socket.socket, socket.socket]]:
    """``count`` non-blocking AF_UNIX socketpairs."""
    pairs = []
    for _ in range(count):
        left, right = socket.socketpair()
        left.setblocking(False)
        right.setblocking(False)
        pairs.append((left, right))
    return pairs


@dataclass
class Results:
    """Best seconds per round trip for each (N, column title), or why a cell is n/a."""

    round_trips: int
    ns: list[int]
    columns: list[str]
    cells: dict[tuple[int, str], float | str] = field(default_factory=dict)
    # Cells that ran fewer round trips to stay within the time budget.
    shortened: set[tuple[int, str]] = field(default_factory=set)

    def rate(self, n: int, title: str) -> float | None:
        """Round trips per second, or None for an n/a cell."""
        cell = self.cells.get((n, title))
        return 1 / cell if isinstance(cell, float) else None

    def ratio(self, n: int, title: str, baseline: str = BARE_EPOLL) -> float | None:
        """``title``'s rate over ``baseline``'s at ``n``, or None if either is n/a."""
        mine, theirs = self.rate(n, title), self.rate(n, baseline)
        return None if mine is None or theirs is None else mine / theirs


def run(
    count: int = DEFAULT_ROUND_TRIPS,
    repeats: int = DEFAULT_REPEATS,
    ns: Sequence[int] = DEFAULT_NS,
    columns: Sequence[Column] = COLUMNS,
    progress: Callable[[str], None] | None = None,
    budget: float = DEFAULT_BUDGET,
) -> Results:
    """Measure every column at every N; the best of ``repeats`` interleaved runs.

    A run that would take longer than ``budget`` seconds (poll and select with thousands of
    idle fds) does fewer round trips, at least ``MIN_ROUND_TRIPS``; 0 means no budget.
    """
    results = Results(count, list(ns), [column.title for column in columns])
    warm_up = min(count, WARM_UP)
    for n in ns:
        if not raise_fd_limit(n + 2 + FD_HEADROOM):
            for column in columns:
                results.cells[n, column.title] = "n/a (RLIMIT_NOFILE)"
            continue
        (a, b), *idle_pairs = socket_pairs(1 + (n + 1) // 2)
        idle = [sock for pair in idle_pairs for sock in pair][:n]
        watched = [a, b, *idle]
        try:
            best: dict[str, float | str] = {}
            for repeat in range(repeats):
                # Rotate the order so that no column always runs first (or last).
                shift = repeat % len(columns)
                for column in [*columns[shift:], *columns[:shift]]:
                    if isinstance(best.get(column.title), str):
                        continue
                    prepared = column.setup(watched)
                    if isinstance(prepared, str):
                        best[column.title] = prepared
                        continue
                    drain, close = prepared
                    try:
                        each = round_trips(drain, a, b, warm_up) / warm_up
                        todo = count
                        if budget and each * count > budget:
                            todo = max(min(count, MIN_ROUND_TRIPS), int(budget / each))
                            results.shortened.add((n, column.title))
                        each = round_trips(drain, a, b, todo) / todo
                    finally:
                        close()
                    previous = best.get(column.title)
                    if not isinstance(previous, float) or each < previous:
                        best[column.title] = each
                if progress is not None:
                    progress(f"N={n}: repeat {repeat + 1}/{repeats} done")
            for title, cell in best.items():
                results.cells[n, title] = cell
        finally:
            for sock in watched:
                sock.close()
            for pair in idle_pairs:
                for sock in pair:
                    sock.close()
    return results


def _format_cell(results: Results, n: int, title: str) -> str:
    cell = results.cells.get((n, title), "n/a")
    if isinstance(cell, str):
        return cell
    ratio = results.ratio(n, title)
    mark = "*" if (n, title) in results.shortened else ""
    return f"{1 / cell:,.0f}/s{mark}" + ("" if ratio is None else f" ({ratio:.2f}x)")


def format_table(results: Results) -> str:
    """A markdown table: one row per N, one column per waiting layer."""
    header = ["N idle", *results.columns]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---:"] * len(header)) + "|",
    ]
    for n in results.ns:
        row = [f"{n:,}", *(_format_cell(results, n, title) for title in results.columns)]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _worst(
    results: Results, title: str, baseline: str, ns: Sequence[int]
) -> tuple[float, int] | None:
    ratios = [(r, n) for n in ns if (r := results.ratio(n, title, baseline)) is not None]
    return min(ratios) if ratios else None


def targets(results: Results, c_wait: bool | None = None) -> list[tuple[bool | None, str]]:
    """The project's performance targets: (met, or None when not measured; description).

    ``c_wait`` says whether iopoll's wait() ran in C (default: whether it does here); the
    pure-Python wait has its own target.
    """
    if c_wait is None:
        c_wait = _wait_language() == "C"
    checks: list[tuple[bool | None, str]] = []

    def against(title: str, baseline: str, floor: float, ns: Sequence[int], what: str) -> None:
        worst = _worst(results, title, baseline, ns)
        if worst is None:
            checks.append((None, f"{what}: not measured"))
        else:
            ratio, n = worst
            checks.append((ratio >= floor, f"{what}: worst {ratio:.2f}x at N={n:,}"))

    if c_wait:
        against(IOPOLL_EPOLL, BARE_EPOLL, 1.05, results.ns, "iopoll EPOLL >= 1.05x bare epoll")
        against(IOPOLL_EPOLL, EPOLL_SELECTOR, 1.15, results.ns, "iopoll EPOLL >= 1.15x selectors")
        against(IOPOLL_POLL, BARE_POLL, 1.0, results.ns, "iopoll POLL >= 1.0x bare poll")
    else:  # IOPOLL_PURE_PYTHON=1, or no compiler: the pure-Python wait
        against(IOPOLL_EPOLL, EPOLL_SELECTOR, 1.0, results.ns, "iopoll EPOLL >= 1.0x selectors")
    flat_what = "flat: iopoll EPOLL at N=10,000 within 10% of its N=0"
    low, high = results.rate(0, IOPOLL_EPOLL), results.rate(10_000, IOPOLL_EPOLL)
    if low is None or high is None:
        checks.append((None, f"{flat_what}: not measured"))
    else:
        change = high / low - 1
        checks.append((change >= -0.10, f"{flat_what}: {change:+.1%}"))
    small = [n for n in (0, 100) if n in results.ns]
    against(POLYFILL, SELECT_FIONREAD, 0.90, small, "polyfill >= 0.90x its floor, N=0 and 100")
    return checks


def floor_notes(results: Results) -> list[str]:
    """What the floor columns say, to read the 0.90x targets against."""
    notes = []
    small = [n for n in (0, 100) if n in results.ns]
    # (floor column, what it is, its baseline, as named; the column read against it, as
    # named; the Ns that count)
    floors = [
        (EPOLL_PYTHON_FLOOR, "the least a pure-Python Context does per wait",
         BARE_EPOLL, "bare epoll", IOPOLL_EPOLL, "iopoll EPOLL", results.ns),
        (SELECT_FIONREAD, "no library, just the ioctl SPEC 7's hang-up rule needs",
         BARE_SELECT, "bare select", POLYFILL, "the polyfill", small),
        (SELECT_PYTHON_FLOOR, "the least a pure-Python polyfill does per wait",
         SELECT_FIONREAD, SELECT_FIONREAD, POLYFILL, "the polyfill", small),
    ]  # fmt: skip
    for title, what, baseline, baseline_name, column, column_name, ns in floors:
        floor = _worst(results, title, baseline, ns)
        ours = _worst(results, column, title, ns)
        if floor is not None and ours is not None:
            notes.append(
                f"floor: {title} ({what}) is {floor[0]:.2f}x {baseline_name} at "
                f"N={floor[1]:,}; {column_name} is {ours[0]:.2f}x that floor at N={ours[1]:,}"
            )
    return notes


def format_targets(results: Results) -> str:
    """One line per target: PASS, FAIL or SKIP, with the figure behind it."""
    words = {True: "PASS", False: "FAIL", None: "SKIP"}
    return "\n".join(f"target {words[met]}: {text}" for met, text in targets(results))


def _child(title: str, n: int, count: int) -> None:
    """Run ``count`` round trips of one column with ``n`` idle sockets (``--instructions``)."""
    (column,) = [column for column in COLUMNS if column.title == title]
    (a, b), *idle_pairs = socket_pairs(1 + (n + 1) // 2)
    prepared = column.setup([a, b, *[sock for pair in idle_pairs for sock in pair][:n]])
    if isinstance(prepared, str):
        raise SystemExit(prepared)
    round_trips(prepared[0], a, b, count)


def _instructions_of(title: str, n: int, count: int) -> int:
    """Instructions ``count`` round trips of one column cost, in a callgrind child."""
    return callgrind.instructions_of("roundtrip", title, str(n), str(count), timeout=600)


def _refusals(n: int) -> dict[str, str]:
    """The columns whose own setup refuses ``n`` idle sockets here (``n/a (FD_SETSIZE)``),
    asked in this process so that no child runs under valgrind for nothing."""
    raise_fd_limit(n + 2 + FD_HEADROOM)
    (a, b), *idle_pairs = socket_pairs(1 + (n + 1) // 2)
    sockets = [a, b, *[sock for pair in idle_pairs for sock in pair]]
    refused = {}
    try:
        for column in COLUMNS:
            prepared = column.setup(sockets[: n + 2])
            if isinstance(prepared, str):
                refused[column.title] = prepared
            else:
                prepared[1]()
    finally:
        for sock in sockets:
            sock.close()
    return refused


def count_instructions(
    ns: Sequence[int], count: int, figures: dict[tuple[int, str], float] | None = None
) -> str:
    """The table of instructions per round trip: (long run - short run) / difference.

    ``figures``, when given, receives each measured one under (N, column title).
    """
    short = 200
    header = ["N idle", *(column.title for column in COLUMNS)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    for n in ns:
        cells = [f"{n:,}"]
        base = None
        refusals = _refusals(n)
        for column in COLUMNS:
            if column.title in refusals:
                cells.append(refusals[column.title])
                continue
            per = (
                _instructions_of(column.title, n, short + count)
                - _instructions_of(column.title, n, short)
            ) / count
            base = per if column.title == BARE_EPOLL else base
            if figures is not None:
                figures[n, column.title] = per
            ratio = "" if base is None else f" ({per / base:.2f}x)"
            cells.append(f"{per:,.0f}{ratio}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: Results, directory: Path, title: str) -> Path:
    """``roundtrip.png`` in ``directory``: round trips/s against N idle, a line per column."""
    rates = {column: [results.rate(n, column) for n in results.ns] for column in results.columns}
    return plotting.lines(
        directory, "roundtrip", title, "N idle sockets", "round trips per second", results.ns, rates
    )


def _wait_language() -> str:
    import iopoll._native

    return "C" if iopoll._native.ACCELERATED else "pure Python"


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.roundtrip", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--round-trips", type=int, help=f"default {DEFAULT_ROUND_TRIPS:,}")
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, help="best of these")
    parser.add_argument(
        "--n", type=int, nargs="+", metavar="N", help="idle sockets (default: 0 100 1000 10000)"
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_ROUND_TRIPS:,} round trips, N = 0 and 100"
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=DEFAULT_BUDGET,
        help=f"seconds per timed run before it is shortened (default {DEFAULT_BUDGET}; 0: none)",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions per round trip with valgrind instead (default N = 0 100)",
    )
    plotting.add_argument(parser)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child[0], int(args.child[1]), int(args.child[2]))
        return 0
    if args.instructions:
        if not callgrind.available():
            parser.error("--instructions needs valgrind on PATH (Debian: apt install valgrind)")
        count = args.round_trips or 2_000
        ns = args.n if args.n is not None else QUICK_NS
        header = (
            f"Instructions per round trip in user space (callgrind; {count:,} round trips, "
            f"ratio to the bare select.epoll loop). Python {sys.version.split()[0]}, "
            f"{sys.platform}; iopoll's wait() in {_wait_language()}."
        )
        print(header)
        print()
        figures: dict[tuple[int, str], float] = {}
        print(count_instructions(ns, count, figures))
        if args.plot:
            series = {c.title: [figures.get((n, c.title)) for n in ns] for c in COLUMNS}
            groups = [f"N={n:,}" for n in ns]
            path = plotting.bars(args.plot, "roundtrip-instructions", header,
                                 "instructions per round trip", groups, series)
            print(f"plot: {path}")
        return 0

    count = args.round_trips
    if count is None:
        count = QUICK_ROUND_TRIPS if args.quick else DEFAULT_ROUND_TRIPS
    ns = args.n if args.n is not None else (QUICK_NS if args.quick else DEFAULT_NS)
    if count < 1 or args.repeats < 1 or any(n < 0 for n in ns) or args.budget < 0:
        parser.error("--round-trips and --repeats must be >= 1, --budget and every --n >= 0")

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    results = run(
        count, args.repeats, ns, progress=None if args.quiet else progress, budget=args.budget
    )
    header = (
        f"Round trips per second over an AF_UNIX socketpair ({count:,} round trips, best of "
        f"{args.repeats}; ratio to the bare select.epoll loop). Python {sys.version.split()[0]}, "
        f"{sys.platform}; iopoll's wait() in {_wait_language()}."
    )
    print(header)
    print()
    print(format_table(results))
    if results.shortened:
        print()
        print(f"\\* fewer round trips (>= {MIN_ROUND_TRIPS}) to fit {args.budget:g} s per run.")
    print()
    print(format_targets(results))
    for line in floor_notes(results):
        print(line)
    if args.plot:
        print(f"plot: {plot(results, args.plot, header)}")
    missed = any(met is False for met, _ in targets(results))
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
