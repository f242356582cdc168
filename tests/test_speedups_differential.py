"""The C ``wait()`` fast path against the pure-Python one, call by call (issue 13).

``iopoll.Context.wait`` runs in C when ``iopoll._speedups`` was built: on EPOLL it calls
epoll_wait(2) itself on ``Context._native_fd`` with the GIL released, retries EINTR as PEP
475 says, finds each report's watcher in ``Context._by_fd`` and cuts its wait at
``Context._first_timer``.  ``pure_iopoll.Context`` is the same engine with the Python fast
path.  Two parts:

* ``DifferentialMachine``: a Hypothesis state machine that applies every operation to two
  contexts at once, a C one and a pure one, each on its own socket pairs, notify handles and
  timers (all made up front, so that no fd number is handed out during a run and both sides
  see the same bookkeeping): add, modify, remove, traffic, closes without ``remove()`` (with
  and without a ``dup`` keeping the file open), peer shutdowns, notify/clear, zero and long
  timers, and every form of ``wait()``.  Each operation must succeed on both or raise the
  same exception class; after each wait, the two must agree on the watchers returned, in
  order, their ``triggered_events``, every watcher's ``is_active()`` and ``data``,
  ``len(ctx)``, whether the fast path is on and what ``max_events`` left over.  It is
  skipped without the C code (``IOPOLL_PURE_PYTHON=1``, or not built).
* Targeted cases, each run on ``iopoll`` and ``pure_iopoll`` and, with the C code in use,
  compared between the two: one-shots, ``max_events`` leftovers (the fast path must not
  run while they exist, and must afterwards), a stream closed while a ``dup`` keeps it
  open, POLLNVAL on POLL, EINTR with a handler that returns, one that raises and one that
  closes the context, a handle whose ``fileno()`` starts raising, more reports than the C
  code's stack array (and a wait nested in a probe while its array is in use), and a
  forked child.  The two differences between C and Python these
  found (both fixed) are noted at their tests.

The cases written for one backend run on ``FAST_BACKEND``: EPOLL, or the backend
``IOPOLL_TEST_FAST_BACKEND`` names; ``tests/test_kqueue_libkqueue.py`` runs them on KQUEUE
with the C code built over libkqueue.
"""

from __future__ import annotations

import functools
import gc
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from types import FrameType, ModuleType
from typing import Any, ClassVar

import pytest
from hypothesis import note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

import fuzz_strategies as fz
import iopoll
import iopoll._native
import pure_iopoll
from iopoll import Backend, ErrorCode, Event, NotifyHandle, StreamPollHandle, TimerHandle
from iopoll_conformance.process import alarm, in_child

ACCELERATED = iopoll._native.ACCELERATED
EPOLL_AVAILABLE = Backend.EPOLL.is_available()
needs_epoll = pytest.mark.skipif(not EPOLL_AVAILABLE, reason="needs EPOLL")
# The backend on which the cases below written for one backend hold the C fast path to the
# Python one: EPOLL, or the one IOPOLL_TEST_FAST_BACKEND names (KQUEUE, in the test build of
# the C code over libkqueue that tests/test_kqueue_libkqueue.py runs these cases on).
FAST_BACKEND = Backend[os.environ.get("IOPOLL_TEST_FAST_BACKEND", "EPOLL")]
needs_fast_backend = pytest.mark.skipif(
    not FAST_BACKEND.is_available(), reason=f"needs {FAST_BACKEND.name}"
)
needs_speedups_in_use = pytest.mark.skipif(
    not ACCELERATED, reason="no C fast path: iopoll runs pure Python here"
)
needs_sigalrm = pytest.mark.skipif(
    not hasattr(signal, "setitimer") or not hasattr(signal, "pthread_sigmask"),
    reason="needs signal.setitimer and signal.pthread_sigmask",
)

MODULES = [
    pytest.param(iopoll, id="iopoll"),
    pytest.param(pure_iopoll, id="pure_iopoll"),
]

READ, WRITE = Event.READ, Event.WRITE
ONESHOT, EDGE = Event.ONESHOT, Event.EDGE_TRIGGERED
LONG = 3600.0  # a timer that never fires during a test

Ctx = Any  # an iopoll.Context or a pure_iopoll.Context
Wait = Callable[[Ctx], list[Any]]
MakePair = Callable[[], tuple[socket.socket, socket.socket]]  # conftest's ``pairs`` fixture


def _labels(result: list[Any]) -> list[tuple[Any, int]]:
    """A wait's result as (data, triggered_events) pairs, comparable across contexts."""
    return [(w.data, int(w.triggered_events)) for w in result]


# == Part 1: the differential state machine ====================================================

SLOTS = 4  # socket pairs per side
NOTIFIERS = 2  # notify handles per side

STREAM_EVENTS = [
    READ,
    WRITE,
    READ | WRITE,
    READ | ONESHOT,
    WRITE | ONESHOT,
    READ | WRITE | ONESHOT,
    READ | EDGE,
    WRITE | EDGE,
    READ | WRITE | EDGE,
    READ | EDGE | ONESHOT,
    READ | Event.READ_HANGUP,
]
# What modify_events() is given: a handle's own kind, or another kind's (ValueError on both).
ANY_EVENTS = [*STREAM_EVENTS, Event.NOTIFY, Event.NOTIFY | ONESHOT, Event.TIMER]

# Every form of wait(): the fast path's (no max_events, no microseconds, an int or float
# timeout or none) and some of the general path's.  The blocking ones only run when the
# model says something is surely ready.
BLOCKING = ("wait(None)", "wait()")
DIFF_WAITS: dict[str, Callable[[Ctx, int], list[Any]]] = {
    "wait(0)": lambda ctx, k: ctx.wait(0),
    "wait(0.0)": lambda ctx, k: ctx.wait(0.0),
    "wait(None)": lambda ctx, k: ctx.wait(None),
    "wait()": lambda ctx, k: ctx.wait(),
    "wait(0.01)": lambda ctx, k: ctx.wait(0.01),
    "wait(0, 0)": lambda ctx, k: ctx.wait(0, 0),
    "wait(timeout=0.0)": lambda ctx, k: ctx.wait(timeout=0.0),
    "wait(timeout=0, max_events=k)": lambda ctx, k: ctx.wait(timeout=0, max_events=k),
    "wait(0.0, 0, k)": lambda ctx, k: ctx.wait(0.0, 0, k),
    "wait(timedelta(0))": lambda ctx, k: ctx.wait(timedelta(0)),
    "wait(0, 1)": lambda ctx, k: ctx.wait(0, 1),
    "wait(0, 0.0)": lambda ctx, k: ctx.wait(0, 0.0),  # equal to 0, not an int: refused
}

FAST_FORMS = ["wait(0)", "wait(0.0)", "wait(None)", "wait()", "wait(0.01)", "wait(0, 0)"]
CUT_FORMS = ["wait(timeout=0, max_events=k)", "wait(0.0, 0, k)"]


@dataclass
class SlotState:
    """What the model knows of one socket pair (the same on both sides)."""

    local_open: bool = True  # the watched socket
    kept: bool = False  # closed, but a dup keeps its file (and epoll entry) alive
    unread: int = 0
    peer_shut: bool = False  # the peer shut down its writing side: EOF to read


@dataclass
class Entry:
    """One watcher label: a pair of watchers, one per side, made by the same add()."""

    kind: str  # "stream", "notify" or "timer"
    target: int  # the slot, notifier or timer index
    events: Event
    data: str
    zero: bool = False  # a TimerHandle(0)
    removed: bool = False
    armed: bool = True  # a timer not fired yet, or re-armed


@dataclass
class Side:
    """One context with its own streams, notify handles, timers and watchers."""

    make_context: Callable[[], Ctx]
    ctx: Ctx = None
    locals: list[socket.socket] = field(default_factory=list)
    peers: list[socket.socket] = field(default_factory=list)
    notifiers: list[NotifyHandle] = field(default_factory=list)
    timers: list[TimerHandle] = field(default_factory=list)
    keepers: list[int] = field(default_factory=list)
    watchers: list[Any] = field(default_factory=list)  # by label
    labels: dict[int, int] = field(default_factory=dict)  # id(watcher) -> label

    def open(self) -> None:
        """The context, SLOTS non-blocking socket pairs and NOTIFIERS notify handles."""
        self.ctx = self.make_context()
        for _ in range(SLOTS):
            local, peer = socket.socketpair()
            local.setblocking(False)
            peer.setblocking(False)
            self.locals.append(local)
            self.peers.append(peer)
        self.notifiers = [NotifyHandle() for _ in range(NOTIFIERS)]

    def close(self) -> None:
        """Close everything ``open`` and the rules made."""
        if self.ctx is not None:
            self.ctx.close()
        for sock in (*self.locals, *self.peers):
            sock.close()
        for notifier in self.notifiers:
            notifier.close()
        for fd in self.keepers:
            os.close(fd)

    def label(self, watcher: Any) -> Any:
        """The label of a watcher this side's add() returned."""
        return self.labels.get(id(watcher), f"unknown {watcher!r}")

    def label_of_fd(self, fd: int) -> Any:
        """The label of the watcher the context keeps under ``fd``."""
        watcher = self.ctx._watchers.get(fd)
        return "no watcher" if watcher is None else self.label(watcher)

    def state(self) -> tuple[Any, ...]:
        """What the two sides must agree on after a wait (is_active() and len() may retire
        closed streams: both sides call them in the same order)."""
        ctx = self.ctx
        return (
            [(w.is_active(), int(w.triggered_events), w.data) for w in self.watchers],
            len(ctx),
            ctx._fast_poll is None,
            [self.label_of_fd(fd) for fd in ctx._leftovers],
            ctx._first_timer is None,
        )


class DifferentialMachine(RuleBasedStateMachine):
    """The same operations on a C and a pure context; their answers must be the same."""

    # The two contexts compared: the fast one first, the reference second.
    CONTEXTS: ClassVar[tuple[Callable[[], Ctx], Callable[[], Ctx]]] = (
        lambda: iopoll.Context(Backend.EPOLL),
        lambda: pure_iopoll.Context(Backend.EPOLL),
    )
    # Whether the two contexts report their ready watchers in the same order (two epoll
    # objects do); if not, each wait's result is compared as a set.
    ORDERED: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__()
        self.sides: list[Side] = []
        self.slots: list[SlotState] = []
        self.entries: list[Entry] = []
        self.notified = [False] * NOTIFIERS
        self.data_made = 0

    @initialize(
        watched=st.lists(
            st.tuples(st.integers(0, SLOTS - 1), st.sampled_from(STREAM_EVENTS)),
            max_size=SLOTS,
            unique_by=lambda added: added[0],
        ),
        readable=st.lists(st.integers(0, SLOTS - 1), max_size=SLOTS, unique=True),
    )
    def start(self, watched: list[tuple[int, Event]], readable: list[int]) -> None:
        """Both sides, everything with an fd made now; then some watchers and bytes, so
        that a run starts with something to report whichever rules it draws."""
        self.sides = [Side(make) for make in self.CONTEXTS]
        for side in self.sides:
            side.open()
        self.slots = [SlotState() for _ in range(SLOTS)]
        for slot, events in watched:
            self.add_stream(slot, events, False)
        for slot in readable:
            self.send(slot, 1)

    def teardown(self) -> None:
        """Close both sides."""
        for side in self.sides:
            side.close()

    # -- running an operation on both sides ------------------------------------------------

    def both(self, what: str, action: Callable[[Side], Any]) -> list[fz.Outcome]:
        """Run ``action`` on each side: both succeed, or both raise the same class."""
        outcomes = [fz.attempt(functools.partial(action, side)) for side in self.sides]
        c, pure = outcomes
        note(f"{what}: C {c.error or c.result!r}, pure {pure.error or pure.result!r}")
        for outcome in outcomes:
            assert not isinstance(outcome.error, fz.Hang), f"{what}: {outcome.error}"
            assert not isinstance(outcome.error, SystemError), f"{what}: {outcome.error!r}"
        assert type(c.error) is type(pure.error), f"{what}: C {c!r}, pure {pure!r}"
        return outcomes

    def new_data(self) -> str:
        self.data_made += 1
        return f"d{self.data_made}"

    def made(self, outcomes: list[fz.Outcome], entry: Entry) -> None:
        """Record the watchers an add() returned on both sides under one new label."""
        if outcomes[0].raised:
            return
        label = len(self.entries)
        self.entries.append(entry)
        for side, outcome in zip(self.sides, outcomes, strict=True):
            side.watchers.append(outcome.result)
            side.labels[id(outcome.result)] = label

    def pick(self, index: int) -> int | None:
        return index % len(self.entries) if self.entries else None

    # -- add --------------------------------------------------------------------------------

    @rule(
        slot=st.integers(0, SLOTS - 1),
        events=st.sampled_from(STREAM_EVENTS),
        wrapped=st.booleans(),
    )
    def add_stream(self, slot: int, events: Event, wrapped: bool) -> None:
        """add() of a slot's socket (or a StreamPollHandle on it)."""
        data = self.new_data()

        def add(side: Side) -> Any:
            sock = side.locals[slot]
            return side.ctx.add(StreamPollHandle(sock) if wrapped else sock, events, data)

        outcomes = self.both(f"add(slot {slot}, {events!r})", add)
        self.made(outcomes, Entry("stream", slot, events, data))

    @rule(index=st.integers(0, NOTIFIERS - 1), oneshot=st.booleans())
    def add_notifier(self, index: int, oneshot: bool) -> None:
        """add() of a NotifyHandle."""
        events = Event.NOTIFY | ONESHOT if oneshot else Event.NOTIFY
        data = self.new_data()
        outcomes = self.both(
            f"add(notifier {index}, {events!r})",
            lambda side: side.ctx.add(side.notifiers[index], events, data),
        )
        self.made(outcomes, Entry("notify", index, events, data))

    @rule(zero=st.booleans(), oneshot=st.booleans())
    def add_timer(self, zero: bool, oneshot: bool) -> None:
        """add() of a new TimerHandle(0), due at once, or of one that never fires."""
        events = Event.TIMER | ONESHOT if oneshot else Event.TIMER
        data = self.new_data()
        target = len(self.sides[0].timers)

        def add(side: Side) -> Any:
            handle = TimerHandle(0 if zero else LONG)
            side.timers.append(handle)
            return side.ctx.add(handle, events, data)

        outcomes = self.both(f"add(TimerHandle({0 if zero else LONG}), {events!r})", add)
        self.made(outcomes, Entry("timer", target, events, data, zero=zero))

    # -- watchers ---------------------------------------------------------------------------

    @rule(index=st.integers(0, 40), events=st.sampled_from(ANY_EVENTS))
    def modify_events(self, index: int, events: Event) -> None:
        """modify_events(): re-arms a fired one-shot or timer; a wrong kind is a ValueError."""
        label = self.pick(index)
        if label is None:
            return
        outcomes = self.both(
            f"modify_events(w{label}, {events!r})",
            lambda side: side.watchers[label].modify_events(events),
        )
        if not outcomes[0].raised:
            entry = self.entries[label]
            entry.events = events
            entry.armed = True

    @rule(index=st.integers(0, 40))
    def modify_data(self, index: int) -> None:
        """modify_data(): the C ``data`` getter must hand back the new data."""
        label = self.pick(index)
        if label is None:
            return
        data = self.new_data()
        outcomes = self.both(
            f"modify_data(w{label})", lambda side: side.watchers[label].modify_data(data)
        )
        if not outcomes[0].raised:
            self.entries[label].data = data

    @rule(index=st.integers(0, 40))
    def remove(self, index: int) -> None:
        """remove(): a no-op for a retired watcher, InactiveWatcherError for a removed one."""
        label = self.pick(index)
        if label is None:
            return
        outcomes = self.both(f"remove(w{label})", lambda side: side.watchers[label].remove())
        if not outcomes[0].raised:
            self.entries[label].removed = True

    # -- streams and handles ----------------------------------------------------------------

    @rule(slot=st.integers(0, SLOTS - 1), size=st.sampled_from([1, 7, 300]))
    def send(self, slot: int, size: int) -> None:
        """Bytes for a slot's watched socket (through a dup, once it is closed and kept)."""
        s = self.slots[slot]
        if s.peer_shut or not (s.local_open or s.kept):
            return
        outcomes = self.both(
            f"send(slot {slot}, {size})", lambda side: side.peers[slot].send(b"x" * size)
        )
        if not outcomes[0].raised:
            assert outcomes[0].result == outcomes[1].result
            s.unread += outcomes[0].result

    @rule(slot=st.integers(0, SLOTS - 1))
    def drain(self, slot: int) -> None:
        """Read all that waits on a slot's watched socket."""
        s = self.slots[slot]
        if not s.local_open:
            return

        def drain(side: Side) -> int:
            got = 0
            while True:
                try:
                    chunk = side.locals[slot].recv(65536)
                except BlockingIOError:
                    return got
                if not chunk:
                    return got
                got += len(chunk)

        outcomes = self.both(f"drain(slot {slot})", drain)
        assert outcomes[0].result == outcomes[1].result == s.unread
        s.unread = 0

    @rule(slot=st.integers(0, SLOTS - 1), keep=st.booleans(), dice=st.integers(0, 2))
    def close_stream(self, slot: int, keep: bool, dice: int) -> None:
        """Close a watched socket without remove() (one draw in three), a dup keeping its
        file open or not."""
        s = self.slots[slot]
        if not s.local_open or dice:
            return

        def close(side: Side) -> None:
            sock = side.locals[slot]
            if keep:
                side.keepers.append(os.dup(sock.fileno()))
            sock.close()

        self.both(f"close(slot {slot}, keep={keep})", close)
        s.local_open = False
        s.kept = keep

    @rule(slot=st.integers(0, SLOTS - 1), how=st.sampled_from(["SHUT_WR", "SHUT_RDWR"]))
    def shutdown_peer(self, slot: int, how: str) -> None:
        """The peer shuts down: EOF (READ, READ_HANGUP, HANGUP for both ways) for the local."""
        s = self.slots[slot]
        if s.peer_shut:
            return
        self.both(
            f"shutdown(slot {slot}, {how})",
            lambda side: side.peers[slot].shutdown(getattr(socket, how)),
        )
        s.peer_shut = True

    @rule(index=st.integers(0, NOTIFIERS - 1), clear=st.booleans())
    def notify(self, index: int, clear: bool) -> None:
        """notify() or clear() a notify handle."""
        method = "clear" if clear else "notify"
        self.both(
            f"{method}(notifier {index})",
            lambda side: getattr(side.notifiers[index], method)(),
        )
        self.notified[index] = not clear

    # -- wait -------------------------------------------------------------------------------

    def surely_ready(self) -> bool:
        """Whether the next wait() must report something (then a blocking one returns)."""
        for entry in self.entries:
            if entry.removed:
                continue
            if entry.kind == "timer":
                if entry.zero and entry.armed:
                    return True
            elif entry.kind == "notify":
                if not entry.events & ONESHOT and self.notified[entry.target]:
                    return True
            else:
                s = self.slots[entry.target]
                if not s.local_open or entry.events & (ONESHOT | EDGE):
                    continue
                if entry.events & WRITE:
                    return True
                if entry.events & READ and (s.unread or s.peer_shut):
                    return True
        return False

    @rule(form=st.sampled_from(list(DIFF_WAITS)), k=st.integers(1, 3))
    def wait(self, form: str, k: int) -> None:
        """A wait in one of its forms, on both sides; then everything is compared."""
        if form in BLOCKING and not self.surely_ready():
            form = "wait(0.0)"  # nothing surely ready: a blocking wait would hang
        call = DIFF_WAITS[form]
        # Every form, not only the blocking ones: a C wait that loses its timeout or its
        # timer's cut would otherwise sleep out a LONG timer, past pytest-timeout's one alarm.
        with fz.hang_guard(5.0):
            outcomes = self.both(form.replace("k", str(k)), lambda side: call(side.ctx, k))
        in_order = list if self.ORDERED else sorted
        views: list[Any] = [
            ("raised", type(o.error)) if o.raised else in_order(side.label(w) for w in o.result)
            for side, o in zip(self.sides, outcomes, strict=True)
        ]
        assert views[0] == views[1], f"{form}: C {views[0]}, pure {views[1]}"
        if not outcomes[0].raised:
            triggered = [
                in_order((side.label(w), int(w.triggered_events)) for w in o.result)
                for side, o in zip(self.sides, outcomes, strict=True)
            ]
            assert triggered[0] == triggered[1], f"{form}: triggered_events differ"
            for label in views[0]:
                entry = self.entries[label]
                if entry.kind == "timer" or entry.events & ONESHOT:
                    entry.armed = False
        c_state, pure_state = (side.state() for side in self.sides)
        assert c_state == pure_state, f"after {form}: C {c_state}, pure {pure_state}"
        expected = [entry.data for entry in self.entries]
        assert [w.data for w in self.sides[0].watchers] == expected

    # Waits once more (Hypothesis picks rules evenly, and waits are what is compared).

    @rule(form=st.sampled_from(FAST_FORMS))
    def fast_wait(self, form: str) -> None:
        """A wait in one of the forms the fast path serves."""
        self.wait(form, 1)

    @rule(form=st.sampled_from(CUT_FORMS), k=st.integers(1, 2))
    def cut_wait(self, form: str, k: int) -> None:
        """A wait with a small ``max_events``: what it leaves out, the next wait must merge
        (and the fast path stays off until it has)."""
        self.wait(form, k)

    @precondition(lambda self: bool(self.entries))
    @rule(slot=st.integers(0, SLOTS - 1), form=st.sampled_from(["wait(0.0)", "wait(None)"]))
    def send_and_wait(self, slot: int, form: str) -> None:
        """Bytes, then a fast wait at once (the state an event loop is in most)."""
        self.send(slot, 1)
        self.wait(form, 1)


# More examples than steps: Hypothesis leaves some rules out of each run (swarm testing),
# so many short runs mix the rules better than a few long ones.
DIFFERENTIAL = settings(
    fz.FUZZ,
    max_examples=4 * fz.FUZZ.max_examples,
    stateful_step_count=min(fz.FUZZ.stateful_step_count, 40),
)


@needs_epoll
def test_c_and_pure_fast_paths_agree_step_by_step() -> None:
    """Random programs on a C and a pure EPOLL context give the same answers (see module doc)."""
    if not ACCELERATED:
        pytest.skip("no C fast path: iopoll runs pure Python here")
    run_state_machine_as_test(DifferentialMachine, settings=DIFFERENTIAL)


# == Part 2: targeted cases =====================================================================

# The forms of wait() the fast path serves (the blocking ones where something is ready).
FAST_WAIT_CALLS: dict[str, Wait] = {
    "wait(0)": lambda ctx: ctx.wait(0),
    "wait(0.0)": lambda ctx: ctx.wait(0.0),
    "wait(0,0)": lambda ctx: ctx.wait(0, 0),
    "wait(0.05)": lambda ctx: ctx.wait(0.05),
    "wait(None)": lambda ctx: ctx.wait(None),
}
FAST_WAITS = [pytest.param(call, id=name) for name, call in FAST_WAIT_CALLS.items()]


def _counting(module: ModuleType) -> Any:
    """A subclass of ``module.Context`` that records each call of the general path (``_wait``)
    and of the fast path's tail (``_finish_wait``); its ``wait`` is the module's own (C for
    iopoll when built)."""

    class Counting(module.Context):  # type: ignore[name-defined,misc]
        __slots__ = ()
        calls: ClassVar[list[str]] = []

        def _wait(self, *args: Any) -> Any:
            self.calls.append("_wait")
            return super()._wait(*args)

        def _finish_wait(self, *args: Any) -> Any:
            self.calls.append("_finish_wait")
            return super()._finish_wait(*args)

    return Counting


def _both_agree(scenario: Callable[[ModuleType], list[Any]]) -> None:
    """With the C code in use: ``scenario`` gives the same transcript on both modules."""
    if not ACCELERATED:
        pytest.skip("no C fast path: iopoll runs pure Python here")
    assert scenario(iopoll) == scenario(pure_iopoll)


# -- what a subclass's _wait() returns ----------------------------------------------------------


@needs_fast_backend
@pytest.mark.parametrize("module", MODULES)
def test_wait_returns_what_a_subclass_wait_returns(module: ModuleType, pairs: MakePair) -> None:
    """wait() hands the general path's result back as it is, even None (the C path once
    took a None for its own "the watchers are in my array" and returned [])."""
    _, b = pairs()

    class Odd(module.Context):  # type: ignore[name-defined,misc]
        def _wait(self, *args: Any) -> None:
            return None

    with Odd(FAST_BACKEND) as ctx:
        ctx.add(b, READ, "reader")
        assert ctx.wait(0, 0, 1) is None  # max_events: the general path


# -- one-shot -----------------------------------------------------------------------------------


def _one_shot(module: ModuleType, fast_wait: Wait, make: MakePair) -> list[Any]:
    a, b = make()
    c, _ = make()
    transcript: list[Any] = []
    with module.Context(FAST_BACKEND) as ctx:
        once = ctx.add(b, READ | ONESHOT, "once")
        always = ctx.add(c, WRITE, "always")  # a plain report next to it on every wait
        a.send(b"x")
        for _ in range(2):
            first = fast_wait(ctx)
            assert sorted(_labels(first)) == [("always", int(WRITE)), ("once", int(READ))]
            transcript.append(_labels(first))
            # Disarmed: not again, though its byte is still unread, on any fast form.
            for again in (fast_wait(ctx), ctx.wait(0.0), ctx.wait(0)):
                assert again == [always]
            assert once.is_active() and len(ctx) == 2
            assert ctx._fast_poll is not None
            once.modify_events(READ | ONESHOT)  # re-armed: reported at once again
        once.modify_events(WRITE | ONESHOT)
        assert [w.data for w in fast_wait(ctx) if w is once] == ["once"]
        assert once.triggered_events == WRITE
        assert ctx.wait(0.0) == [always]
    return transcript


@needs_fast_backend
@pytest.mark.parametrize("fast_wait", FAST_WAITS)
@pytest.mark.parametrize("module", MODULES)
def test_a_one_shot_is_reported_once_and_again_when_re_armed(
    module: ModuleType, fast_wait: Wait, pairs: MakePair
) -> None:
    _one_shot(module, fast_wait, pairs)


@needs_fast_backend
@pytest.mark.parametrize("fast_wait", FAST_WAITS)
def test_one_shot_transcripts_agree(fast_wait: Wait, pairs: MakePair) -> None:
    _both_agree(lambda module: _one_shot(module, fast_wait, pairs))


# -- max_events leftovers -----------------------------------------------------------------------

LEFTOVER_EVENTS = [
    pytest.param(READ, id="level"),
    pytest.param(READ | ONESHOT, id="oneshot"),
    pytest.param(READ | EDGE, id="edge"),
]


def _leftovers(module: ModuleType, events: Event, fast_wait: Wait, make: MakePair) -> list[Any]:
    context_type = _counting(module)
    calls: list[str] = context_type.calls
    transcript: list[Any] = []
    with context_type(FAST_BACKEND) as ctx:
        readers = []
        for i in range(3):
            a, b = make()
            readers.append(ctx.add(b, events, f"r{i}"))
            a.send(b"x")
        c, _ = make()
        always = ctx.add(c, WRITE, "always")
        first = ctx.wait(0, 0, 2)
        assert len(first) == 2
        transcript.append(_labels(first))
        left_out = [w for w in (*readers, always) if w not in first]
        assert ctx._leftovers and ctx._fast_poll is None
        # Leftovers exist: the fast path must not run; they come out first.
        calls.clear()
        second = fast_wait(ctx)
        transcript.append(_labels(second))
        assert calls == ["_wait"], calls
        assert set(second[: len(left_out)]) == set(left_out)
        if events == READ:
            assert len(second) == 4
        else:  # a one-shot or an edge reported in ``first`` is not again
            assert set(second) == {*left_out, always}
        # Merged: no leftovers, the fast path is back and serves the next wait alone.
        assert not ctx._leftovers and ctx._fast_poll is not None
        calls.clear()
        third = fast_wait(ctx)
        transcript.append(_labels(third))
        if events == READ:
            assert calls == [] and len(third) == 4
        else:
            assert third == [always]
            assert calls == []  # one plain report: neither the general path nor _collect
        assert len(ctx) == 4
    return transcript


@needs_fast_backend
@pytest.mark.parametrize("fast_wait", FAST_WAITS)
@pytest.mark.parametrize("events", LEFTOVER_EVENTS)
@pytest.mark.parametrize("module", MODULES)
def test_leftovers_keep_the_fast_path_off_until_merged(
    module: ModuleType, events: Event, fast_wait: Wait, pairs: MakePair
) -> None:
    _leftovers(module, events, fast_wait, pairs)


@needs_fast_backend
@pytest.mark.parametrize("events", LEFTOVER_EVENTS)
def test_leftover_transcripts_agree(events: Event, pairs: MakePair) -> None:
    _both_agree(lambda module: _leftovers(module, events, lambda ctx: ctx.wait(0.0), pairs))


# -- a stream closed without remove(), its file kept open by a dup ------------------------------

CLOSED_EVENTS = [
    pytest.param(READ, id="level"),
    pytest.param(READ | EDGE, id="edge"),
    pytest.param(READ | ONESHOT, id="oneshot"),
]


def _closed_kept(
    module: ModuleType, events: Event, fast_wait: Wait, make: MakePair, keepers: list[int]
) -> list[Any]:
    a, b = make()
    c, _ = make()
    d, e = make()
    transcript: list[Any] = []
    with module.Context(FAST_BACKEND) as ctx:
        gone = ctx.add(b, events, "gone")
        stays = ctx.add(c, WRITE, "stays")
        later = ctx.add(e, READ, "later")
        a.send(b"before")
        keepers.append(os.dup(b.fileno()))
        b.close()  # the dup keeps the file, and its epoll entry, alive
        a.send(b"after")  # readable through the dup: the stale entry reports
        for _ in range(3):
            result = fast_wait(ctx)
            transcript.append(_labels(result))
            assert result == [stays]
            a.send(b"more")  # a new edge on the dup's file, every round
        assert not gone.is_active() and len(ctx) == 2
        d.send(b"x")
        result = fast_wait(ctx)
        transcript.append(_labels(result))
        assert sorted(w.data for w in result) == ["later", "stays"]
        assert later.triggered_events == READ
        stays.remove()
        e.recv(10)
        # Nothing is ready, the stale entry is gone: a timed wait sleeps it out.
        started = time.monotonic()
        assert ctx.wait(0.05) == []
        assert time.monotonic() - started >= 0.045
        assert ctx._fast_poll is not None
    return transcript


@needs_fast_backend
@pytest.mark.parametrize("fast_wait", FAST_WAITS)
@pytest.mark.parametrize("events", CLOSED_EVENTS)
@pytest.mark.parametrize("module", MODULES)
def test_a_stream_closed_behind_a_dup_is_never_reported(
    module: ModuleType, events: Event, fast_wait: Wait, pairs: MakePair, keepers: list[int]
) -> None:
    _closed_kept(module, events, fast_wait, pairs, keepers)


@needs_fast_backend
@pytest.mark.parametrize("events", CLOSED_EVENTS)
def test_closed_stream_transcripts_agree(
    events: Event, pairs: MakePair, keepers: list[int]
) -> None:
    _both_agree(lambda module: _closed_kept(module, events, lambda c: c.wait(0.0), pairs, keepers))


# -- POLLNVAL: an fd closed behind the handle's back, on POLL -----------------------------------


def _pollnval(module: ModuleType, form: str, fast_wait: Wait, make: MakePair) -> list[Any]:
    if not Backend.POLL.is_available():
        pytest.skip("needs POLL")
    _, b = make()
    c, _ = make()
    fd = os.dup(b.fileno())  # the fd closed behind the handle's back (b stays open)
    sock = socket.socket(fileno=fd) if form == "socket" else None
    handle: Any = {"int": fd, "socket": sock, "StreamPollHandle": StreamPollHandle(fd)}[form]
    transcript: list[Any] = []
    closed = False
    try:
        with module.Context(Backend.POLL) as ctx:
            gone = ctx.add(handle, READ, "gone")
            stays = ctx.add(c, WRITE, "stays")
            os.close(fd)  # poll() answers POLLNVAL for it from now on
            closed = True
            first = fast_wait(ctx)
            transcript.append(_labels(first))
            assert sorted(_labels(first)) == [("gone", int(Event.ERROR)), ("stays", int(WRITE))]
            for again in (fast_wait(ctx), ctx.wait(0.0), ctx.wait(0), ctx.wait(0, 0, 4)):
                transcript.append(_labels(again))
                assert again == [stays]  # reported once, then never
            assert not gone.is_active() and len(ctx) == 1
            assert ctx._fast_poll is not None
    finally:
        if sock is not None:
            sock.detach()  # the socket must not close the fd (again, or for the first time)
        if not closed:
            os.close(fd)
    return transcript


POLLNVAL_FORMS = ["int", "socket", "StreamPollHandle"]


@pytest.mark.parametrize("fast_wait", FAST_WAITS)
@pytest.mark.parametrize("form", POLLNVAL_FORMS)
@pytest.mark.parametrize("module", MODULES)
def test_pollnval_is_reported_once_with_error(
    module: ModuleType, form: str, fast_wait: Wait, pairs: MakePair
) -> None:
    _pollnval(module, form, fast_wait, pairs)


@pytest.mark.parametrize("form", POLLNVAL_FORMS)
def test_pollnval_transcripts_agree(form: str, pairs: MakePair) -> None:
    _both_agree(lambda module: _pollnval(module, form, lambda c: c.wait(0.0), pairs))


# -- EINTR: SIGALRM during a blocking wait ------------------------------------------------------

SLACK = 0.005


class Interrupts:
    """A SIGALRM handler that returns: it counts its calls, notes whether each came while
    ``wait()`` was running (so from its EINTR retry), and stops the timer after ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.waiting = False
        self.calls: list[bool] = []

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.calls.append(self.waiting)
        if len(self.calls) >= self.limit:
            signal.setitimer(signal.ITIMER_REAL, 0)


def _with_long_timer(ctx: Ctx) -> None:
    ctx.add(TimerHandle(LONG), Event.TIMER, "long timer")


# (wait, whether to arm a long timer first: the fast path then cuts its wait at it)
UNTIL_DATA: list[Any] = [
    pytest.param(lambda ctx: ctx.wait(None), False, id="wait(None)"),
    pytest.param(lambda ctx: ctx.wait(None), True, id="wait(None)+timer"),
    pytest.param(lambda ctx: ctx.wait(5.0), False, id="wait(5.0)"),
    pytest.param(lambda ctx: ctx.wait(5), False, id="wait(5)"),
    pytest.param(lambda ctx: ctx.wait(timedelta(seconds=5)), False, id="wait(timedelta)"),
    pytest.param(lambda ctx: ctx.wait(5, 0, 3), False, id="wait(5,0,3)"),
]


@needs_sigalrm
@needs_fast_backend
@pytest.mark.parametrize(("blocking_wait", "timer"), UNTIL_DATA)
@pytest.mark.parametrize("module", MODULES)
def test_eintr_with_a_handler_that_returns_waits_on_for_data(
    module: ModuleType, blocking_wait: Wait, timer: bool, pairs: MakePair
) -> None:
    """PEP 475: the handler runs, the wait goes on, and returns when a thread's data comes."""
    a, b = pairs()
    delay = 0.15
    interrupts = Interrupts(limit=30)
    ready = threading.Event()
    sent: list[float] = []

    def send_later() -> None:
        # Every SIGALRM must interrupt the main thread's epoll_wait(2), not this one.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        ready.set()
        time.sleep(delay)
        sent.append(time.monotonic())
        a.send(b"x")

    with module.Context(FAST_BACKEND) as ctx:
        reader = ctx.add(b, READ, "reader")
        if timer:
            _with_long_timer(ctx)
        thread = threading.Thread(target=send_later, daemon=True)
        thread.start()
        ready.wait(5)
        started = time.monotonic()
        with alarm(interrupts, 0.02, 0.02):
            interrupts.waiting = True
            try:
                result = blocking_wait(ctx)
            finally:
                interrupts.waiting = False
        finished = time.monotonic()
        thread.join(5)
        assert result == [reader] and reader.triggered_events == READ
        # Returned once the data came, not at an interruption.  (Measured from the thread's
        # own clock reading: on a loaded machine this thread may resume well after the
        # other's sleep began, so `finished - started` can be shorter than `delay`.)
        assert finished >= sent[0] and finished - started >= 3 * 0.02
        assert interrupts.calls.count(True) >= 3, interrupts.calls
        assert ctx.wait(0.0) == [reader]  # the byte is still there; nothing else changed


UNTIL_TIMEOUT: list[Any] = [
    pytest.param(lambda ctx: ctx.wait(0.2), False, id="wait(0.2)"),
    pytest.param(lambda ctx: ctx.wait(0.2), True, id="wait(0.2)+timer"),
    pytest.param(lambda ctx: ctx.wait(timedelta(seconds=0.2)), False, id="wait(timedelta)"),
    pytest.param(lambda ctx: ctx.wait(0, 200_000), False, id="wait(0,200000)"),
    pytest.param(lambda ctx: ctx.wait(0.2, 0, 1), False, id="wait(0.2,0,1)"),
]


@needs_sigalrm
@needs_fast_backend
@pytest.mark.parametrize(("timed_wait", "timer"), UNTIL_TIMEOUT)
@pytest.mark.parametrize("module", MODULES)
def test_eintr_with_a_handler_that_returns_waits_out_the_timeout(
    module: ModuleType, timed_wait: Wait, timer: bool, pairs: MakePair
) -> None:
    """PEP 475: each retry waits for what is left, so the wait ends at the timeout: not
    early, and not restarted from the full timeout by each signal."""
    _, b = pairs()
    timeout = 0.2
    # Signals for up to 5 s: a retry that restarted the full timeout on each would not end
    # before them (over 5 s), while one that waits for what is left ends at 0.2 s; the bound
    # below sits between the two with room for a loaded machine.
    interrupts = Interrupts(limit=250)
    with module.Context(FAST_BACKEND) as ctx:
        ctx.add(b, READ, "idle")
        if timer:
            _with_long_timer(ctx)
        started = time.monotonic()
        with alarm(interrupts, 0.02, 0.02):
            interrupts.waiting = True
            try:
                result = timed_wait(ctx)
            finally:
                interrupts.waiting = False
        elapsed = time.monotonic() - started
        assert result == []
        assert elapsed >= timeout - SLACK, elapsed
        assert elapsed < 3.0, elapsed  # a restart per signal would be over 5 s
        assert interrupts.calls.count(True) >= 3, interrupts.calls


class FromTheHandler(Exception):
    """What the raising SIGALRM handler raises."""


class StillBlocked(BaseException):
    """A second SIGALRM: the first one's exception did not end the wait."""


UNTIL_RAISED = UNTIL_DATA  # the same blocking waits, ended by the handler's exception


@needs_sigalrm
@needs_fast_backend
@pytest.mark.parametrize("error", [FromTheHandler, TimeoutError], ids=["Exception", "OSError"])
@pytest.mark.parametrize(("blocking_wait", "timer"), UNTIL_RAISED)
@pytest.mark.parametrize("module", MODULES)
def test_eintr_with_a_handler_that_raises(
    module: ModuleType,
    blocking_wait: Wait,
    timer: bool,
    error: type[Exception],
    pairs: MakePair,
) -> None:
    """The handler's exception leaves wait() as it is; the context stays usable, and what
    became ready meanwhile (the handler sends to each stream) is reported, once."""
    made = [pairs() for _ in range(3)]
    calls: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        calls.append(signum)
        if len(calls) > 1:
            raise StillBlocked("the first exception did not end wait()")
        for peer, _ in made:
            peer.send(b"x")
        raise error("from the handler")

    with module.Context(FAST_BACKEND) as ctx:
        level = ctx.add(made[0][1], READ, "level")
        edge = ctx.add(made[1][1], READ | EDGE, "edge")
        once = ctx.add(made[2][1], READ | ONESHOT, "once")
        if timer:
            _with_long_timer(ctx)
        started = time.monotonic()
        with alarm(handler, 0.05, 1.0), pytest.raises(error, match="from the handler") as caught:
            blocking_wait(ctx)
        assert type(caught.value) is error
        assert time.monotonic() - started < 1.0
        assert calls == [signal.SIGALRM]
        assert len(ctx) == (4 if timer else 3)
        assert all(w.is_active() for w in (level, edge, once))
        assert ctx._fast_poll is not None
        assert sorted(_labels(ctx.wait(0))) == [
            ("edge", int(READ)),
            ("level", int(READ)),
            ("once", int(READ)),
        ]
        assert ctx.wait(0) == [level]  # the edge and the one-shot once, the level again
        assert ctx.wait(0.0) == [level]


def _os_object_fd(ctx: Ctx) -> int:
    """The fd of the OS object ``ctx`` waits on (its epoll or kqueue fd)."""
    kqueue_fd = ctx._usable.native_kqueue
    return ctx._usable.native_fd if kqueue_fd is None else kqueue_fd


def _close_and_reopen_in_handler(module: ModuleType, make: MakePair) -> tuple[bool, bool]:
    _, b = make()
    c, d = make()
    ctx = module.Context(FAST_BACKEND)
    ctx.add(b, READ, "idle")  # nothing ready: wait() blocks
    others: list[Ctx] = []
    number = _os_object_fd(ctx)
    assert number >= 0

    def handler(signum: int, frame: FrameType | None) -> None:
        ctx.close()
        # The new OS object takes the number ctx's had (the lowest free one, once any
        # lower free numbers are held for a moment).
        held = []
        while (fd := os.open(os.devnull, os.O_RDONLY)) < number:
            held.append(fd)
        os.close(fd)
        other = module.Context(FAST_BACKEND)
        for fd in held:
            os.close(fd)
        others.append(other)
        assert _os_object_fd(other) == number
        other.add(d, READ | ONESHOT, "other's one-shot")
        c.send(b"x")  # a report due to ``other``, and only to it

    try:
        with alarm(handler, 0.05):
            try:
                ctx.wait(1.0)
            except iopoll.PollError:
                refused = True
            else:
                refused = False
        (other,) = others
        with other:
            kept = [w.data for w in other.wait(0)] == ["other's one-shot"]
    finally:
        ctx.close()
    return refused, kept


# This found a C bug, now fixed: the EINTR retry called epoll_wait(2) again on the fd number
# read before the handler ran, which a new epoll object had taken; it now asks the epoll
# object whether a handler closed it, as CPython's own retry does.
CLOSING_MODULES = [
    pytest.param(iopoll, id="iopoll"),
    pytest.param(pure_iopoll, id="pure_iopoll"),
]


@needs_sigalrm
@needs_fast_backend
@pytest.mark.parametrize("module", CLOSING_MODULES)
def test_eintr_with_a_handler_that_closes_the_context_and_opens_another(
    module: ModuleType, pairs: MakePair
) -> None:
    """A handler that closes the Context mid-wait and returns: the wait must end with a
    PollError, and must not wait on (and take reports from) whatever epoll object gets the
    freed fd number next."""
    if FAST_BACKEND is Backend.KQUEUE:
        # A new epoll object takes the lowest free fd; libkqueue's kqueue() opens fds of its
        # own around the one it returns, so the freed number is not reliably the new one's.
        pytest.skip("over libkqueue a new kqueue need not get the freed fd number; "
                    "kqueue_c_wait_cases.py holds the close itself")
    assert _close_and_reopen_in_handler(module, pairs) == (True, True)


def _rebuild_in_handler(module: ModuleType, blocking_wait: Wait, make: MakePair) -> Any:
    """A SIGALRM handler adds a writable socket that takes the number of a watched socket
    closed behind a ``dup``: the Context replaces its epoll object, closing the one the
    blocking wait is in.  The wait goes on, on the new one (PEP 475), and finds the socket."""
    idle, _idle_peer = make()
    gone, _gone_peer = make()
    kept: list[socket.socket] = []
    with module.Context(Backend.EPOLL) as ctx:
        ctx.add(idle, READ, "idle")
        ctx.add(gone, READ, "gone")
        held = os.dup(gone.fileno())  # the file stays open: a stale epoll entry
        number = gone.fileno()
        gone.close()
        try:

            def handler(signum: int, frame: FrameType | None) -> None:
                signal.setitimer(signal.ITIMER_REAL, 0)
                fresh, peer = make()
                kept.extend((fresh, peer))
                assert fresh.fileno() == number  # the lowest free number
                ctx.add(fresh, WRITE, "fresh")

            started = time.monotonic()
            with alarm(handler, 0.05):
                result = _labels(blocking_wait(ctx))
            return result, time.monotonic() - started < 2.0
        finally:
            os.close(held)


@needs_sigalrm
@pytest.mark.skipif(not Backend.EPOLL.is_available(), reason="needs EPOLL")
@pytest.mark.parametrize(
    "blocking_wait",
    [
        pytest.param(lambda ctx: ctx.wait(None), id="wait(None)"),
        pytest.param(lambda ctx: ctx.wait(5.0), id="wait(5.0)"),
        pytest.param(lambda ctx: ctx.wait(5, 0, 3), id="wait(5,0,3)"),
    ],
)
@pytest.mark.parametrize("module", MODULES)
def test_eintr_with_a_handler_that_makes_the_context_rebuild(
    module: ModuleType, blocking_wait: Wait, pairs: MakePair
) -> None:
    """It raised EBADF (FailedPollWaitError) on both paths: the retry waited on the closed
    epoll object."""
    assert _rebuild_in_handler(module, blocking_wait, pairs) == ([("fresh", int(WRITE))], True)


NESTING_BACKENDS = [
    pytest.param(backend, id=backend.name)
    for backend in (Backend.EPOLL, Backend.POLL, Backend.SELECT)
    if backend.is_available()
]


def _nested_in_handler(module: ModuleType, backend: Backend, make: MakePair) -> list[Any]:
    """A SIGALRM handler that sends a byte and calls wait() on the Context whose blocking
    wait it interrupted; then the outer wait goes on (PEP 475) and finds the byte."""
    a, b = make()
    transcript: list[Any] = []
    with module.Context(backend) as ctx:
        ctx.add(b, READ, "reader")
        once = ctx.add(a, WRITE | ONESHOT, "once")
        assert ctx.wait(0.0) == [once]  # the one-shot fires once, and is disarmed

        def handler(signum: int, frame: FrameType | None) -> None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            a.send(b"x")
            transcript.append(("nested", _labels(ctx.wait(0.0))))
            once.modify(WRITE | ONESHOT, "once")  # armed again, by the handler

        with alarm(handler, 0.05):
            outer = ctx.wait(5.0)
        transcript.append(("outer", _labels(outer)))
        transcript.append(("after", _labels(ctx.wait(0.0))))
    return transcript


@needs_sigalrm
@pytest.mark.parametrize("backend", NESTING_BACKENDS)
@pytest.mark.parametrize("module", MODULES)
def test_a_wait_nested_in_a_signal_handler(
    module: ModuleType, backend: Backend, pairs: MakePair
) -> None:
    """A handler may wait on the Context whose blocking wait it interrupted, on every backend
    and on both paths.  CPython's select.poll refuses a poll() while one of its own runs, so
    POLL's Python path used to raise RuntimeError there, where its C path (polling the array
    itself) and EPOLL went on: the nested wait now polls a poll object of its own."""
    reader, written = ("reader", int(READ)), ("once", int(WRITE))
    # The one-shot the handler re-armed: epoll's retried call sees it (the kernel's set
    # changed), and it is then disarmed; poll() and select() are retried on the set they
    # were first given, so it is the next wait's.
    if backend is Backend.EPOLL:
        outer, after = [reader, written], [reader]
    else:
        outer, after = [reader], [reader, written]
    assert _nested_in_handler(module, backend, pairs) == [
        ("nested", [reader]),
        ("outer", outer),
        ("after", after),
    ]


@needs_sigalrm
@pytest.mark.parametrize("backend", NESTING_BACKENDS)
@pytest.mark.parametrize("module", MODULES)
def test_a_handlers_runtime_error_leaves_the_wait(
    module: ModuleType, backend: Backend, pairs: MakePair
) -> None:
    """A RuntimeError from a signal handler is the handler's, not the poll object's refusal
    of a nested poll(): it leaves wait() at once, as any handler's exception does."""
    _, b = pairs()

    def handler(signum: int, frame: FrameType | None) -> None:
        raise RuntimeError("from the handler")

    with module.Context(backend) as ctx:
        ctx.add(b, READ, "reader")
        started = time.monotonic()
        with alarm(handler, 0.05, 1.0), pytest.raises(RuntimeError, match="from the handler"):
            ctx.wait(5.0)
        assert time.monotonic() - started < 1.0


# -- a handle whose fileno() starts to raise after add() ----------------------------------------


def _raising_fileno(module: ModuleType, error: type[Exception], make: MakePair) -> list[Any]:
    a, _ = make()
    c, _ = make()
    transcript: list[Any] = []
    with module.Context(FAST_BACKEND) as ctx:
        # fileno() answers add(), then raises ``error`` when the fast path probes it.
        flaky = ctx.add(fz.ScriptedHandle([a.fileno(), error]), WRITE, "flaky")
        ctx.add(c, WRITE, "plain")
        for _ in range(2):
            try:
                transcript.append(sorted(w.data for w in ctx.wait(0.0)))
            except Exception as exc:
                transcript.append(type(exc).__name__)
        transcript += [flaky.is_active(), len(ctx)]
    return transcript


@needs_fast_backend
@pytest.mark.parametrize(
    "error",
    [
        # KeyError found a difference, now fixed: the Python fast path's except clause for
        # its dict lookup also caught a KeyError from fileno(), and C let it out.  Every
        # path now takes any Exception from fileno() for a closed stream.
        KeyError,
        LookupError,
        RuntimeError,
        OSError,
        ValueError,
    ],
)
def test_a_fileno_that_starts_raising_is_handled_alike(
    error: type[Exception], pairs: MakePair
) -> None:
    _both_agree(lambda module: _raising_fileno(module, error, pairs))


# -- more reports than the C fast path's stack array (256) --------------------------------------

MANY = 320  # watchers: their reports go to the Context's _native_buffer, not the stack


def _many(module: ModuleType, backend: Backend, make: MakePair) -> list[Any]:
    kinds = [WRITE, READ, READ | ONESHOT]
    if backend.supports_edge_triggering():
        kinds.append(READ | EDGE)
    transcript: list[Any] = []
    with module.Context(backend) as ctx:
        peers, watchers = [], []
        for i in range(MANY):
            peer, sock = make()
            peers.append(peer)
            watchers.append(ctx.add(sock, kinds[i % len(kinds)], f"w{i}"))
        kind = [kinds[i % len(kinds)] for i in range(MANY)]
        sent = [i for i in range(MANY) if kind[i] != WRITE and i % 5]
        for i in sent:
            peers[i].send(b"x")
        ready = {f"w{i}" for i in range(MANY) if kind[i] == WRITE or i in sent}
        level = {f"w{i}" for i in range(MANY) if kind[i] in (WRITE, READ) and f"w{i}" in ready}
        assert len(ready) > 256  # the C fast path needs more than its stack array for these

        def check(result: list[Any], expected: set[str]) -> None:
            transcript.append(_labels(result))
            assert len(result) == len(expected) and {w.data for w in result} == expected

        check(ctx.wait(0.0), ready)
        check(ctx.wait(None), level)  # the one-shots and the edges were reported once
        for i in sent:
            if kind[i] & ONESHOT:
                watchers[i].modify_events(kind[i])  # re-armed
            elif kind[i] & EDGE:
                peers[i].send(b"y")  # a new edge
        check(ctx.wait(0.01), ready)
        check(ctx.wait(0), level)
        check(ctx.wait(0, 0, MANY), level)  # max_events: the general path
        assert len(ctx) == MANY
    return transcript


NATIVE_BACKENDS = [
    pytest.param(Backend.EPOLL, marks=needs_epoll, id="EPOLL"),
    pytest.param(Backend.POLL, id="POLL"),
    # Where KQUEUE runs: on BSD and macOS, and over libkqueue (tests/libkqueue_session.py).
    *([pytest.param(Backend.KQUEUE, id="KQUEUE")] if Backend.KQUEUE.is_available() else []),
]


class _NestingHandle(fz.SocketHandle):
    """A socket whose first probe in a wait() (after ``armed``) makes more streams readable
    (``wake``) and waits on the same context: the nested call's reports are not the outer
    one's, and it must not write them over the outer one's array."""

    __slots__ = ("ctx", "wake", "armed", "nested")

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock)
        self.ctx: Ctx = None
        self.wake: list[socket.socket] = []
        self.armed = False
        self.nested: list[Any] = []

    def fileno(self) -> int:
        if self.armed:
            self.armed = False
            for peer in self.wake:
                peer.send(b"x")
            self.nested.append([w.data for w in self.ctx.wait(0)])
        return super().fileno()


def _nested(module: ModuleType, backend: Backend, make: MakePair) -> list[Any]:
    # The nested call's reports must differ from the outer one's at the places the outer
    # one has yet to read: on EPOLL the writers are edge-triggered, so that the nested call
    # reports the nesting watcher and the readers alone (modify_events() makes a new edge);
    # elsewhere they are level, and the readers come in among them (POLL reports in the
    # order of registration, KQUEUE in the order the fds became ready).
    edge = backend is Backend.EPOLL
    with module.Context(backend) as ctx:
        readers, peers = [], []
        for i in range(40):
            peer, sock = make()
            peers.append(peer)
            readers.append(f"r{i}")
            ctx.add(sock, READ, f"r{i}")
        nesting = _NestingHandle(make()[1])
        nesting.ctx = ctx
        nesting.wake = peers
        ctx.add(nesting, WRITE, "nesting")
        writers = {"nesting", *range(MANY)}
        kind = WRITE | EDGE if edge else WRITE
        added = [ctx.add(make()[1], kind, i) for i in range(MANY)]
        assert len(ctx.wait(0)) == len(writers)  # now the Context holds the array
        for watcher in added:
            watcher.modify_events(kind)  # a new edge for each writer
        nesting.armed = True
        result = ctx.wait(0)  # what was ready before the probe: the writers
        (inner,) = nesting.nested  # and what was ready in it: the readers too
        assert len(result) == len(writers) and {w.data for w in result} == writers
        expected = {"nesting", *readers} if edge else writers | set(readers)
        assert len(inner) == len(expected) and set(inner) == expected
        return [_labels(result), inner]


# More reports than the stack array; a wait nested in a probe while the array is in use.
BEYOND_THE_STACK = [
    pytest.param(_many, id="many"),
    pytest.param(_nested, id="nested"),
]


@pytest.mark.parametrize("scenario", BEYOND_THE_STACK)
@pytest.mark.parametrize("backend", NATIVE_BACKENDS)
@pytest.mark.parametrize("module", MODULES)
def test_reports_beyond_the_stack_array(
    scenario: Callable[[ModuleType, Backend, MakePair], list[Any]],
    module: ModuleType,
    backend: Backend,
    pairs: MakePair,
) -> None:
    scenario(module, backend, pairs)


@pytest.mark.parametrize("scenario", BEYOND_THE_STACK)
@pytest.mark.parametrize("backend", NATIVE_BACKENDS)
def test_beyond_the_stack_transcripts_agree(
    scenario: Callable[[ModuleType, Backend, MakePair], list[Any]],
    backend: Backend,
    pairs: MakePair,
) -> None:
    _both_agree(lambda module: scenario(module, backend, pairs))


@needs_speedups_in_use
@pytest.mark.parametrize("backend", NATIVE_BACKENDS)
def test_the_report_array_is_kept_for_the_next_wait_and_dropped_by_close(
    backend: Backend, pairs: MakePair
) -> None:
    ctx = iopoll.Context(backend)
    for _ in range(MANY):
        ctx.add(pairs()[1], WRITE)
    assert ctx._native_buffer is None  # nothing waited yet
    assert len(ctx.wait(0)) == MANY
    kept = ctx._native_buffer
    assert isinstance(kept, bytearray) and len(kept) >= MANY * 8
    assert len(ctx.wait(0)) == MANY
    assert ctx._native_buffer is kept  # the same array, not one per call
    ctx.close()
    assert ctx._native_buffer is None


class _LookingHandle(fz.SocketHandle):
    """A socket whose probe looks, through the garbage collector, for a list of ``size``
    that holds ``first``, a watcher probed before it in the same wait(): the result list
    the C wait fills, which Python code run by a probe must not reach (and append to)."""

    __slots__ = ("first", "size", "not_mine", "seen")

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock)
        self.first: Any = None
        self.size = 0
        self.not_mine: Any = None  # the Context's own list by fd
        self.seen: list[int] = []

    def fileno(self) -> int:
        if self.first is not None:
            lists = [r for r in gc.get_referrers(self.first) if type(r) is list]
            self.seen.append(
                sum(1 for r in lists if len(r) == self.size and r is not self.not_mine)
            )
        return super().fileno()


@needs_speedups_in_use
@pytest.mark.parametrize("backend", NATIVE_BACKENDS)
@pytest.mark.parametrize("others", [0, MANY], ids=["on the stack", "beyond the stack array"])
def test_a_probe_cannot_reach_the_result_list_while_it_is_filled(
    backend: Backend, others: int, pairs: MakePair
) -> None:
    with iopoll.Context(backend) as ctx:
        first = ctx.add(pairs()[1], WRITE, "first")
        for i in range(others):
            ctx.add(pairs()[1], WRITE, i)
        looking = _LookingHandle(pairs()[1])
        ctx.add(looking, WRITE, "looking")
        looking.first, looking.size, looking.not_mine = first, others + 2, ctx._by_fd
        result = ctx.wait(0)
        assert len(result) == others + 2 and result[0] is first  # probed before `looking`
        assert looking.seen == [0]  # no list of the result's size held `first` yet


# -- fork ---------------------------------------------------------------------------------------

CHILD_CALLS: dict[str, Callable[[Ctx, Any, socket.socket], Any]] = {
    "wait()": lambda ctx, w, s: ctx.wait(),
    "wait(None)": lambda ctx, w, s: ctx.wait(None),
    "wait(0)": lambda ctx, w, s: ctx.wait(0),
    "wait(0.0)": lambda ctx, w, s: ctx.wait(0.0),
    "wait(0, 0)": lambda ctx, w, s: ctx.wait(0, 0),
    "wait(0.01)": lambda ctx, w, s: ctx.wait(0.01),
    "wait(timeout=0, max_events=1)": lambda ctx, w, s: ctx.wait(timeout=0, max_events=1),
    "wait(timedelta(0))": lambda ctx, w, s: ctx.wait(timedelta(0)),
    "add(stream)": lambda ctx, w, s: ctx.add(s, READ),
    "add(TimerHandle)": lambda ctx, w, s: ctx.add(TimerHandle(0), Event.TIMER),
    "add(NotifyHandle)": lambda ctx, w, s: ctx.add(NotifyHandle(), Event.NOTIFY),
    "modify_events": lambda ctx, w, s: w.modify_events(READ),
    "modify_data": lambda ctx, w, s: w.modify_data("child"),
    "remove": lambda ctx, w, s: w.remove(),
}


def _expected_in_child(name: str) -> list[str]:
    if name.startswith("wait"):
        error = "FailedPollWaitError"
    elif name.startswith("add"):
        error = "FailedHandleAddError"
    else:
        error = "FailedWatcherModificationError"
    return [error, ErrorCode.PERMISSION.name]


@needs_fast_backend
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("timer", [False, True], ids=["plain", "timer"])
@pytest.mark.parametrize("module", MODULES)
def test_a_forked_child_is_refused_with_permission(
    module: ModuleType, timer: bool, pairs: MakePair
) -> None:
    """Every wait form (the fast ones included: a WRITE watcher is ready, so a wrongly taken
    fast path would return) and every change raise PERMISSION in the child, which must not
    touch the parent's epoll object; the child leaves with os._exit (``in_child``)."""
    a, _ = pairs()
    other, _ = pairs()
    with module.Context(FAST_BACKEND) as ctx:
        writer = ctx.add(a, WRITE, "writer")
        if timer:
            _with_long_timer(ctx)

        def child() -> dict[str, Any]:
            report: dict[str, Any] = {}
            for name, call in CHILD_CALLS.items():
                try:
                    call(ctx, writer, other)
                except iopoll.FailedPollOperationError as exc:
                    report[name] = [type(exc).__name__, exc.code.name]
                except Exception as exc:
                    report[name] = ["unexpected", type(exc).__name__, str(exc)]
                else:
                    report[name] = ["returned"]
            return report

        report = in_child(child)
        assert report == {name: _expected_in_child(name) for name in CHILD_CALLS}
        # The parent's context is untouched: the child's modify/remove never reached epoll.
        assert writer.is_active() and writer.data == "writer"
        assert len(ctx) == (2 if timer else 1)
        for name in ("wait(0.0)", "wait(None)", "wait(0)"):
            assert _labels(FAST_WAIT_CALLS[name](ctx)) == [("writer", int(WRITE))], name
