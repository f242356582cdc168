"""What every soak target shares: violations, the log of recent operations, the resource
baseline (open fds, traced memory), progress lines and the one summary line per target."""

from __future__ import annotations

import gc
import os
import sys
import time
import tracemalloc
from collections import deque
from dataclasses import dataclass, field
from typing import TextIO

__all__ = [
    "FD_TOLERANCE",
    "LOG_LENGTH",
    "MEMORY_TOLERANCE",
    "OpLog",
    "Outcome",
    "Progress",
    "Resources",
    "Violation",
    "open_fds",
]

# Operations kept for a violation's report.
LOG_LENGTH = 20
# After a target, its open fds and traced memory must be back at the baseline within these.
FD_TOLERANCE = 0
MEMORY_TOLERANCE = 256 * 1024


class Violation(Exception):
    """A broken rule: of the contract (``model_bug=False``) or of the model's own
    consistency with the kernel (``model_bug=True``: a bug of the soak, not of iopoll)."""

    def __init__(self, message: str, *, model_bug: bool = False) -> None:
        super().__init__(message)
        self.model_bug = model_bug


class OpLog:
    """The last ``LOG_LENGTH`` operations, each with its step number."""

    def __init__(self, length: int = LOG_LENGTH) -> None:
        self.entries: deque[str] = deque(maxlen=length)
        self.step = 0

    def add(self, text: str) -> None:
        """Record what the current step does."""
        self.entries.append(f"{self.step:>8}  {text}")

    def dump(self) -> str:
        """The recorded operations, oldest first, one a line."""
        return "\n".join(self.entries)


def open_fds() -> int:
    """How many fds this process has open (``/proc/self/fd``, the listing's own excluded)."""
    return len(os.listdir("/proc/self/fd")) - 1


# Allocations the memory check leaves out: tracemalloc's own, and the storage of the
# standard library's WeakSets, which keeps the size of its peak (asyncio's set of all tasks
# grows to the most tasks ever alive at once; its table never shrinks).  A leaked object
# still counts, where it was allocated.
_NOT_COUNTED = (
    tracemalloc.Filter(False, tracemalloc.__file__),
    tracemalloc.Filter(False, "*/_weakrefset.py"),
)


@dataclass
class Resources:
    """Open fds and traced memory at a baseline, and how far a run moved them.

    ``start()`` turns ``tracemalloc`` on (if it is off): it must trace the whole run, warm-up
    included, so that memory cached on first use is part of the baseline.
    """

    fds: int = 0
    baseline: tracemalloc.Snapshot | None = None
    started_tracing: bool = False

    def start(self) -> None:
        """Begin tracing memory (the baseline comes later, from ``mark``)."""
        if not tracemalloc.is_tracing():
            tracemalloc.start()
            self.started_tracing = True

    def mark(self) -> None:
        """Take the baseline now."""
        gc.collect()
        self.fds = open_fds()
        self.baseline = tracemalloc.take_snapshot().filter_traces(_NOT_COUNTED)

    def deltas(self) -> tuple[int, int]:
        """``(fds, bytes)`` gained since the baseline."""
        gc.collect()
        fds = open_fds() - self.fds
        now = tracemalloc.take_snapshot().filter_traces(_NOT_COUNTED)
        assert self.baseline is not None, "deltas() before mark()"
        grown = sum(stat.size_diff for stat in now.compare_to(self.baseline, "filename"))
        self.baseline = None
        return fds, grown

    def stop(self) -> None:
        """Stop tracing, if ``start()`` started it."""
        if self.started_tracing:
            tracemalloc.stop()
            self.started_tracing = False


@dataclass
class Outcome:
    """The result of one target: its figures, and the violation if there was one."""

    target: str
    seed: int
    seconds: float = 0.0
    steps: int = 0
    waits: int = 0
    reports: int = 0
    fd_delta: int = 0
    memory_delta: int = 0
    violation: str | None = None
    model_bug: bool = False
    step: int | None = None  # the step the violation happened at
    replay: str | None = None  # the command that replays it
    log: str = ""
    counts: dict[str, int] = field(default_factory=dict)
    unit: str = "steps"  # what ``steps`` counts: walk steps, or connections (loop, aio)

    @property
    def ok(self) -> bool:
        return self.violation is None

    def record(self, violation: Violation, log: OpLog, steps: int, replay: str) -> None:
        """Record the violation that ended the run, at ``log``'s step: ``steps`` done by
        then, the last operations, and the command that replays it."""
        self.violation = str(violation)
        self.model_bug = violation.model_bug
        self.step = log.step
        self.steps = steps
        self.log = log.dump()
        self.replay = replay

    def resources_ok(self) -> bool:
        """Whether fds and memory came back within the tolerances."""
        return self.fd_delta <= FD_TOLERANCE and self.memory_delta <= MEMORY_TOLERANCE

    def summary(self) -> str:
        """The one line printed per target."""
        verdict = "OK" if self.ok else ("MODEL BUG" if self.model_bug else "VIOLATION")
        if self.ok and not self.resources_ok():
            verdict = "LEAK"
        rate = self.steps / self.seconds if self.seconds else 0.0
        if self.unit == "steps":
            figures = (
                f"steps={self.steps:,} ops/s={rate:,.0f} waits={self.waits:,} "
                f"reports={self.reports:,}"
            )
        else:
            figures = f"{self.unit}={self.steps:,} {self.unit}/s={rate:,.0f}"
        extras = " ".join(f"{name}={value:,}" for name, value in sorted(self.counts.items()))
        return (
            f"{self.target}: {verdict} seed={self.seed} {figures} "
            f"fds={self.fd_delta:+d} mem={self.memory_delta / 1024:+.1f}KiB "
            f"time={self.seconds:.1f}s" + (f" {extras}" if extras else "")
        )

    def report(self) -> str:
        """The violation, its step, the last operations and the replay command."""
        if self.ok:
            return ""
        kind = "model bug" if self.model_bug else "violation"
        return (
            f"{self.target}: {kind} at step {self.step} (seed {self.seed}): {self.violation}\n"
            f"last operations (step, operation):\n{self.log}\n"
            f"replay: {self.replay}"
        )


class Progress:
    """Prints a progress line every ``every`` seconds (never, if ``every`` is 0)."""

    def __init__(self, target: str, every: float, stream: TextIO = sys.stderr) -> None:
        self.target = target
        self.every = every
        self.stream = stream
        self.started = time.monotonic()
        self.due = self.started + every

    def tick(self, text: str) -> None:
        """Print ``text`` if a line is due."""
        if not self.every:
            return
        now = time.monotonic()
        if now >= self.due:
            self.due = now + self.every
            print(
                f"[{self.target}] {now - self.started:6.1f}s {text}", file=self.stream, flush=True
            )
