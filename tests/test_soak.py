"""The soak (``python -m benchmarks.soak``, docs/reliability.md): every target for a CI-sized
time, and proof that its checks can fail.

The slow tests run each target in a subprocess, as a user would, for ``CONTEXT_SECONDS`` or
``TRAFFIC_SECONDS``: 7 Context targets and 8 loop/aio targets here, about a minute and a half
in all (tox runs them once, in its slow env; ``python -m benchmarks.soak`` runs as long as asked).
``IOPOLL_SOAK_SEED`` picks the seed (default ``SEED``); a failure prints the command that
replays it.

The fast tests feed the checker deliberately broken Contexts (one that drops a ready
watcher, one whose one-shots fire twice, one that reports closed streams, ...) and a loop
driver whose ``cancel`` forgets timers: the soak must report each, with a seed and step
that replay it.  A soak that cannot fail proves nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.soak import loops  # noqa: E402
from benchmarks.soak.common import Outcome  # noqa: E402
from benchmarks.soak.context import ContextTarget, context_targets, run_context_target  # noqa: E402
from benchmarks.soak.loops import LoopTarget  # noqa: E402
from benchmarks.soak.traffic import run_traffic_target  # noqa: E402

import iopoll  # noqa: E402
from broken import returns_closed  # noqa: E402
from iopoll.loop import CallbackType, InvalidCallbackError, IoPollDriver  # noqa: E402

# Seconds per target in the slow tests: 7 x 5 + 8 x 4 = 67 s of soaking, plus start-up and
# warm-up (about 2 s a target): under three minutes.
CONTEXT_SECONDS = 5
TRAFFIC_SECONDS = 4
CONNECTIONS = 200
SEED = int(os.environ.get("IOPOLL_SOAK_SEED", "1"))
# The broken Contexts run on POLL, a backend the soak passes; each is caught within this.
BROKEN_STEPS = 4000
BROKEN_BACKEND = iopoll.Backend.POLL


def soak(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.soak", *args, "--progress", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def soak_for(seconds: int, *args: str) -> subprocess.CompletedProcess[str]:
    """``soak(*args)`` for ``seconds`` per target, with the seed ``SEED``."""
    return soak(*args, "--seconds", str(seconds), "--seed", str(SEED))


def assert_passed(result: subprocess.CompletedProcess[str]) -> None:
    summaries = [line for line in result.stdout.splitlines() if ": " in line]
    assert len(summaries) == 1, result.stdout + result.stderr
    assert result.returncode == 0, result.stdout + result.stderr
    assert ": OK " in summaries[0], summaries[0]


# -- the soak itself, per target (slow) ----------------------------------------------------------

CONTEXT_TARGETS = [
    pytest.param(t.impl, t.backend.name, id=f"{t.impl}-{t.backend.name}") for t in context_targets()
]


@pytest.mark.slow
@pytest.mark.parametrize(("impl", "backend"), CONTEXT_TARGETS)
def test_context_soak(impl: str, backend: str) -> None:
    assert_passed(soak_for(CONTEXT_SECONDS, "context", "--impl", impl, "--backend", backend))


@pytest.mark.skipif(not iopoll.Backend.EPOLL.is_available(), reason="EPOLL only")
@pytest.mark.parametrize("impl", ["iopoll", "pure"])
def test_the_epoll_rotation_walk_replays_clean(impl: str) -> None:
    """The walk that found finding 2 of docs/reliability.md (on EPOLL a level watcher left
    out by max_events lost its turn once leftovers existed): it stopped at step 2424."""
    assert_passed(
        soak("context", "--impl", impl, "--backend", "EPOLL", "--seed", "2026", "--steps", "2424")
    )


LOOP_TARGETS = [
    *(
        pytest.param("iopoll", b.name, id=f"IoPollDriver-{b.name}")
        for b in iopoll.Backend.available_backends()
    ),
    pytest.param("selectors", "all", id="SelectorsDriver"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("driver", "backend"), LOOP_TARGETS)
def test_loop_soak(driver: str, backend: str) -> None:
    assert_passed(
        soak_for(
            TRAFFIC_SECONDS,
            "loop",
            "--driver",
            driver,
            "--backend",
            backend,
            "--connections",
            str(CONNECTIONS),
        )
    )


AIO_TARGETS = ["AUTO", *(b.name for b in iopoll.Backend.available_backends())]


@pytest.mark.slow
@pytest.mark.parametrize("backend", AIO_TARGETS)
def test_aio_soak(backend: str) -> None:
    assert_passed(
        soak_for(TRAFFIC_SECONDS, "aio", "--backend", backend, "--connections", str(CONNECTIONS))
    )


# -- the checks can fail (fast) -----------------------------------------------------------------


class DropsAReadyWatcher(iopoll.Context):
    """``wait()`` without ``max_events`` leaves out the last of several ready watchers."""

    __slots__ = ()

    def wait(self, timeout: Any = None, microseconds: Any = 0, max_events: Any = None) -> Any:
        ready = super().wait(timeout, microseconds, max_events)
        return ready[:-1] if max_events is None and len(ready) > 1 else ready


class RepeatsOneShots(iopoll.Context):
    """A one-shot watcher is re-armed as it is reported, so it keeps firing."""

    __slots__ = ()

    def wait(self, timeout: Any = None, microseconds: Any = 0, max_events: Any = None) -> Any:
        ready = super().wait(timeout, microseconds, max_events)
        for watcher in ready:
            if watcher.watched_events & iopoll.Event.ONESHOT:
                watcher.modify_events(watcher.watched_events)
        return ready


class ReportsClosedStreams(returns_closed.Context):
    """``wait()`` (without ``max_events``) also returns the watchers whose stream was
    closed, with ``HANGUP`` (the conformance suite's ``broken.returns_closed``)."""

    def wait(self, timeout: Any = None, microseconds: Any = 0, max_events: Any = None) -> Any:
        if max_events is not None:
            # Unbroken within max_events: the soak must catch it on the closed stream.
            return iopoll.Context.wait(self, timeout, microseconds, max_events)
        return super().wait(timeout, microseconds, max_events)


class CountsClosedStreams(iopoll.Context):
    """``len(ctx)`` counts watchers whose stream was closed but not yet noticed."""

    __slots__ = ()

    def __len__(self) -> int:
        return len(self._watchers)


class IgnoresMaxEvents(iopoll.Context):
    """``wait()`` returns every ready watcher whatever ``max_events`` says."""

    __slots__ = ()

    def wait(self, timeout: Any = None, microseconds: Any = 0, max_events: Any = None) -> Any:
        return super().wait(timeout, microseconds, None)


class StarvesTheRest(iopoll.Context):
    """``wait(max_events=k)`` always returns the same first k: no rotation."""

    __slots__ = ()

    def wait(self, timeout: Any = None, microseconds: Any = 0, max_events: Any = None) -> Any:
        ready = super().wait(timeout, microseconds, None)
        if max_events is None:
            return ready
        for watcher in ready[max_events:]:  # what the engine would have left for later
            if watcher.watched_events & iopoll.Event.ONESHOT:
                watcher.modify_events(watcher.watched_events)
        return sorted(ready, key=lambda w: w.handle.fileno())[:max_events]


BROKEN = {
    "drops_a_ready_watcher": (DropsAReadyWatcher, "ready for sure"),
    "repeats_one_shots": (RepeatsOneShots, "one-shot that fired"),
    "reports_closed_streams": (ReportsClosedStreams, "whose stream was closed"),
    "counts_closed_streams": (CountsClosedStreams, "len(ctx)"),
    "ignores_max_events": (IgnoresMaxEvents, "more than max_events"),
    "starves_the_rest": (StarvesTheRest, "rotation"),
}


def broken_target(cls: type[iopoll.Context]) -> ContextTarget:
    return ContextTarget(cls.__name__, BROKEN_BACKEND, lambda: cls(BROKEN_BACKEND), iopoll)


def walk(target: ContextTarget, steps: int, seed: int = SEED) -> Outcome:
    return run_context_target(target, seconds=60, seed=seed, steps=steps, progress=0, warmup=0)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_the_soak_catches_a_broken_context(name: str) -> None:
    cls, words = BROKEN[name]
    target = broken_target(cls)
    found = walk(target, BROKEN_STEPS)
    assert not found.ok, f"{name} passed {BROKEN_STEPS} steps: {found.summary()}"
    assert not found.model_bug, found.report()
    assert words in found.report(), found.report()
    assert found.step is not None and found.replay is not None
    assert f"--seed {SEED} --steps {found.step}" in found.replay
    # The report names the seed and step that replay it: the same violation, at that step.
    again = walk(target, found.step)
    assert (again.step, again.violation) == (found.step, found.violation)
    assert again.log == found.log


def test_an_unbroken_context_passes_a_short_walk() -> None:
    """No false alarm from the model on a backend it passes (the broken ones' base)."""
    target = next(t for t in context_targets("iopoll", BROKEN_BACKEND.name))
    outcome = walk(target, 1500)
    assert outcome.ok, outcome.report()
    assert outcome.steps == 1500
    assert (outcome.fd_delta, outcome.waits > 300) == (0, True), outcome.summary()


def test_the_polyfill_passes_a_short_walk() -> None:
    outcome = walk(context_targets("polyfill")[0], 800)
    assert outcome.ok, outcome.report()


LEAKED: list[bytes] = []


class LeaksMemory(iopoll.Context):
    """Every ``wait()`` keeps a KiB for ever."""

    __slots__ = ()

    def wait(self, timeout: Any = None, microseconds: Any = 0, max_events: Any = None) -> Any:
        LEAKED.append(bytes(1024))
        return super().wait(timeout, microseconds, max_events)


class LeaksFds(iopoll.Context):
    """Every ``add()`` keeps a dup of the fd open."""

    __slots__ = ()

    def add(self, handle: Any, events: Any, data: Any = None) -> Any:
        watcher = super().add(handle, events, data)
        LEAKED_FDS.append(os.dup(watcher.handle.fileno()))
        return watcher


LEAKED_FDS: list[int] = []


@pytest.mark.parametrize("cls", [LeaksMemory, LeaksFds])
def test_the_soak_catches_a_leak(cls: type[iopoll.Context]) -> None:
    try:
        outcome = walk(broken_target(cls), 1500)
    finally:
        LEAKED.clear()
        for fd in LEAKED_FDS:
            os.close(fd)
        LEAKED_FDS.clear()
    assert outcome.ok and not outcome.resources_ok(), outcome.summary()
    assert ": LEAK " in outcome.summary()


class ForgetsCancelledTimers(IoPollDriver):
    """``cancel()`` of a timer is lost one time in three."""

    def __init__(self) -> None:
        super().__init__(BROKEN_BACKEND)
        self.cancels = 0

    def cancel(self, callback_id: str) -> None:
        try:
            timer = self.get_type(callback_id) is CallbackType.DELAY
        except InvalidCallbackError:
            timer = False
        if timer:
            self.cancels += 1
            if self.cancels % 3 == 0:
                return
        super().cancel(callback_id)


def test_the_loop_soak_catches_a_lost_cancel(monkeypatch: pytest.MonkeyPatch) -> None:
    # The forgotten stall watchdogs would keep run() going for their 30 s.
    monkeypatch.setattr(loops, "STALL_SECONDS", 1.0)
    target = LoopTarget("loop ForgetsCancelledTimers", ForgetsCancelledTimers, False)
    outcome = run_traffic_target(
        target, seconds=1.0, seed=SEED, connections=20, total=60, progress=0, warmup=0
    )
    assert not outcome.ok, outcome.summary()
    assert "after it was cancelled" in (outcome.violation or ""), outcome.report()


def test_the_command_line_replays_a_walk() -> None:
    result = soak("context", "--impl", "polyfill", "--seed", "7", "--steps", "300", "--warmup", "0")
    assert_passed(result)
    assert "seed=7 steps=300 " in result.stdout
