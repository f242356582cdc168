"""Registration churn: what watching, re-watching and unwatching one socket costs.

``roundtrip`` times the wait; a server that accepts and closes connections pays an add and
a remove per connection, and one that waits for room to send switches a socket between
READ and WRITE with ``modify()``.  Each column does the same to one socket of an AF_UNIX
pair: add + remove (``register``/``unregister``), and ``modify()`` to WRITE and back
(reported per modify).  The columns run interleaved, round by round, and each cell is its
best round, in microseconds per operation.

    python -m benchmarks.churn                    # 20,000 operations, best of 5 rounds
    python benchmarks/churn.py --ops 2000 --repeats 3
    python -m benchmarks.churn --plot plots       # also plots/churn.png
"""

from __future__ import annotations

import argparse
import os
import select
import selectors
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import iopoll
import iopoll_polyfill.fallback
from benchmarks import plotting

__all__ = ["COLUMNS", "Column", "main", "measure"]

Step = Callable[[], None]
Steps = tuple[Step, Step, Step]  # add + remove; two modifies; close


@dataclass(frozen=True)
class Column:
    """One implementation: ``make(sock)`` gives its add + remove step, its modify step (two
    modifies), and what closes it."""

    title: str
    make: Callable[[socket.socket], Steps]
    available: bool = True


# Each column keeps two of its objects: one that the add + remove step leaves empty, and
# one that watches the socket from the start, for the modify step.


def _bare(name: str, read_bit: str, write_bit: str) -> Callable[[socket.socket], Steps]:
    """A column on ``select.epoll`` or ``select.poll`` itself (its READ and WRITE bits named)."""

    def steps(sock: socket.socket) -> Steps:
        make = getattr(select, name)
        read, write = getattr(select, read_bit), getattr(select, write_bit)
        churned, modified = make(), make()
        fd = sock.fileno()
        register, unregister, modify = churned.register, churned.unregister, modified.modify
        modified.register(fd, read)

        def add_remove() -> None:
            register(fd, read)
            unregister(fd)

        def modify_twice() -> None:
            modify(fd, write)
            modify(fd, read)

        def close() -> None:
            for made in (churned, modified):
                if hasattr(made, "close"):  # select.poll objects have nothing to close
                    made.close()

        return add_remove, modify_twice, close

    return steps


def _selector(name: str) -> Callable[[socket.socket], Steps]:
    def make(sock: socket.socket) -> Steps:
        kind: type[selectors.BaseSelector] = getattr(selectors, name)
        churned, modified = kind(), kind()
        modified.register(sock, selectors.EVENT_READ)

        def add_remove() -> None:
            churned.register(sock, selectors.EVENT_READ)
            churned.unregister(sock)

        def modify_twice() -> None:
            modified.modify(sock, selectors.EVENT_WRITE)
            modified.modify(sock, selectors.EVENT_READ)

        def close() -> None:
            churned.close()
            modified.close()

        return add_remove, modify_twice, close

    return make


def _context(api: Any, backend: str | None) -> Callable[[socket.socket], Steps]:
    def make(sock: socket.socket) -> Steps:
        churned, modified = (
            api.Context(api.Backend[backend]) if backend else api.Context() for _ in range(2)
        )
        read, write = api.Event.READ, api.Event.WRITE
        watcher = modified.add(sock, read)

        def add_remove() -> None:
            churned.add(sock, read).remove()

        def modify_twice() -> None:
            watcher.modify(write)
            watcher.modify(read)

        def close() -> None:
            churned.close()
            modified.close()

        return add_remove, modify_twice, close

    return make


def _has(name: str) -> bool:
    return bool(iopoll.Backend[name].is_available())


COLUMNS: tuple[Column, ...] = (
    Column("select.epoll (bare)", _bare("epoll", "EPOLLIN", "EPOLLOUT"), hasattr(select, "epoll")),
    Column("selectors EpollSelector", _selector("EpollSelector"), hasattr(select, "epoll")),
    Column("iopoll EPOLL", _context(iopoll, "EPOLL"), _has("EPOLL")),
    Column("select.poll (bare)", _bare("poll", "POLLIN", "POLLOUT"), hasattr(select, "poll")),
    Column("selectors PollSelector", _selector("PollSelector"), hasattr(select, "poll")),
    Column("iopoll POLL", _context(iopoll, "POLL"), _has("POLL")),
    Column("iopoll_polyfill (SELECT)", _context(iopoll_polyfill.fallback, None)),
)


def _timed(step: Step, ops: int) -> float:
    started = time.perf_counter()
    for _ in range(ops):
        step()
    return time.perf_counter() - started


def measure(columns: Sequence[Column], ops: int, repeats: int) -> dict[str, tuple[float, float]]:
    """Best microseconds per add+remove and per modify, by column title."""
    left, right = socket.socketpair()
    try:
        steps: dict[str, tuple[Step, Step]] = {}
        closers: list[Step] = []
        for column in columns:
            add_remove, modify_twice, close = column.make(left)
            steps[column.title] = (add_remove, modify_twice)
            closers.append(close)
        best = {title: [float("inf"), float("inf")] for title in steps}
        for _ in range(repeats):
            for title, (add_remove, modify_twice) in steps.items():  # interleaved
                best[title][0] = min(best[title][0], _timed(add_remove, ops) / ops * 1e6)
                best[title][1] = min(best[title][1], _timed(modify_twice, ops) / ops / 2 * 1e6)
        for close in closers:
            close()
    finally:
        left.close()
        right.close()
    return {title: (pair[0], pair[1]) for title, pair in best.items()}


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.churn", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--ops", type=int, default=20_000, help="operations per round (20,000)")
    parser.add_argument("--repeats", type=int, default=5, help="rounds; the best counts (5)")
    plotting.add_argument(parser)
    args = parser.parse_args(argv)
    if args.ops < 1 or args.repeats < 1:
        parser.error("--ops and --repeats must be at least 1")
    columns = [column for column in COLUMNS if column.available]
    results = measure(columns, args.ops, args.repeats)
    accelerated = "with" if iopoll._native.ACCELERATED else "without"
    header = (
        f"Registration churn, us per operation (best of {args.repeats} rounds of "
        f"{args.ops:,}). Python {sys.version.split()[0]}, {sys.platform}, iopoll {accelerated} C."
    )
    print(header)
    print()
    print("| column | add + remove | modify |")
    print("|---|---:|---:|")
    for title, (add_remove, modify) in results.items():
        print(f"| {title} | {add_remove:.2f} | {modify:.2f} |")
    if args.plot is not None:
        titles = list(results)
        series = {
            "add + remove": [results[t][0] for t in titles],
            "modify": [results[t][1] for t in titles],
        }
        path = plotting.bars(Path(args.plot), "churn", header, "us per operation", titles, series)
        print(f"plot: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
