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
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from types import ModuleType
from typing import Any

import iopoll
import iopoll_polyfill.fallback as polyfill
from _iopoll_core.context import Context as _EngineContext
from _iopoll_core.events import ErrorCode, Event
from _iopoll_core.watcher import Watcher as _EngineWatcher
from iopoll_conformance.process import alarm

from .common import OpLog, Outcome, Progress, Resources, Violation
from .model import Expectation, Model, SlotModel, WatcherModel
from .streams import KINDS, Pair, Streams, inq, read_some, write_some

__all__ = [
    "IMPLS",
    "ContextTarget",
    "ContextWalk",
    "PureContext",
    "context_targets",
    "run_context_target",
]

IMPLS = ("iopoll", "pure", "polyfill")
SLOTS = 8
MAX_DUPS = 6
WARMUP_STEPS = 400
SIZES = (1, 7, 100, 1000, 16_000, 70_000)
# One fork in this many steps: a fork costs milliseconds.
FORK_EVERY = 400
# Exit status of a forked child whose checks all passed.
CHILD_OK = 0


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


class SoakSignal(Exception):
    """What the raising ``SIGALRM`` handler raises (compared by identity afterwards)."""


class SoakHang(Exception):
    """Raised by the watchdog alarm of a ``wait(None)`` that should have returned at once."""


class ContextWalk:
    """One walk: a Context, its slots of streams, the model, and the operations."""

    def __init__(
        self, target: ContextTarget, seed: int, log: OpLog, skip: frozenset[str] = frozenset()
    ) -> None:
        self.target = target
        self.skip = skip  # operation names (without "op_") never chosen
        self.seed = seed
        # Each step draws from its own generator (see ``step``); this one makes the set-up.
        self.rng = random.Random(seed)
        self.log = log
        self.streams = Streams()
        self.ctx = target.make()
        backend = self.ctx.backend
        self.model = Model(
            backend, backend.supports_edge_triggering(), backend.supports_read_hangup()
        )
        self.native_timeouts = target.impl != "polyfill"
        # dups keeping closed streams' files open, with the slot each belongs to
        self.keepers: list[tuple[int, SlotModel]] = []
        self.counts: dict[str, int] = {}
        self.data_serial = 1000
        self.signals_in_main_thread = True
        for index in range(SLOTS):
            self.model.slots.append(SlotModel(index, self.new_pair()))

    def close(self) -> None:
        """Release everything the walk opened."""
        self.ctx.close()
        for slot in self.model.slots:
            slot.pair.close()
        for fd, _ in self.keepers:
            os.close(fd)
        self.keepers.clear()
        self.streams.close()

    # -- helpers ---------------------------------------------------------------------------------

    def count(self, name: str, by: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + by

    def new_pair(self, kind: str | None = None) -> Pair:
        return self.streams.make(kind or self.rng.choice(KINDS), flip=self.rng.random() < 0.3)

    def new_data(self) -> int:
        # A fresh int object each time (well above the small-int cache): compared with ``is``.
        self.data_serial += 1
        return self.data_serial * 3 + 1_000_000

    def random_events(self) -> Event:
        rng = self.rng
        events = rng.choice([Event.READ, Event.READ, Event.WRITE, Event.READ | Event.WRITE])
        if events & Event.READ and rng.random() < 0.2:
            events |= Event.READ_HANGUP
        if rng.random() < 0.3:
            events |= Event.ONESHOT
        if self.model.supports_edge and rng.random() < 0.3:
            events |= Event.EDGE_TRIGGERED
        return events

    def pick(self, slots: list[SlotModel]) -> SlotModel:
        return self.rng.choice(slots)

    def settle(self, slot: SlotModel, ok: bool) -> None:
        if not ok:
            slot.unsure = True
            self.count("unsettled")

    # -- checked waits ---------------------------------------------------------------------------

    def checked_wait(
        self,
        what: str,
        call: Callable[[], Any],
        max_events: int | None = None,
        require_all: bool = True,
        expectation: Expectation | None = None,
    ) -> list[WatcherModel]:
        """Call one ``wait()`` and check its result and ``len(ctx)`` against the model."""
        if expectation is None:
            self.model.self_check()
            expectation = self.model.expect()
        result = call()
        reported = self.model.check(what, result, expectation, max_events, require_all)
        self.check_len(what)
        return reported

    def check_len(self, what: str) -> None:
        expected = len(self.model.active())
        actual = len(self.ctx)
        if actual != expected:
            raise Violation(f"after {what}: len(ctx) is {actual}, the model counts {expected}")

    def op_wait(self) -> None:
        rng = self.rng
        choice = rng.random()
        if choice < 0.5 or not self.native_timeouts:
            self.log.add("wait(0)")
            self.checked_wait("wait(0)", lambda: self.ctx.wait(0))
        elif choice < 0.75:
            self.log.add("wait(0.0)")
            self.checked_wait("wait(0.0)", lambda: self.ctx.wait(0.0))
        else:
            self.log.add("wait(timedelta(0))")
            self.checked_wait("wait(timedelta(0))", lambda: self.ctx.wait(timedelta(0)))

    def op_wait_short(self) -> None:
        self.log.add("wait(0, 2000)")
        self.checked_wait("wait(0, 2000)", lambda: self.ctx.wait(0, 2000))

    def op_wait_k(self) -> None:
        k = self.rng.randint(1, 3)
        self.log.add(f"wait(0, max_events={k})")
        self.checked_wait(
            f"wait(0, max_events={k})",
            lambda: self.ctx.wait(0, 0, k),
            max_events=k,
            require_all=False,
        )

    def op_rotate(self) -> None:
        """ceil(n/k) calls of wait(0, max_events=k) report every ready watcher; a call that
        left out k or more ready ones is followed by one that repeats none it returned."""
        k = self.rng.randint(1, 3)
        self.model.self_check()
        first = self.model.expect()
        calls = self.model.rotation_calls(first, k)
        self.log.add(f"rotation: {calls} x wait(0, max_events={k}), {len(first.must)} ready")
        self.count("rotations")
        union: set[int] = set()
        previous: set[int] = set()
        left_out = 0
        expectation: Expectation | None = first
        for call in range(calls):
            what = f"rotation call {call + 1}/{calls} of wait(0, max_events={k})"
            if expectation is None:
                expectation = self.model.expect()
            must_now = {id(m) for m in expectation.must}
            reported = self.checked_wait(
                what, lambda: self.ctx.wait(0, 0, k), k, False, expectation
            )
            ids = {id(m) for m in reported}
            if left_out >= k and ids & previous:
                raise Violation(
                    f"{what}: {left_out} ready watchers were left out by the call before, "
                    "yet this call repeats one that call returned (left-out watchers come "
                    "out first, SPEC 4)"
                )
            left_out = len(must_now - ids)
            previous = ids
            union |= ids
            expectation = None
        missing = [m for m in first.must if id(m) not in union]
        if missing:
            raise Violation(
                f"a rotation of {calls} x wait(0, max_events={k}) with at most "
                f"{first.competitors} watchers competing never reported "
                + ", ".join(f"{m.name()} ({self.model.why(m)})" for m in missing)
            )

    def op_wait_forever(self) -> None:
        """``wait(None)`` with a watcher ready for sure returns at once, with all of them."""

        def hang(signum: int, frame: Any) -> None:
            raise SoakHang

        self.log.add("wait(None), watchers ready")
        with alarm(hang, 5.0):
            try:
                self.checked_wait("wait(None)", lambda: self.ctx.wait(None))
            except SoakHang:
                raise Violation("wait(None) blocked for 5 s with watchers ready for sure") from None

    # -- signals and fork ----------------------------------------------------------------------

    def op_signal_returns(self) -> None:
        """A ``SIGALRM`` handler that returns: the wait goes on with the remaining time."""
        ran = [0]

        def handler(signum: int, frame: Any) -> None:
            ran[0] += 1

        self.model.self_check()
        expectation = self.model.expect()
        self.log.add(f"wait(0, 30000) with SIGALRM at 5 ms (returns), {len(expectation.may)} may")
        self.count("sigalrm_returns")
        started = time.monotonic()
        with alarm(handler, 0.005):
            self.checked_wait(
                "wait(0, 30000) interrupted by a returning handler",
                lambda: self.ctx.wait(0, 30_000),
                expectation=expectation,
            )
        elapsed = time.monotonic() - started
        if not expectation.may and elapsed < 0.029:
            raise Violation(
                f"a wait(0, 30000) interrupted by a handler that returned took only "
                f"{elapsed * 1000:.1f} ms with nothing ready (PEP 475: the wait goes on)"
            )

    def op_signal_raises(self) -> None:
        """A ``SIGALRM`` handler that raises: the exception leaves ``wait()`` unchanged, and
        the context works afterwards.  Done on the walk's context when nothing there may be
        ready (so the wait is sure to be blocked when the signal comes), else on a context
        that holds only a fired one-shot (SPEC 6.12: ``wait(None)`` blocks)."""
        self.model.self_check()
        expectation = self.model.expect()
        if not expectation.may and self.model.active():
            self.count("sigalrm_raises_here")
            self.log.add("wait(None) with SIGALRM at 5 ms (raises), nothing may be ready")
            self._raising_wait(self.ctx, expectation)
            self.checked_wait("wait(0) after a handler's exception", lambda: self.ctx.wait(0))
            return
        self.count("sigalrm_raises_fresh")
        self.log.add("fresh context holding a fired one-shot: wait(None), SIGALRM raises")
        a, b = socket.socketpair()
        side = self.target.make()
        try:
            watcher = side.add(a, Event.READ | Event.ONESHOT)
            b.send(b"x")
            if side.wait(0) != [watcher]:
                raise Violation("a one-shot with a byte to read was not reported")
            self._raising_wait(side, None)
            watcher.modify_events(Event.READ)  # re-armed: the byte is reported at once
            if side.wait(0) != [watcher]:
                raise Violation(
                    "after a handler's exception, a re-armed watcher with a byte "
                    "to read was not reported"
                )
        finally:
            side.close()
            a.close()
            b.close()

    def _raising_wait(self, ctx: Any, expectation: Expectation | None) -> None:
        token = SoakSignal("raised by the soak's SIGALRM handler")
        armed = [True]
        waiting = [False]

        def handler(signum: int, frame: Any) -> None:
            if not waiting[0]:
                # A loaded machine can take 5 ms to get from setitimer() to the wait: an
                # exception raised there would come out of the soak, not out of wait().
                signal.setitimer(signal.ITIMER_REAL, 0.005)
            elif armed[0]:
                armed[0] = False
                raise token

        result: Any = None
        caught: BaseException | None = None
        try:
            with alarm(handler, 0.005):
                try:
                    waiting[0] = True
                    result = ctx.wait(None)
                except SoakSignal as exc:
                    caught = exc
                armed[0] = False
        except SoakSignal:
            pass  # the handler ran after wait() had returned: result says what it returned
        if caught is None:
            if expectation is not None:
                self.model.check("wait(None)", result, expectation, None, True)
            raise Violation(
                f"wait(None) returned {result!r} instead of blocking until the "
                "signal handler raised"
            )
        if caught is not token:
            raise Violation(f"wait() raised {caught!r}, not the handler's own exception")

    def op_fork(self) -> None:
        """A child makes its own Context, uses it and exits 0; the parent's still works."""
        self.log.add("fork: the child uses a new Context, the parent waits for it")
        self.count("forks")
        pid = os.fork()
        if pid == 0:  # the child: never return into the walk
            status = 99
            try:
                status = self._child()
            finally:
                os._exit(status)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code != CHILD_OK:
            raise Violation(f"the forked child's checks failed: exit status {code} (see _child)")
        self.checked_wait("wait(0) after a fork", lambda: self.ctx.wait(0))

    def _child(self) -> int:
        """What the forked child checks; its exit status names the first failure."""
        api = self.target.api
        try:
            self.ctx.wait(0)
            return 10  # the inherited context must refuse (SPEC 4)
        except api.FailedPollOperationError as exc:
            if exc.code != ErrorCode.PERMISSION:
                return 11
        a, b = socket.socketpair()
        ctx = self.target.make()
        watcher = ctx.add(a, Event.READ, "child")
        if ctx.wait(0) != []:
            return 12
        b.send(b"x")
        if ctx.wait(0, 200_000) != [watcher] or watcher.data != "child":
            return 13
        watcher.modify_events(Event.READ | Event.ONESHOT)
        if ctx.wait(0) != [watcher] or ctx.wait(0) != []:
            return 14
        watcher.remove()
        if len(ctx) != 0:
            return 15
        ctx.close()
        return CHILD_OK

    # -- watcher operations -------------------------------------------------------------------

    def watchable(self) -> list[SlotModel]:
        return [s for s in self.model.slots if s.local_open and s.watcher is None]

    def watched(self) -> list[SlotModel]:
        return [s for s in self.model.slots if s.watcher is not None]

    def op_add(self, slot: SlotModel | None = None) -> None:
        slot = slot or self.pick(self.watchable())
        events = self.random_events()
        data = self.new_data()
        form = self.rng.random()
        handle: Any = slot.pair.local
        if form < 0.15:
            handle = self.target.api.StreamPollHandle(handle)
        spelled: Any = events
        if form > 0.85:
            spelled = [flag for flag in Event if flag & events]  # an iterable of Event
        self.log.add(
            f"add slot {slot.index} ({slot.kind}, fd {slot.pair.local.fileno()}) {events!r}"
        )
        watcher = self.ctx.add(handle, spelled, data)
        if watcher.watched_events != events or watcher.data is not data:
            raise Violation(
                f"add() returned a watcher with {watcher.watched_events!r}, data {watcher.data!r}"
            )
        self.model.added(slot, watcher, events, data)
        self.count("adds")

    def op_modify(self) -> None:
        slot = self.pick(self.watched())
        model = slot.watcher
        assert model is not None
        flavour = self.rng.random()
        if flavour < 0.2:
            data = self.new_data()
            self.log.add(f"modify_data slot {slot.index}")
            model.watcher.modify_data(data)
            model.data = data
            return
        events = self.random_events()
        if flavour < 0.6:
            data = self.new_data()
            self.log.add(f"modify slot {slot.index} {events!r} with new data")
            model.watcher.modify(events, data)
            model.data = data
        else:
            self.log.add(f"modify_events slot {slot.index} {events!r}")
            model.watcher.modify_events(events)
        model.events = events
        self.model.armed(model)
        self.count("modifies")

    def op_rearm(self) -> None:
        slot = self.pick([s for s in self.watched() if s.watcher and not s.watcher.armed])
        model = slot.watcher
        assert model is not None
        self.log.add(f"re-arm the fired one-shot of slot {slot.index} ({model.events!r})")
        model.watcher.modify_events(model.events)
        self.model.armed(model)
        self.count("rearms")

    def op_remove(self) -> None:
        slot = self.pick(self.watched())
        model = slot.watcher
        assert model is not None
        self.log.add(f"remove slot {slot.index}")
        model.watcher.remove()
        self.model.retire(model, "removed")
        if model.watcher.is_active():
            raise Violation(f"{model.name()} is still active after remove()")
        self.count("removes")

    def op_inspect(self) -> None:
        """``is_active()`` of every watcher and ghost; what inactive watchers refuse."""
        self.log.add("inspect: is_active() of every watcher, inactive ones' remove/modify")
        for model in self.model.active():
            if not model.watcher.is_active():
                raise Violation(f"{model.name()} is not active, its stream is open")
        for ghost in self.model.ghosts[-4:]:
            watcher = ghost.watcher
            if watcher.is_active():
                raise Violation(f"{ghost.name()} is active after it was {ghost.state}")
            if ghost.state == "retired":
                watcher.remove()  # a no-op for a closed stream's watcher (SPEC 5)
            else:
                self.expect_error(watcher.remove, iopoll.InactiveWatcherError, "remove()")
            self.expect_error(
                functools.partial(watcher.modify_events, Event.READ),
                iopoll.InactiveWatcherError,
                "modify_events()",
            )
        self.check_len("inspect")

    def op_misuse(self) -> None:
        """What SPEC says bad calls get; the context must work afterwards."""
        rng = self.rng
        watched = [s for s in self.watched() if s.local_open]
        choice = rng.random()
        if choice < 0.3 and watched:
            slot = self.pick(watched)
            self.log.add(f"misuse: add slot {slot.index}'s watched stream again")
            self.expect_error(
                lambda: self.ctx.add(slot.pair.local, Event.READ),
                iopoll.HandleAlreadyWatchedError,
                "a second add() of a watched stream",
            )
        elif choice < 0.5:
            self.log.add("misuse: add a closed socket")
            sock = socket.socket()
            sock.close()
            self.expect_error(
                lambda: self.ctx.add(sock, Event.READ),
                iopoll.InvalidHandleError,
                "add() of a closed socket",
            )
        elif choice < 0.65 and not self.model.supports_edge:
            self.log.add("misuse: EDGE_TRIGGERED where the backend has no edge mode")
            with socket.socket() as sock:
                error = self.expect_error(
                    lambda: self.ctx.add(sock, Event.READ | Event.EDGE_TRIGGERED),
                    iopoll.FailedHandleAddError,
                    "add() with EDGE_TRIGGERED",
                )
            if error.code != ErrorCode.NOSUPPORT:
                raise Violation(f"EDGE_TRIGGERED refused with {error.code!r}, not NOSUPPORT")
        else:
            arguments = rng.choice([(-1, 0, None), (0, 0, 0), (0, 0, True), (0, -1, None)])
            expected = TypeError if arguments[2] is True else ValueError
            self.log.add(f"misuse: wait{arguments}")
            self.expect_error(lambda: self.ctx.wait(*arguments), expected, f"wait{arguments}")
        self.checked_wait("wait(0) after a refused call", lambda: self.ctx.wait(0))

    def expect_error(self, call: Callable[[], Any], error: type[Exception], what: str) -> Any:
        try:
            call()
        except error as exc:
            return exc
        raise Violation(f"{what} did not raise {error.__name__}")

    # -- stream operations ----------------------------------------------------------------------

    def op_peer_send(self) -> None:
        slot = self.pick(self.peer_writable())
        pair = slot.pair
        size = self.streams.room(pair, slot.to_local, self.rng.choice(SIZES))
        before = inq(pair.local) if slot.local_open else 0
        sent = write_some(pair.peer, size) if size else 0
        self.log.add(f"peer of slot {slot.index} ({slot.kind}) sends {size} B: {sent} taken")
        slot.touch()
        if not sent:
            return
        slot.to_local += sent
        if slot.local_open:
            expected = before + self.streams.wire_bytes(pair, sent)
            self.settle(slot, self.streams.settle_landed(pair, pair.local, expected))
            self.model.transition(slot, read=True, write=False, hangup=False)

    def peer_writable(self) -> list[SlotModel]:
        return [
            s
            for s in self.model.slots
            if s.peer_open
            and not s.peer_shut
            and s.kind != "pipe-w"
            and (s.local_open or s.kept)
            and s.to_local < 400_000
        ]

    def op_local_read(self) -> None:
        slot = self.pick([s for s in self.model.slots if s.local_open and s.to_local])
        size = self.rng.randint(1, min(slot.to_local, 20_000))
        count = read_some(slot.pair.local, size)
        self.log.add(f"local end of slot {slot.index} ({slot.kind}) reads {size} B: {count}")
        slot.touch()
        if count:
            slot.to_local -= count
        elif count == 0 and not (slot.reset or slot.peer_gone()):
            raise Violation(f"slot {slot.index}: end of file with the peer open", model_bug=True)
        if count == 0:
            slot.to_local = 0

    def local_readable(self) -> list[SlotModel]:
        return [s for s in self.model.slots if s.local_open and s.kind != "pipe-w"]

    def op_local_drain(self) -> None:
        slot = self.pick(self.local_readable())
        got, eof = self.streams.read_exactly(slot.pair.local, slot.to_local)
        self.log.add(
            f"local end of slot {slot.index} ({slot.kind}) drains: {got} B"
            f"{', end of file' if eof else ''} (model: {slot.to_local})"
        )
        slot.touch()
        if got < slot.to_local and not eof and not slot.reset:
            self.settle(slot, False)
        if eof and not (slot.reset or slot.peer_gone()):
            raise Violation(f"slot {slot.index}: end of file with the peer open", model_bug=True)
        slot.to_local = 0

    def op_local_send(self) -> None:
        slot = self.pick(self.local_writable())
        pair = slot.pair
        size = self.streams.room(pair, slot.to_peer, self.rng.choice(SIZES))
        before = inq(pair.peer)
        sent = write_some(pair.local, size) if size else 0
        self.log.add(f"local end of slot {slot.index} ({slot.kind}) sends {size} B: {sent} taken")
        slot.touch()
        slot.to_peer += sent
        if sent < size and slot.kind != "tls":
            slot.filled = True
        elif sent:
            expected = before + self.streams.wire_bytes(pair, sent)
            self.settle(slot, self.streams.settle_landed(pair, pair.peer, expected))

    def local_writable(self) -> list[SlotModel]:
        return [
            s
            for s in self.model.slots
            if s.local_open
            and s.peer_open
            and s.kind != "pipe-r"
            and not s.filled
            and s.to_peer < 400_000
        ]

    def op_local_fill(self) -> None:
        slot = self.pick([s for s in self.local_writable() if s.kind != "tls"])
        total = 0
        while True:
            sent = write_some(slot.pair.local, 1 << 16)
            if not sent:
                break
            total += sent
        self.log.add(f"local end of slot {slot.index} ({slot.kind}) fills: {total} B taken")
        slot.touch()
        slot.to_peer += total
        slot.filled = True
        self.count("fills")

    def op_peer_drain(self) -> None:
        slot = self.pick(
            [s for s in self.model.slots if s.peer_open and s.local_open and s.kind != "pipe-r"]
        )
        got, _ = self.streams.read_exactly(slot.pair.peer, slot.to_peer)
        self.log.add(
            f"peer of slot {slot.index} ({slot.kind}) drains: {got} B (model: {slot.to_peer})"
        )
        slot.touch()
        if got < slot.to_peer:
            self.settle(slot, False)
        was_filled = slot.filled
        slot.to_peer = 0
        slot.filled = False
        if was_filled:
            self.settle(slot, self.streams.settle_acked(slot.pair))
        self.model.transition(
            slot, read=False, write=was_filled and slot.kind in ("unix", "pipe-w"), hangup=False
        )

    def op_peer_shutdown(self) -> None:
        slot = self.pick(
            [
                s
                for s in self.model.slots
                if s.peer_open and not s.peer_shut and s.kind in ("unix", "tcp") and s.local_open
            ]
        )
        self.log.add(f"peer of slot {slot.index} ({slot.kind}) shuts down writing")
        slot.pair.peer.shutdown(socket.SHUT_WR)
        slot.touch()
        slot.peer_shut = True
        self.settle(slot, self.streams.settle_closed(slot.pair))
        self.model.transition(slot, read=True, write=False, hangup=True)

    def op_peer_close(self) -> None:
        slot = self.pick([s for s in self.model.slots if s.peer_open])
        peer = slot.pair.peer
        # Closing a socket with bytes unread in its kernel resets the connection.
        reset = slot.kind in ("unix", "tcp", "tls") and inq(peer) > 0
        self.log.add(
            f"peer of slot {slot.index} ({slot.kind}) closes"
            f"{' with bytes unread: reset' if reset else ''}"
        )
        # Whether the local end sees something new: TCP sent its FIN at the shutdown
        # already, and a close sends nothing more unless it resets; AF_UNIX and pipes wake
        # the other end at the close itself.
        news = reset or not slot.peer_shut or slot.kind not in ("tcp", "tls")
        peer.close()
        slot.touch()
        slot.peer_open = False
        slot.reset = slot.reset or reset
        slot.to_peer = 0
        slot.filled = False
        if slot.local_open:
            self.settle(slot, self.streams.settle_closed(slot.pair))
            if news:
                self.model.transition(slot, read=True, write=False, hangup=True)
        self.count("peer_closes")

    def op_local_close(self) -> None:
        """Close a watched stream without remove(), maybe behind a dup, maybe giving its fd
        number at once to a new stream that is then added."""
        rng = self.rng
        slot = self.pick([s for s in self.watched() if s.local_open])
        local = slot.pair.local
        number = local.fileno()
        dup = rng.random() < 0.4
        if dup:
            while len(self.keepers) >= MAX_DUPS:
                self.release_dup(0)
            self.keepers.append((os.dup(number), slot))
            self.count("dups_with_data" if slot.to_local else "dups")
        local.close()
        slot.touch()
        slot.local_open = False
        slot.kept = dup
        model = slot.watcher
        if model is not None:
            self.model.retire(model, "retired")
        reuse = rng.random() < 0.6
        self.log.add(
            f"local end of slot {slot.index} ({slot.kind}, fd {number}) closed without "
            f"remove(){', a dup keeps its file' if dup else ''}"
            f"{', fd number reused at once' if reuse else ''}"
        )
        self.count("closes")
        if reuse:
            fresh = self.renew(slot)
            if fresh.pair.local.fileno() == number:
                self.count("fd_reused")
            if rng.random() < 0.8:
                self.op_add(fresh)

    def op_renew(self) -> None:
        self.renew(self.pick([s for s in self.model.slots if not s.local_open]))

    def renew(self, slot: SlotModel) -> SlotModel:
        """A new pair (and model) in the slot; the old peer is closed after it is made, so
        that the new local end gets the lowest free fd number: the closed local end's."""
        pair = self.new_pair()
        slot.pair.peer.close()
        slot.peer_open = False
        fresh = SlotModel(slot.index, pair)
        self.model.slots[slot.index] = fresh
        self.log.add(f"slot {slot.index}: new {pair.kind} pair, local fd {pair.local.fileno()}")
        return fresh

    def op_release_dup(self) -> None:
        self.release_dup(self.rng.randrange(len(self.keepers)))

    def release_dup(self, index: int) -> None:
        fd, slot = self.keepers.pop(index)
        self.log.add(f"close the dup fd {fd} of slot {slot.index}'s closed stream")
        os.close(fd)
        if not any(owner is slot for _, owner in self.keepers):
            slot.kept = False

    # -- one step ---------------------------------------------------------------------------

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
