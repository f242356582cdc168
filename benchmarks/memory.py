"""Memory per watcher: what iopoll allocates to watch 10,000 sockets, per watcher.

The sockets (5,000 AF_UNIX socketpairs) exist before the first ``tracemalloc`` snapshot, so
the difference between the snapshots is iopoll's alone: the context, its watchers, their
handles and the backend's own tables (``select.poll`` keeps a dict; epoll's interest list
lives in the kernel, which tracemalloc cannot see).

    python -m benchmarks.memory              # 10,000 watchers, EPOLL and POLL
    python benchmarks/memory.py --watchers 2000
    python -m benchmarks.memory --plot plots   # also plots/memory.png
"""

from __future__ import annotations

import argparse
import gc
import os
import socket
import sys
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import iopoll
from benchmarks import plotting
from benchmarks.roundtrip import FD_HEADROOM, raise_fd_limit

__all__ = ["TARGET_BYTES", "bytes_per_watcher", "main", "plot"]

DEFAULT_WATCHERS = 10_000
TARGET_BYTES = 1024
BACKENDS = ("EPOLL", "POLL")


def bytes_per_watcher(backend: iopoll.Backend, sockets: Sequence[socket.socket]) -> float:
    """Bytes iopoll allocates per watcher when ``sockets`` are added to one context."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        context = iopoll.Context(backend)
        for sock in sockets:
            context.add(sock, iopoll.Event.READ)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    # The snapshots' own Python objects are tracemalloc's, not iopoll's.
    own = [tracemalloc.Filter(False, tracemalloc.__file__)]
    before, after = before.filter_traces(own), after.filter_traces(own)
    try:
        grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    finally:
        context.close()
    return grown / len(sockets)


def plot(rows: Sequence[tuple[str, float | None]], directory: Path, title: str) -> Path:
    """``memory.png`` in ``directory``: a bar of bytes per watcher for each backend."""
    sizes = {"bytes per watcher": [size for _, size in rows]}
    return plotting.bars(
        directory, "memory", title, "bytes per watcher", [name for name, _ in rows], sizes
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.memory", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--watchers", type=int, default=DEFAULT_WATCHERS, help=f"default {DEFAULT_WATCHERS:,}"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when the target is missed")
    plotting.add_argument(parser)
    args = parser.parse_args(argv)
    if args.watchers < 2 or args.watchers % 2:
        parser.error("--watchers must be an even number >= 2 (they come from socketpairs)")
    if not raise_fd_limit(args.watchers + FD_HEADROOM):
        print(f"RLIMIT_NOFILE's hard limit is below {args.watchers + FD_HEADROOM}: cannot run")
        return 1

    sockets = [sock for _ in range(args.watchers // 2) for sock in socket.socketpair()]
    rows: list[tuple[str, float | None]] = []
    try:
        for name in BACKENDS:
            backend = iopoll.Backend[name]
            if not backend.is_available():
                rows.append((name, None))
                continue
            rows.append((name, bytes_per_watcher(backend, sockets)))
    finally:
        for sock in sockets:
            sock.close()

    header = (
        f"Memory per watcher with {args.watchers:,} watchers (tracemalloc; target "
        f"<= {TARGET_BYTES:,} bytes). Python {sys.version.split()[0]}, {sys.platform}."
    )
    print(header)
    print()
    print("| backend | bytes per watcher | target |")
    print("|---|---:|---|")
    missed = False
    for name, size in rows:
        if size is None:
            print(f"| {name} | n/a (unavailable) | |")
            continue
        met = size <= TARGET_BYTES
        missed = missed or not met
        print(f"| {name} | {size:,.0f} | {'PASS' if met else 'FAIL'} |")
    if args.plot:
        print(f"plot: {plot(rows, args.plot, header)}")
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
