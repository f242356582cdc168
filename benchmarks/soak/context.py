"""The Context soak: a seeded random walk over real streams, checked after every ``wait()``.

Each step picks one operation, with weights, among those the model's state allows: add,
modify and remove watchers (``READ``/``WRITE``, ``ONESHOT``, ``EDGE_TRIGGERED`` where the
backend has it), re-arm one-shots, send and drain on either end, fill a send buffer, shut
down or close the peer, close a watched stream without ``remove()`` (keeping its file open
with a ``dup``, or at once giving its fd number to a new stream that is then added), and
wait: ``wait(0)``, ``wait(0, max_events=k)`` alone or as a whole rotation, short blocking
waits, ``wait(None)`` with watchers ready, waits interrupted by ``SIGALRM`` (a handler that
returns, one that raises), and a ``fork`` whose child uses a Context of its own.

Every random choice comes from the model's state and a generator seeded with the walk's
seed and the step number, so ``--seed N --steps K`` replays a walk: the same operations, on
the same kinds of streams, even if the OS's timing made an earlier step come out otherwise.
"""

from __future__ import annotations

import functools
import os
import random
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import iopoll
import iopoll_polyfill.fallback as polyfill
from _iopoll_core.context import Context as _EngineContext
from _iopoll_core.watcher import Watcher as _EngineWatcher

from .common import OpLog, Outcome, Progress, Resources, Violation
from .streams import KINDS, Streams
from .walk_streams import StreamOps
from .walk_waits import WaitOps

__all__ = [
    "IMPLS",
    "ContextTarget",
    "ContextWalk",
    "PureContext",
    "context_targets",
    "run_context_target",
]

IMPLS = ("iopoll", "pure", "polyfill")
WARMUP_STEPS = 400
# One fork in this many steps: a fork costs milliseconds.
FORK_EVERY = 400


class PureContext(_EngineContext):
    """``iopoll.Context`` as it runs with ``IOPOLL_PURE_PYTHON=1``: the engine's pure-Python
    ``wait()`` on the native backends (as ``tests/pure_iopoll.py`` builds it)."""

    __slots__ = ()
    _backend_type = iopoll.Backend
    _watcher_type = _EngineWatcher

    def __init__(self, backend: iopoll.Backend = iopoll.Backend.AUTO) -> None:
        super().__init__(backend)


@dataclass(frozen=True)
class ContextTarget:
    """One implementation on one backend; ``make`` builds its Context."""

    impl: str
    backend: Any
    make: Callable[[], Any]
    api: ModuleType  # for the error classes and StreamPollHandle

    @property
    def name(self) -> str:
        return f"context {self.impl}-{self.backend.name}"

    def replay(self, seed: int, steps: int, skip: frozenset[str] = frozenset()) -> str:
        """The command line that replays a walk of this target."""
        extra = f" --skip {','.join(sorted(skip))}" if skip else ""
        return (
            f"python -m benchmarks.soak context --impl {self.impl} --backend "
            f"{self.backend.name} --seed {seed} --steps {steps}{extra}"
        )


def context_targets(impl: str = "all", backend: str = "all") -> list[ContextTarget]:
    """The targets named by ``--impl`` and ``--backend`` (``all``: every one here)."""
    classes: dict[str, Callable[[Any], Any]] = {
        "iopoll": iopoll.Context,
        "pure": PureContext,
        "polyfill": polyfill.Context,
    }
    targets = []
    for name in IMPLS if impl == "all" else (impl,):
        api: ModuleType = polyfill if name == "polyfill" else iopoll
        backends = (
            polyfill.Backend.available_backends()
            if name == "polyfill"
            else (iopoll.Backend.available_backends())
        )
        for member in backends:
            if backend not in ("all", member.name):
                continue
            make = functools.partial(classes[name], member)
            targets.append(ContextTarget(name, member, make, api))
    return targets


class ContextWalk(WaitOps, StreamOps):
    """One walk: the state and watcher operations of ``Walk``, the waits of ``WaitOps``, the
    traffic of ``StreamOps``, and the step that picks among them."""

    def choices(self, step: int) -> list[tuple[float, Callable[[], None]]]:
        """The operations this state allows, with their weights."""
        model = self.model
        slots = model.slots
        watched = self.watched()
        options: list[tuple[float, Callable[[], None]]] = [
            (10, self.op_wait),
            (3, self.op_wait_short),
            (4, self.op_wait_k),
            (3, self.op_rotate),
            (2, self.op_inspect),
            (1.5, self.op_misuse),
        ]
        if self.watchable():
            options.append((10, self.op_add))
        if watched:
            options += [(5, self.op_modify), (3, self.op_remove)]
        if any(s.watcher and not s.watcher.armed for s in slots):
            options.append((6, self.op_rearm))
        if self.peer_writable():
            options.append((12, self.op_peer_send))
        if any(s.local_open and s.to_local for s in slots):
            options.append((5, self.op_local_read))
        if self.local_readable():
            options.append((5, self.op_local_drain))
        if self.local_writable():
            options.append((3, self.op_local_send))
            if any(s.kind != "tls" for s in self.local_writable()):
                options.append((1.5, self.op_local_fill))
        if any(s.peer_open and s.local_open and s.kind != "pipe-r" for s in slots):
            options.append((4, self.op_peer_drain))
        if any(
            s.peer_open and not s.peer_shut and s.kind in ("unix", "tcp") and s.local_open
            for s in slots
        ):
            options.append((0.7, self.op_peer_shutdown))
        if any(s.peer_open for s in slots):
            options.append((1.2, self.op_peer_close))
        if any(s.local_open for s in watched):
            options.append((2.5, self.op_local_close))
        if any(not s.local_open for s in slots):
            options.append((3, self.op_renew))
        if self.keepers:
            options.append((1, self.op_release_dup))
        if self.signals_in_main_thread:
            options += [(0.5, self.op_signal_returns), (0.5, self.op_signal_raises)]
            if any(model.must(m) for m in model.active()):
                options.append((1, self.op_wait_forever))
        if step % FORK_EVERY == FORK_EVERY - 1 and hasattr(os, "fork"):
            options.append((1000, self.op_fork))
        if self.skip:
            options = [(w, op) for w, op in options if op.__name__[3:] not in self.skip]
        return options

    def step(self, step: int) -> None:
        """Run one operation; any exception it raises is a violation.

        The step's random numbers come from a generator seeded with the walk's seed and the
        step number: should the OS make one step come out differently (TCP timing), the
        draws of the later steps are still the same, and a replay stays on track.
        """
        self.rng = random.Random((self.seed << 32) + step)
        options = self.choices(step)
        weights = [weight for weight, _ in options]
        operation = self.rng.choices([op for _, op in options], weights)[0]
        try:
            operation()
        except Violation:
            raise
        except Exception as exc:  # the contract does not let these calls raise
            raise Violation(
                f"{operation.__name__} raised {exc!r}\n{traceback.format_exc().rstrip()}"
            ) from exc


def run_context_target(
    target: ContextTarget,
    *,
    seconds: float,
    seed: int,
    steps: int | None = None,
    progress: float = 5.0,
    warmup: int = WARMUP_STEPS,
    skip: frozenset[str] = frozenset(),
) -> Outcome:
    """Soak one target for ``seconds`` (or ``steps`` steps, whichever ends first).

    A warm-up walk (another seed) runs first, so that what is cached on first use is in
    the fd and memory baseline; the walk then starts from that baseline and must end there.
    """
    outcome = Outcome(target.name, seed)
    resources = Resources()
    resources.start()
    try:
        if warmup:
            warm = ContextWalk(target, seed ^ 0x5EED, OpLog(), skip)
            try:
                for step in range(warmup):
                    warm.step(step)
            except Violation:
                pass  # the real walk finds it again, with its own seed and step
            finally:
                warm.close()
        touch_every_kind()
        resources.mark()
        log = OpLog()
        walk = ContextWalk(target, seed, log, skip)
        walk.signals_in_main_thread = _main_thread()
        ticker = Progress(target.name, progress)
        started = time.monotonic()
        deadline = started + seconds
        try:
            step = 0
            while (steps is None or step < steps) and time.monotonic() < deadline:
                step += 1
                log.step = step
                walk.step(step)
                outcome.steps = step
                ticker.tick(
                    f"steps={step:,} waits={walk.model.waits:,} reports={walk.model.reports:,}"
                )
        except Violation as violation:
            outcome.record(violation, log, log.step, target.replay(seed, log.step, skip))
        finally:
            outcome.seconds = time.monotonic() - started
            outcome.waits = walk.model.waits
            outcome.reports = walk.model.reports
            outcome.counts = dict(walk.counts)
            outcome.counts["tls_pending_only"] = walk.model.pending_only
            walk.close()
            del walk
        outcome.fd_delta, outcome.memory_delta = resources.deltas()
    finally:
        resources.stop()
    return outcome


def touch_every_kind() -> None:
    """Make and close a pair of every kind, so that what their first use imports or caches
    (the ``idna`` codec behind a TLS ``server_hostname``) is in the baseline, whatever the
    warm-up walk happened to make."""
    streams = Streams()
    try:
        for kind in KINDS:
            streams.make(kind).close()
    finally:
        streams.close()


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()
