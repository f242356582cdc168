"""``python -m benchmarks.soak [context|loop|aio|all] [options]``: run soak targets, print
progress every few seconds (stderr) and one summary line per target (stdout); exit status
1 on any violation, or when open fds or traced memory did not come back to the baseline.

    python -m benchmarks.soak                                  # context, every impl/backend
    python -m benchmarks.soak context --impl pure --backend EPOLL --seconds 30
    python -m benchmarks.soak context --impl iopoll --backend EPOLL --seed 4 --steps 278
    python -m benchmarks.soak loop --driver selectors --connections 2000
    python -m benchmarks.soak aio --backend AUTO
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys
from collections.abc import Callable, Sequence

from .aio import aio_targets
from .common import FD_TOLERANCE, MEMORY_TOLERANCE, Outcome
from .context import IMPLS, WARMUP_STEPS, context_targets, run_context_target
from .loops import loop_targets
from .traffic import WARMUP_CONNECTIONS, TrafficTarget, run_traffic_target

__all__ = ["main"]

DEFAULT_SECONDS = 20.0
DEFAULT_CONNECTIONS = 300
TARGETS = ("context", "loop", "aio", "all")


def parser() -> argparse.ArgumentParser:
    """The command line's options."""
    arguments = argparse.ArgumentParser(
        prog="python -m benchmarks.soak",
        description="Soak iopoll's Context, iopoll.loop and iopoll.aio over real streams.",
    )
    arguments.add_argument(
        "target", nargs="?", default="context", choices=TARGETS, help="what to soak (context)"
    )
    arguments.add_argument(
        "--seconds",
        type=float,
        help=f"per target (default {DEFAULT_SECONDS:g}; with --steps: no time limit)",
    )
    arguments.add_argument("--seed", type=int, help="random seed (default: a fresh one)")
    arguments.add_argument(
        "--steps",
        type=int,
        help="context: stop after this many steps (replays a violation); loop/aio: after "
        "this many connections",
    )
    arguments.add_argument("--backend", default="all", help="EPOLL, POLL, SELECT, ... or all")
    arguments.add_argument(
        "--impl",
        default="all",
        choices=(*IMPLS, "all"),
        help="context: iopoll (C wait), pure (pure-Python wait), polyfill (select); or all",
    )
    arguments.add_argument(
        "--driver",
        default="all",
        choices=("iopoll", "selectors", "all"),
        help="loop: IoPollDriver (each backend), SelectorsDriver, or all",
    )
    arguments.add_argument(
        "--connections",
        type=int,
        default=DEFAULT_CONNECTIONS,
        help=f"loop/aio: connections open at once (default {DEFAULT_CONNECTIONS}; 400 at "
        "most on SELECT)",
    )
    arguments.add_argument(
        "--skip",
        default="",
        help="context: operations never chosen, comma-separated (e.g. rotate,wait_k), to "
        "soak past a known bug",
    )
    arguments.add_argument(
        "--warmup",
        type=int,
        help=f"warm-up before the baseline: context steps (default {WARMUP_STEPS}), "
        "loop/aio connections (default 40)",
    )
    arguments.add_argument(
        "--progress", type=float, default=5.0, help="seconds between progress lines (0: none)"
    )
    return arguments


def plan_runs(args: argparse.Namespace) -> list[Callable[[], Outcome]]:
    """A call that runs it, for every target the arguments select."""
    seconds: float = args.seconds
    seed: int = args.seed
    progress: float = args.progress
    runs: list[Callable[[], Outcome]] = []
    if args.target in ("context", "all"):
        skip = frozenset(filter(None, args.skip.split(",")))
        warmup = WARMUP_STEPS if args.warmup is None else args.warmup
        runs += [
            functools.partial(
                run_context_target,
                target,
                seconds=seconds,
                seed=seed,
                steps=args.steps,
                progress=progress,
                warmup=warmup,
                skip=skip,
            )
            for target in context_targets(args.impl, args.backend)
        ]
    traffic_targets: list[TrafficTarget] = []
    if args.target in ("loop", "all"):
        traffic_targets += loop_targets(args.driver, args.backend)
    if args.target in ("aio", "all"):
        traffic_targets += aio_targets(args.backend)
    runs += [
        functools.partial(
            run_traffic_target,
            target,
            seconds=seconds,
            seed=seed,
            connections=args.connections,
            total=args.steps,
            progress=progress,
            warmup=WARMUP_CONNECTIONS if args.warmup is None else args.warmup,
        )
        for target in traffic_targets
    ]
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    """Run the selected targets; the exit status (1: a violation or a leak)."""
    args = parser().parse_args(argv)
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(3), "big")
    if args.seconds is None:
        args.seconds = math.inf if args.steps is not None else DEFAULT_SECONDS
    if args.seconds <= 0 or (args.steps is not None and args.steps < 1) or args.connections < 1:
        parser().error("--seconds, --steps and --connections must be positive")
    runs = plan_runs(args)
    if not runs:
        parser().error(f"no target matches --backend {args.backend}")
    failed = False
    for run in runs:
        outcome = run()
        print(outcome.summary(), flush=True)
        if not outcome.ok:
            print(outcome.report(), file=sys.stderr, flush=True)
            failed = True
        elif not outcome.resources_ok():
            print(
                f"{outcome.target}: fds {outcome.fd_delta:+d} (tolerance {FD_TOLERANCE}), "
                f"memory {outcome.memory_delta:+,} bytes (tolerance {MEMORY_TOLERANCE:,})",
                file=sys.stderr,
                flush=True,
            )
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
