"""Fuzzing the Context API (SPEC 1, 3, 4, 5, 6) on the C ``iopoll.Context``, the pure one
(``pure_iopoll``) and the polyfill (``iopoll_polyfill.fallback``).

* ``ContextMachine``: a Hypothesis state machine that mixes valid and invalid calls of
  ``add``, ``wait``, ``modify*``, ``remove``, ``has_triggered``, ``close``, copies and second
  ``__init__`` calls with socket traffic, closed and reused fds, fds closed behind a handle's
  back and objects whose ``fileno()`` fails or lies.  It keeps a model of every watcher
  (events, data, one-shot and edge state, what ``max_events`` left out) and holds each
  outcome to it: a bad call raises only what SPEC names for the case, and leaves ``len()``,
  every watcher and the next ``wait()`` exactly as they were.  One machine per
  implementation and backend.
* Differential: the C and the pure ``wait()`` answer every argument tuple alike (class and
  message), and as SPEC says; the polyfill's ``wait()`` as SPEC 7 says.
* ``Context(backend)`` and ``StreamPollHandle(stream)`` with every kind of argument.
"""

from __future__ import annotations

import copy
import io
import pickle
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar

import pytest
from hypothesis import given, note
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import fuzz_strategies as fz
import iopoll
import iopoll._native
import iopoll_polyfill.fallback as fallback
import pure_iopoll
from _iopoll_core.errors import (
    BackendUnavailableError,
    FailedHandleAddError,
    FailedWatcherModificationError,
    HandleAlreadyWatchedError,
    InactiveWatcherError,
    InvalidHandleError,
    PollError,
)
from _iopoll_core.events import Event
from _iopoll_core.handles import StreamPollHandle

READ, WRITE, ERROR = int(Event.READ), int(Event.WRITE), int(Event.ERROR)
ONESHOT, EDGE = int(Event.ONESHOT), int(Event.EDGE_TRIGGERED)
PRIORITY = int(Event.PRIORITY)
MODES = ONESHOT | EDGE
BACKENDS = iopoll.Backend.available_backends()
SLOTS = 6

# (implementation name, module, backend): the machines and the differential tests run on each.
IMPLEMENTATIONS: list[tuple[str, Any, Any]] = [
    *[("c", iopoll, b) for b in BACKENDS],
    *[("pure", pure_iopoll, b) for b in BACKENDS],
    ("polyfill", fallback, fallback.Backend.SELECT),
]


class Data:
    """A unique ``data`` object, to check that watchers hand back the very one given."""

    counter = 0

    def __init__(self) -> None:
        Data.counter += 1
        self.n = Data.counter

    def __repr__(self) -> str:
        return f"Data({self.n})"


class Wrapper:
    """An honest object with ``fileno()`` (a file-like wrapper around a socket)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def fileno(self) -> int:
        """The socket's fd."""
        return self.sock.fileno()


@dataclass
class Slot:
    """One socketpair: ``local`` is watched, ``peer`` sends to it."""

    local: socket.socket
    peer: socket.socket
    unread: int = 0
    open: bool = True


ACTIVE, RETIRED, REMOVED = "active", "retired", "removed"


@dataclass(eq=False)
class Model:
    """What SPEC says one watcher is; compared by identity."""

    watcher: Any
    fd: int
    slot: int | None  # None: a ghost (an fd number that names no open file)
    form: str
    events: int
    data: Any
    state: str = ACTIVE
    armed: bool = True
    pending: bool = False  # an edge the OS has not reported yet (EDGE_TRIGGERED)
    carried: int | None = None  # bits of an edge/one-shot report that max_events cut
    triggered: int = 0

    @property
    def ghost(self) -> bool:
        """A watcher on a fd number that names no open file."""
        return self.slot is None


def _make_handle(form: str, sock: socket.socket) -> Any:
    if form == "socket":
        return sock
    if form == "int":
        return sock.fileno()
    if form == "stream-handle":
        return StreamPollHandle(sock)
    if form == "handle":
        return fz.SocketHandle(sock)
    return Wrapper(sock)


FORMS = ["socket", "int", "stream-handle", "handle", "object"]
WAIT_STYLES = ["positional", "keywords", "defaults-omitted"]


def call_wait(ctx: Any, style: str, timeout: Any, microseconds: Any, max_events: Any) -> Any:
    """``ctx.wait`` with the arguments passed as ``style`` says."""
    if style == "positional":
        return ctx.wait(timeout, microseconds, max_events)
    if style == "keywords":
        return ctx.wait(max_events=max_events, microseconds=microseconds, timeout=timeout)
    kwargs: dict[str, Any] = {}
    if timeout is not None:
        kwargs["timeout"] = timeout
    if not (type(microseconds) is int and microseconds == 0):
        kwargs["microseconds"] = microseconds
    if max_events is not None:
        kwargs["max_events"] = max_events
    return ctx.wait(**kwargs)


has_triggered_values = st.one_of(
    st.builds(Event, st.integers(0, 2**12 - 1)),
    st.sampled_from([1, 0, None, "READ", 1.0, True, [Event.READ], fz.Junk()]),
)


class ContextMachine(RuleBasedStateMachine):
    """Valid and invalid calls against a model of the watchers (see the module doc)."""

    api: ClassVar[Any] = iopoll
    backend: ClassVar[Any] = iopoll.Backend.AUTO
    polyfill: ClassVar[bool] = False

    def __init__(self) -> None:
        super().__init__()
        self.slots: list[Slot] = []
        self.models: list[Model] = []
        # Watchers the last wait's max_events left out, ready ever since: they come out
        # ahead of the others (SPEC 4).
        self.leftovers: list[Model] = []
        # Left-out watchers not reported since, that were modified or not ready for a while:
        # SPEC neither keeps nor takes away their turn (epoll's ready list may keep it).
        self.unsure: list[Model] = []
        self.closed = False
        self.ctx: Any = None
        self.closed_numbers = fz.closed_fd_numbers(2)
        self.spare = socket.socketpair()

    # -- set-up and teardown ----------------------------------------------------------------

    @initialize()
    def start(self) -> None:
        """A fresh context and SLOTS non-blocking socketpairs."""
        self.ctx = self.api.Context(self.backend)
        for _ in range(SLOTS):
            self.slots.append(Slot(*socket.socketpair()))
        for slot in self.slots:
            slot.local.setblocking(False)

    def teardown(self) -> None:
        """Close the context and every socket the machine made."""
        if self.ctx is not None:
            self.ctx.close()
        for slot in self.slots:
            slot.local.close()
            slot.peer.close()
        for sock in self.spare:
            sock.close()

    # -- the model ------------------------------------------------------------------------------

    @property
    def epoll(self) -> bool:
        """Whether the context runs on EPOLL (one-shots disarmed by the kernel)."""
        return self.ctx is not None and self.ctx.backend.name == "EPOLL"

    def active(self) -> list[Model]:
        """The watchers SPEC says are active."""
        return [m for m in self.models if m.state == ACTIVE]

    def watched_fds(self) -> set[int]:
        """The fds of the active watchers: adding one again is HandleAlreadyWatchedError."""
        return {m.fd for m in self.active()}

    def level(self, m: Model) -> int:
        """What the OS says of ``m``'s stream now, within what it watches."""
        if m.ghost:
            return ERROR
        slot = self.slots[m.slot]  # type: ignore[index]
        bits = READ if m.events & READ and slot.unread else 0
        return bits | (WRITE if m.events & WRITE else 0)

    def carries(self, m: Model) -> bool:
        """Whether a report of ``m`` cut by max_events is kept by the Context (SPEC 4)."""
        return bool(m.events & EDGE) or (self.epoll and bool(m.events & ONESHOT))

    def readiness(self, m: Model) -> tuple[str, int, int]:
        """``("must" | "may" | "no", lowest, highest)``: whether the next ``wait()`` reports
        ``m``, and the bounds of its ``triggered_events`` (``lowest`` ⊆ it ⊆ ``highest``)."""
        if m.state != ACTIVE or not m.armed or self.closed:
            return ("no", 0, 0)
        level = self.level(m)
        if m.ghost:
            return ("must", ERROR, ERROR)
        if m.carried is not None:
            if m.carried == level:
                return ("must", level, level)
            return ("may", 0, m.carried | level)
        if m.events & EDGE and not m.pending:
            return ("no", 0, 0)
        return ("must", level, level) if level else ("no", 0, 0)

    def must_be_ready(self) -> bool:
        """Whether the next wait() must report something (then it returns at once)."""
        return any(self.readiness(m)[0] == "must" for m in self.models)

    def after_new_edge(self, slot_index: int) -> None:
        """Data reached ``slot_index``: an edge for its edge-triggered READ/PRIORITY watchers."""
        for m in self.models:
            if m.slot == slot_index and m.events & EDGE and m.events & (READ | PRIORITY):
                m.pending = True

    def retire_slot(self, slot_index: int) -> None:
        """The stream of ``slot_index`` was closed: its active watchers are retired."""
        for m in self.models:
            if m.slot == slot_index and m.state == ACTIVE:
                m.state = RETIRED
                m.carried = None
        self.leftovers = [m for m in self.leftovers if m.state == ACTIVE]

    def snapshot(self) -> tuple[Any, ...]:
        """What the public API shows of the context and every watcher."""
        ctx = self.ctx
        return (
            len(ctx),
            tuple(
                (
                    m.watcher.is_active(),
                    m.watcher.watched_events,
                    id(m.watcher.data),
                    m.watcher.triggered_events,
                )
                for m in self.models
            ),
        )

    def expected_snapshot(self) -> tuple[Any, ...]:
        """What ``snapshot()`` must show, by the model."""
        return (
            0 if self.closed else len(self.active()),
            tuple(
                (
                    m.state == ACTIVE and not self.closed,
                    Event(m.events),
                    id(m.data),
                    Event(m.triggered),
                )
                for m in self.models
            ),
        )

    def check_model(self) -> None:
        """The public view of the context and its watchers is the model's."""
        assert self.snapshot() == self.expected_snapshot()
        for m in self.models:
            assert m.watcher.data is m.data

    def unchanged_by(self, call: str, run: Any, allowed: fz.Faults, names: Any = ()) -> Any:
        """Run a call that must fail with one of ``allowed``; the state must not move."""
        return fz.check_fails_unchanged(
            self.snapshot, run, allowed, call=call, names=names, what="the state it failed on"
        )

    def handle_fds(self) -> dict[str, int]:
        """The numbers the symbolic fds of a ``HandleRecipe`` stand for, now."""
        watched = [m.fd for m in self.active() if not m.ghost]
        spare = self.spare[0].fileno()
        return {
            fz.CLOSED: self.closed_numbers[0],
            fz.SPARE: spare,
            fz.WATCHED: watched[0] if watched else spare,
        }

    # -- wait() ---------------------------------------------------------------------------------

    def check_wait(self, result: list[Any], limit: int) -> None:
        """Hold ``result`` (of a wait with ``max_events=limit``) to the model; update it."""
        by_watcher = {id(m.watcher): m for m in self.models}
        states = {id(m): self.readiness(m) for m in self.models}
        must = [m for m in self.models if states[id(m)][0] == "must"]
        may = [m for m in self.models if states[id(m)][0] == "may"]
        note(f"wait: must={must!r} may={may!r} got={result!r}")
        reported: list[Model] = []
        for watcher in result:
            m = by_watcher.get(id(watcher))
            assert m is not None, f"wait() returned {watcher!r}, which add() never returned"
            assert m not in reported, f"wait() returned {watcher!r} twice"
            state, low, high = states[id(m)]
            assert state != "no", f"wait() reported {m!r}, which is not ready"
            triggered = int(watcher.triggered_events)
            assert triggered, f"{m!r} reported with no event"
            assert triggered & low == low and triggered & ~high == 0, (
                f"{m!r}: triggered {Event(triggered)!r}, expected within "
                f"{Event(low)!r}..{Event(high)!r}"
            )
            reported.append(m)
        assert len(result) <= limit
        if len(result) < limit:
            missing = [m for m in must if m not in reported]
            assert not missing, f"wait() missed {missing!r} (room for {limit})"
        # Watchers left out by max_events come out first (SPEC 4).
        ahead = [m for m in self.leftovers if states[id(m)][0] == "must"]
        for watcher in result[: min(limit, len(ahead))]:
            m = by_watcher[id(watcher)]
            assert m in self.leftovers or m in self.unsure, (
                f"{watcher!r} came out ahead of the watchers max_events left out: "
                f"{self.leftovers!r}"
            )
        full = len(result) == limit
        for m in reported:
            m.triggered = int(m.watcher.triggered_events)
            m.carried = None
            m.pending = False
            if m.ghost:
                m.state = RETIRED  # reported once, then dropped (SPEC 6.9)
            elif m.events & ONESHOT:
                m.armed = False
        left_out = []
        for m in must + may:
            if m in reported:
                continue
            if full:
                left_out.append(m)
                if m in must and self.carries(m):
                    m.carried = (m.carried or 0) | self.level(m)
                    m.pending = False
            else:  # "may", and not reported: the report is gone
                m.carried = None
                m.pending = False
        for m in self.models:
            if m.events & EDGE and m.pending and m.state == ACTIVE and not self.level(m):
                m.pending = False  # epoll drops an edge whose readiness went away
        self.leftovers = left_out
        self.unsure = [m for m in self.unsure if m not in reported and m not in left_out]

    @rule(
        data=st.data(),
        microseconds=fz.valid_microseconds,
        max_events=fz.valid_max_events,
        style=st.sampled_from(WAIT_STYLES),
        zero=st.sampled_from([0, 0.0, timedelta(0)]),
    )
    def wait_valid(
        self, data: st.DataObject, microseconds: int, max_events: Any, style: str, zero: Any
    ) -> None:
        """A wait SPEC 4 calls valid, in every form (huge timeouts when something is ready)."""
        timeout = data.draw(self.valid_timeouts, label="timeout")
        self.wait(timeout, 0 if timeout is None else microseconds, max_events, style, zero)

    @rule(
        timeout=fz.timeout_values,
        microseconds=fz.microseconds_values,
        max_events=fz.max_events_values,
        style=st.sampled_from(WAIT_STYLES),
        zero=st.sampled_from([0, 0.0, timedelta(0)]),
    )
    def wait(self, timeout: Any, microseconds: Any, max_events: Any, style: str, zero: Any) -> None:
        """Any wait: refused as SPEC says, with nothing changed, or as ``wait_valid``."""
        faults = fz.wait_faults(timeout, microseconds, max_events, whole_seconds=self.polyfill)
        call = f"wait({timeout!r}, {microseconds!r}, {max_events!r}) [{style}]"
        if self.closed:
            allowed: fz.Faults = frozenset({PollError, *faults.values()})
            self.unchanged_by(
                call, lambda: call_wait(self.ctx, style, timeout, microseconds, max_events), allowed
            )
            return
        if faults:
            self.unchanged_by(
                call,
                lambda: call_wait(self.ctx, style, timeout, microseconds, max_events),
                frozenset(faults.values()),
                names=list(faults),
            )
            return
        if not self.must_be_ready() and not fz.is_zero_wait(timeout):
            # Nothing must be ready: a long wait would only sleep.  Poll instead.
            timeout, microseconds = (0 if self.polyfill else zero), 0
            call = f"wait({timeout!r}, 0, {max_events!r}) [{style}]"
        note(call)
        with fz.hang_guard():
            outcome = fz.attempt(
                lambda: call_wait(self.ctx, style, timeout, microseconds, max_events)
            )
        result = fz.check_succeeded(outcome, call=call)
        assert type(result) is list
        self.check_wait(result, fz.MAX_EVENTS_LIMIT if max_events is None else max_events)

    @rule(max_events=st.one_of(st.none(), st.integers(1, 3)))
    def wait_zero(self, max_events: int | None) -> None:
        """The following ``wait(0)`` of the brief: what a bad call left must be intact."""
        if self.closed:
            return
        result = self.ctx.wait(0, 0, max_events)
        self.check_wait(result, fz.MAX_EVENTS_LIMIT if max_events is None else max_events)

    # -- add() ------------------------------------------------------------------------------------

    def adding(
        self, call: str, make: Any, allowed: fz.Faults, success: str, names: Any = ()
    ) -> Any:
        """Run an ``add``: ``success`` is ``"must"``, ``"may"`` or ``"never"``."""
        if self.closed:
            allowed = allowed | {PollError}
            success = "never"
        if success == "must":
            return fz.check_succeeded(fz.attempt(make), call=call)
        before = self.snapshot()
        outcome = fz.attempt(make)
        if outcome.raised or success == "never":
            fz.check_raised(outcome, allowed, call=call, names=names)
            assert self.snapshot() == before, f"{call} changed the state it failed on"
            return None
        return outcome.result

    @precondition(lambda self: not self.closed)
    @rule(
        slot=st.integers(0, SLOTS - 1),
        form=st.sampled_from(FORMS),
        events=st.one_of(fz.events_args(valid=True), fz.events_args()),
    )
    def add(self, slot: int, form: str, events: fz.Arg) -> None:
        """``add()`` of a slot's stream in some form: done, or refused with nothing changed."""
        s = self.slots[slot]
        if not s.open:
            return
        handle = _make_handle(form, s.local)
        faults = events.faults | fz.backend_faults(events.bits, self.backend)
        fd = s.local.fileno()
        if fd in self.watched_fds():
            faults |= {HandleAlreadyWatchedError}
        data = Data()
        call = f"add({form} fd {fd}, {events!r})"
        watcher = self.adding(
            call,
            lambda: self.ctx.add(handle, events.make(), data),
            faults,
            "never" if faults else "must",
            names=("events",),
        )
        if watcher is None:
            return
        assert isinstance(watcher, self.api.Watcher)
        assert watcher.is_active() and watcher.data is data
        assert watcher.watched_events == Event(events.bits)
        m = Model(watcher, fd, slot, form, events.bits, data)
        if m.events & EDGE:
            m.pending = bool(self.level(m))
        self.models.append(m)

    @precondition(lambda self: not self.closed)
    @rule(data=st.data(), events=fz.events_args(valid=True))
    def add_odd_handle(self, data: st.DataObject, events: fz.Arg) -> None:
        """A bad or odd ``handle``: refused as SPEC says, or added and then removed cleanly."""
        recipe = data.draw(self.recipes, label="recipe")
        fds = self.handle_fds()
        handle = recipe.make(fds)
        allowed = set(recipe.faults)
        success = "never"
        if recipe.lies:
            allowed |= {InvalidHandleError, HandleAlreadyWatchedError, FailedHandleAddError}
            allowed |= {a for a in recipe.script if isinstance(a, type)}
            success = "may"
        elif recipe.fd_kind == fz.CLOSED:
            if self.ctx.backend.name == "EPOLL":
                allowed = {FailedHandleAddError}
            elif fds[fz.CLOSED] in self.watched_fds():
                allowed = {HandleAlreadyWatchedError}
            else:
                success = "must"
        elif recipe.fd_kind == fz.WATCHED:
            if fds[fz.WATCHED] in self.watched_fds():
                allowed = {HandleAlreadyWatchedError}
            else:
                success = "must"
        if not allowed:
            success = "must"
        unsupported = fz.backend_faults(events.bits, self.backend)
        if unsupported:
            allowed |= unsupported
            success = "may" if success == "may" else "never"
        call = f"add({recipe!r}, {events!r})"
        watcher = self.adding(
            call,
            lambda: self.ctx.add(handle, events.make(), Data()),
            frozenset(allowed),
            success,
            names=("handle", "stream"),
        )
        if watcher is None:
            return
        before = self.expected_snapshot()
        watcher.remove()  # a no-op for one it retired already; never an error
        assert not watcher.is_active()
        assert self.snapshot() == before, f"{call}, then remove(), left a trace"

    @precondition(lambda self: not self.closed)
    @rule(
        number=st.integers(0, 1),
        form=st.sampled_from(["int", "stream-handle", "object", "handle"]),
        events=fz.events_args(valid=True),
    )
    def add_closed_fd_number(self, number: int, form: str, events: fz.Arg) -> None:
        """A fd number nothing has open: EPOLL refuses it; POLL and SELECT take it and report
        it once with ``ERROR`` (SPEC 6.9)."""
        fd = self.closed_numbers[number]
        handle: Any
        if form == "int":
            handle = fd
        elif form == "stream-handle":
            handle = StreamPollHandle(fd)
        elif form == "object":
            handle = fz.Scripted([fd])
        else:
            handle = fz.ScriptedHandle([fd])
        faults = fz.backend_faults(events.bits, self.backend)
        if self.ctx.backend.name == "EPOLL":
            faults |= {FailedHandleAddError}
        elif fd in self.watched_fds():
            faults |= {HandleAlreadyWatchedError}
        data = Data()
        watcher = self.adding(
            f"add({form} closed fd {fd}, {events!r})",
            lambda: self.ctx.add(handle, events.make(), data),
            faults,
            "never" if faults else "must",
        )
        if watcher is not None:
            self.models.append(Model(watcher, fd, None, form, events.bits, data))

    # -- watchers -----------------------------------------------------------------------------

    def pick(self, index: int) -> Model | None:
        """The model of one of the watchers made so far, by index (None before the first)."""
        return self.models[index % len(self.models)] if self.models else None

    @rule(
        index=st.integers(0, 50),
        method=st.sampled_from(["modify", "modify_events", "modify_data"]),
        events=fz.events_args(),
    )
    def modify(self, index: int, method: str, events: fz.Arg) -> None:
        """``modify``/``modify_events``/``modify_data``: refused with nothing changed, or done."""
        m = self.pick(index)
        if m is None:
            return
        inactive = m.state != ACTIVE or self.closed
        faults: set[type[BaseException]] = {InactiveWatcherError} if inactive else set()
        data = Data()
        if method == "modify_data":
            run: Any = lambda: m.watcher.modify_data(data)  # noqa: E731
        else:
            faults |= events.faults
            faults |= fz.backend_faults(events.bits, self.backend, FailedWatcherModificationError)
            if method == "modify":
                run = lambda: m.watcher.modify(events.make(), data)  # noqa: E731
            else:
                run = lambda: m.watcher.modify_events(events.make())  # noqa: E731
        call = f"{method}({m!r}, {events!r})"
        if faults:
            self.unchanged_by(call, run, frozenset(faults), names=("events",))
            return
        fz.check_succeeded(fz.attempt(run), call=call)
        if method != "modify_events":
            m.data = data
        if method == "modify_data":
            return
        m.events = events.bits
        m.armed = True
        m.carried = None
        m.pending = bool(m.events & EDGE) and bool(self.level(m))
        if m in self.leftovers:
            self.leftovers.remove(m)
            self.unsure.append(m)

    @rule(index=st.integers(0, 50), dice=st.integers(0, 2))
    def remove(self, index: int, dice: int) -> None:
        """``remove()``; of an active watcher one draw in three, so that watchers pile up."""
        m = self.pick(index)
        if m is None or (m.state == ACTIVE and dice):
            return
        call = f"remove({m!r})"
        if m.state == REMOVED or (self.closed and m.state == ACTIVE):
            self.unchanged_by(call, m.watcher.remove, frozenset({InactiveWatcherError}))
            return
        fz.check_succeeded(fz.attempt(m.watcher.remove), call=call)
        if m.state == ACTIVE:
            m.state = REMOVED
            if m in self.leftovers:
                self.leftovers.remove(m)

    @rule(index=st.integers(0, 50), event=has_triggered_values)
    def has_triggered(self, index: int, event: Any) -> None:
        """``has_triggered(event)``: a bool by the model for an Event, else TypeError."""
        m = self.pick(index)
        if m is None:
            return
        outcome = fz.attempt(lambda: m.watcher.has_triggered(event))
        if not isinstance(event, Event):
            fz.check_raised(outcome, frozenset({TypeError}), call="has_triggered", names=("event",))
            return
        wanted = int(event) & ~MODES
        expected = wanted != 0 and m.triggered & wanted == wanted
        assert fz.check_succeeded(outcome, call="has_triggered") is expected

    # The rules a useful run needs most, once more (Hypothesis picks rules evenly).

    @rule(
        slot=st.integers(0, SLOTS - 1),
        form=st.sampled_from(FORMS),
        events=fz.events_args(valid=True),
    )
    def add_valid(self, slot: int, form: str, events: fz.Arg) -> None:
        """``add()`` with valid events only."""
        if not self.closed:
            self.add(slot, form, events)

    @rule(slot=st.integers(0, SLOTS - 1), max_events=st.one_of(st.none(), st.integers(1, 3)))
    def send_and_wait(self, slot: int, max_events: int | None) -> None:
        """Send a byte to a slot's stream, then ``wait(0)``."""
        self.send(slot)
        self.wait_zero(max_events)

    # -- streams --------------------------------------------------------------------------------

    @rule(slot=st.integers(0, SLOTS - 1))
    def send(self, slot: int) -> None:
        """One more byte for a slot's stream to read (an edge for its edge watchers)."""
        s = self.slots[slot]
        if s.open:
            s.peer.send(b"x")
            s.unread += 1
            self.after_new_edge(slot)

    @rule(slot=st.integers(0, SLOTS - 1))
    def drain(self, slot: int) -> None:
        """Read all that waits on a slot's stream."""
        s = self.slots[slot]
        if s.open and s.unread:
            for m in self.models:
                if m.slot != slot or m.events & WRITE or m in self.unsure:
                    continue
                if m in self.leftovers:
                    self.leftovers.remove(m)  # not ready for a while: its turn is unsure
                    self.unsure.append(m)
            assert len(s.local.recv(65536)) == s.unread
            s.unread = 0

    @rule(slot=st.integers(0, SLOTS - 1), dice=st.integers(0, 2))
    def close_stream(self, slot: int, dice: int) -> None:
        """Close a watched stream without ``remove()`` (an int fd is removed first: SPEC 3);
        one draw in three."""
        s = self.slots[slot]
        if not s.open or dice:
            return
        for m in self.models:
            if m.slot == slot and m.state == ACTIVE and m.form == "int" and not self.closed:
                m.watcher.remove()
                m.state = REMOVED
        s.local.close()
        s.peer.close()
        s.open = False
        self.retire_slot(slot)

    @rule(slot=st.integers(0, SLOTS - 1))
    def reopen_stream(self, slot: int) -> None:
        """A new socketpair in a closed slot: the kernel hands out the closed fd numbers."""
        s = self.slots[slot]
        if s.open:
            return
        self.slots[slot] = Slot(*socket.socketpair())
        self.slots[slot].local.setblocking(False)

    # -- the context --------------------------------------------------------------------------

    @rule(dice=st.integers(0, 5))
    def close_context(self, dice: int) -> None:
        """Close the context (one draw in six: the other rules need an open one)."""
        if dice:
            return
        self.ctx.close()
        self.ctx.close()  # idempotent
        if not self.closed:
            for m in self.models:
                if m.state == ACTIVE:
                    open_stream = m.slot is None or self.slots[m.slot].open
                    m.state = REMOVED if open_stream else RETIRED
        self.closed = True
        self.leftovers = []
        assert len(self.ctx) == 0

    @precondition(lambda self: self.closed)
    @rule()
    def new_context(self) -> None:
        """A fresh context; the old watchers stay in the model, inactive."""
        self.ctx = self.api.Context(self.backend)
        self.closed = False
        for m in self.models:
            if m.state == ACTIVE:
                m.state = REMOVED

    @rule(
        what=st.sampled_from(["context", "watcher", "handle"]),
        how=st.sampled_from(["copy", "deepcopy", "pickle", "__init__", "Watcher()"]),
        backend=st.sampled_from([*iopoll.Backend, *fallback.Backend, None]),
    )
    def misuse(self, what: str, how: str, backend: Any) -> None:
        """SPEC 4 and 5: no copy, deep copy or pickle of a Context, Watcher or handle, no
        ``Watcher()`` but through ``add``; and (this project's choice, PHP's) no second
        ``Context.__init__``.  Each is a ``TypeError`` that changes nothing."""
        target: Any
        if how == "__init__":
            run: Any = lambda: self.ctx.__init__(backend)  # noqa: E731
        elif how == "Watcher()":
            run = lambda: self.api.Watcher()  # noqa: E731
        else:
            if what == "context":
                target = self.ctx
            elif what == "watcher" and self.models:
                target = self.models[-1].watcher
            else:
                target = StreamPollHandle(self.spare[0])
            functions: dict[str, Callable[[Any], Any]] = {
                "copy": copy.copy,
                "deepcopy": copy.deepcopy,
                "pickle": pickle.dumps,
            }
            function = functions[how]
            run = lambda: function(target)  # noqa: E731
        self.unchanged_by(f"{how}({what})", run, frozenset({TypeError}))

    @rule()
    def check_state(self) -> None:
        """``len()``, and each watcher's properties, as the model says (this notices closed
        streams early, which the other rules leave to ``wait()``)."""
        self.check_model()

    @invariant()
    def data_is_kept(self) -> None:
        """Every watcher hands back the very data object it was given."""
        # Side-effect free (the C getter, when built): the data given, never a copy.
        for m in self.models:
            assert m.watcher.data is m.data

    recipes: ClassVar[st.SearchStrategy[fz.HandleRecipe]] = fz.handle_recipes()
    valid_timeouts: ClassVar[st.SearchStrategy[Any]] = fz.valid_timeouts


def _machine(name: str, api: Any, backend: Any) -> type[ContextMachine]:
    include_huge = backend.name == "SELECT"  # FD_SETSIZE refuses them properly there
    recipes = st.sampled_from(
        [
            r
            for r in fz.HANDLE_RECIPES
            if not fz.open_bug(r.bug) or (include_huge and r.bug == "huge-fd")
        ]
    )
    return type(
        f"ContextMachine_{name}_{backend.name}",
        (ContextMachine,),
        {
            "api": api,
            "backend": backend,
            "polyfill": api is fallback,
            "recipes": recipes,
            "valid_timeouts": fz.valid_int_timeouts if api is fallback else fz.valid_timeouts,
        },
    )


MACHINES = {
    f"{name}-{backend.name}": _machine(name, api, backend)
    for name, api, backend in IMPLEMENTATIONS
    if name != "c" or iopoll._native.ACCELERATED
}


@pytest.mark.parametrize("name", list(MACHINES))
def test_context_state_machine(name: str) -> None:
    """The state machine of one implementation and backend."""
    run_state_machine_as_test(MACHINES[name], settings=fz.scaled(0.4))


# -- wait(): C and pure alike, as SPEC says -------------------------------------------------------


def _binding_variants() -> st.SearchStrategy[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Calls with a wrong shape: too many arguments, unknown or repeated keywords."""
    return st.sampled_from(
        [
            ((0, 0, None, 1), {}),
            ((0,), {"timeout": 0}),
            ((), {"timeuot": 0}),
            ((0, 0), {"microseconds": 0}),
            ((), {"max_event": 1}),
            ((0, 0, None), {"max_events": None}),
        ]
    )


# Any value of each wait() argument, and the form of the call (``call_wait``): what the
# wait() tests below are given (``@given(**WAIT_ARGUMENTS, ...)``).
WAIT_ARGUMENTS: dict[str, st.SearchStrategy[Any]] = {
    "timeout": fz.timeout_values,
    "microseconds": fz.microseconds_values,
    "max_events": fz.max_events_values,
    "style": st.sampled_from(WAIT_STYLES),
}


def _wait_outcome(ctx: Any, call: Any) -> fz.Outcome:
    with fz.hang_guard():  # something is always ready: a wait that blocks is a Hang
        outcome = fz.attempt(call)
    if not outcome.raised:
        outcome.result = [w.data for w in outcome.result]
    return outcome


@fz.FUZZ
@given(
    **WAIT_ARGUMENTS,
    backend=st.sampled_from(BACKENDS),
    closed=st.sampled_from([False, False, False, True]),
)
def test_c_and_pure_wait_agree_and_follow_spec(
    timeout: Any, microseconds: Any, max_events: Any, style: str, backend: Any, closed: bool
) -> None:
    """The same arguments get the same answer from the C and the pure ``wait()``: the same
    exception class and message, or the same watchers; and the one SPEC 4 gives."""
    a, b = socket.socketpair()
    try:
        outcomes = []
        for make in (iopoll.Context, pure_iopoll.Context):
            with make(backend) as ctx:
                ctx.add(a, Event.WRITE, "a")  # always ready: no valid wait blocks
                if closed:
                    ctx.close()
                outcomes.append(
                    _wait_outcome(
                        ctx, lambda: call_wait(ctx, style, timeout, microseconds, max_events)
                    )
                )
        c, pure = outcomes
        call = f"wait({timeout!r}, {microseconds!r}, {max_events!r}) [{style}]"
        if c.raised or pure.raised:
            assert c.raised and pure.raised, f"{call}: C {c!r}, pure {pure!r}"
            assert (type(c.error), str(c.error)) == (type(pure.error), str(pure.error)), call
        else:
            assert c.result == pure.result, call
        faults = fz.wait_faults(timeout, microseconds, max_events)
        if closed:
            fz.check_raised(pure, frozenset({PollError, *faults.values()}), call=call)
        elif faults:
            fz.check_raised(pure, frozenset(faults.values()), call=call, names=list(faults))
        else:
            assert fz.check_succeeded(pure, call=call) == ["a"]
    finally:
        a.close()
        b.close()


@fz.FUZZ
@given(shape=_binding_variants(), backend=st.sampled_from(BACKENDS))
def test_c_and_pure_wait_refuse_a_wrong_call_shape(
    shape: tuple[tuple[Any, ...], dict[str, Any]], backend: Any
) -> None:
    """A wait() called with a wrong shape is a TypeError on C, pure and polyfill alike."""
    args, kwargs = shape
    a, b = socket.socketpair()
    try:
        makers: list[Any] = [iopoll.Context, pure_iopoll.Context, fallback.Context]
        for make in makers:
            backend_of = fallback.Backend.SELECT if make is fallback.Context else backend
            with make(backend_of) as ctx:
                ctx.add(a, Event.WRITE)
                outcome = fz.attempt(lambda: ctx.wait(*args, **kwargs))
                fz.check_raised(outcome, frozenset({TypeError}), call=f"wait{shape}")
                assert len(ctx) == 1
    finally:
        a.close()
        b.close()


@fz.FUZZ
@given(**WAIT_ARGUMENTS)
def test_polyfill_wait_takes_whole_seconds(
    timeout: Any, microseconds: Any, max_events: Any, style: str
) -> None:
    """SPEC 7: the polyfill's ``wait()`` refuses a float or timedelta timeout with a
    ``TypeError`` that says to pass whole seconds; everything else as SPEC 4 says, and the
    native ``wait()`` accepts whatever the polyfill accepts (code runs unchanged)."""
    a, b = socket.socketpair()
    try:
        call = f"wait({timeout!r}, {microseconds!r}, {max_events!r}) [{style}]"
        faults = fz.wait_faults(timeout, microseconds, max_events, whole_seconds=True)
        with fallback.Context() as ctx:
            ctx.add(a, Event.WRITE, "a")
            outcome = _wait_outcome(
                ctx, lambda: call_wait(ctx, style, timeout, microseconds, max_events)
            )
        if faults:
            fz.check_raised(outcome, frozenset(faults.values()), call=call, names=list(faults))
            only_timeout = set(faults) == {"timeout"}
            if only_timeout and isinstance(timeout, (float, timedelta)):
                assert "whole seconds" in str(outcome.error), str(outcome.error)
            return
        assert fz.check_succeeded(outcome, call=call) == ["a"]
        with iopoll.Context() as native:
            native.add(a, Event.WRITE, "a")
            same = _wait_outcome(
                native, lambda: call_wait(native, style, timeout, microseconds, max_events)
            )
        assert fz.check_succeeded(same, call=f"native {call}") == ["a"]
    finally:
        a.close()
        b.close()


# -- Context(backend) ----------------------------------------------------------------------------

backend_arguments = st.one_of(
    st.sampled_from(list(iopoll.Backend)),
    st.sampled_from(list(fallback.Backend)),
    st.sampled_from([None, "epoll", "EPOLL", "auto", 0, 1, True, 2.0, fz.Junk(), Event.READ]),
    st.sampled_from([b.value for b in iopoll.Backend]),
)


@fz.FUZZ
@given(backend=backend_arguments, which=st.sampled_from(["c", "pure", "polyfill"]))
def test_context_construction(backend: Any, which: str) -> None:
    """SPEC 4: a Backend member of the implementation's own enum: the context, or
    ``BackendUnavailableError`` naming it; anything else a ``TypeError`` naming the argument."""
    api = {"c": iopoll, "pure": pure_iopoll, "polyfill": fallback}[which]
    outcome = fz.attempt(lambda: api.Context(backend))
    call = f"{which}.Context({backend!r})"
    if not isinstance(backend, api.Backend):
        fz.check_raised(outcome, frozenset({TypeError}), call=call, names=("backend",))
        return
    if not backend.is_available():
        fz.check_raised(outcome, frozenset({BackendUnavailableError}), call=call)
        assert backend.name in str(outcome.error)
        return
    ctx = fz.check_succeeded(outcome, call=call)
    try:
        assert ctx.backend is backend.resolve()
        assert ctx.backend.name != "AUTO"
        assert len(ctx) == 0 and ctx.wait(0) == []
    finally:
        ctx.close()


# -- StreamPollHandle(stream) ---------------------------------------------------------------------

_FILENO_ANSWERS = st.sampled_from(
    [OSError, ValueError, io.UnsupportedOperation, -1, 0, 3, 2**70, 3.0, True]
)


@fz.FUZZ
@given(
    value=st.one_of(
        st.sampled_from([None, "3", b"3", 3.0, True, False, [], fz.Junk(), io.BytesIO()]),
        fz.ints,
        st.builds(lambda answer: fz.Scripted([answer]), _FILENO_ANSWERS),
        st.builds(lambda answer: fz.Scripted([3], closed=answer), st.booleans()),
    )
)
def test_stream_poll_handle_construction(value: Any) -> None:
    """SPEC 3: an object without ``fileno`` is a ``TypeError``, a negative int a
    ``ValueError``; ``is_valid()`` answers a bool whatever ``fileno()`` does."""
    outcome = fz.attempt(lambda: StreamPollHandle(value))
    call = f"StreamPollHandle({value!r})"
    if isinstance(value, bool) or not (isinstance(value, int) or hasattr(value, "fileno")):
        fz.check_raised(outcome, frozenset({TypeError}), call=call, names=("stream",))
        return
    if isinstance(value, int) and value < 0:
        fz.check_raised(outcome, frozenset({ValueError}), call=call, names=("stream",))
        return
    handle = fz.check_succeeded(outcome, call=call)
    assert handle.stream is value
    valid = handle.is_valid()
    assert type(valid) is bool
    if getattr(value, "closed", False):
        assert not valid


@fz.xfail_bug("is-valid-non-int")
@pytest.mark.parametrize("answer", ["3", None])
def test_is_valid_answers_false_for_a_non_int_fileno(answer: Any) -> None:
    """Bug is-valid-non-int: ``is_valid()`` must answer, not raise, for a broken fileno()."""
    assert StreamPollHandle(fz.Scripted([answer])).is_valid() is False


# -- add() of an fd no OS has -------------------------------------------------------------------


@fz.xfail_bug("huge-fd")
@pytest.mark.parametrize(
    "name", [f"{n}-{b.name}" for n, _, b in IMPLEMENTATIONS if b.name in ("EPOLL", "POLL")]
)
@pytest.mark.parametrize("form", ["int", "object", "handle"])
def test_add_of_a_huge_fd_is_a_spec_error(name: str, form: str) -> None:
    """Bug huge-fd: ``add(2**31)`` on EPOLL/POLL must be refused with a SPEC error (the fd
    cannot exist), not ``OverflowError``; and leave nothing behind."""
    impl, backend_name = name.split("-")
    api = {"c": iopoll, "pure": pure_iopoll}[impl]
    huge = 2**31
    handle: Any = {"int": huge, "object": fz.Scripted([huge]), "handle": fz.ScriptedHandle([huge])}[
        form
    ]
    with api.Context(api.Backend[backend_name]) as ctx:
        outcome = fz.attempt(lambda: ctx.add(handle, Event.READ))
        fz.check_raised(outcome, fz.HUGE_FD_FAULTS, call=f"add({form} {huge})")
        assert len(ctx) == 0 and ctx.wait(0) == []


_UNOPENED_FD = """
import sys
import iopoll, iopoll_polyfill.fallback as fallback
from iopoll import Event
api = fallback if sys.argv[1] == "polyfill" else iopoll
with api.Context(api.Backend.SELECT) as ctx:
    # 1000 was never open in this fresh process: beyond its fd table.
    try:
        watcher = ctx.add(1000, Event.READ | Event.WRITE)
    except api.FailedHandleAddError:
        print("refused")
    else:
        reports = [[int(w.triggered_events) for w in ctx.wait(0)] for _ in range(3)]
        print(reports, watcher.is_active())
"""


@fz.xfail_bug("select-unopened-fd")
@pytest.mark.parametrize("which", ["native", "polyfill"])
def test_select_reports_a_never_opened_fd_once_or_refuses_it(which: str) -> None:
    """Bug select-unopened-fd: SPEC 6.9 on SELECT for a fd number no file ever had."""
    done = subprocess.run(
        [sys.executable, "-c", _UNOPENED_FD, which],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() in ("refused", f"[[{int(Event.ERROR)}], [], []] False"), done.stdout


@fz.xfail_bug("epoll-leftover-order")
@pytest.mark.parametrize("api", [iopoll, pure_iopoll], ids=["c", "pure"])
def test_a_watcher_left_out_comes_before_one_that_became_ready_since(api: Any) -> None:
    """Bug epoll-leftover-order (SPEC 4): left-out watchers come out on the next call ahead
    of watchers that became ready since."""
    (reader, reader_peer), (w1, w1_peer), (w2, w2_peer) = [socket.socketpair() for _ in range(3)]
    try:
        with api.Context(api.Backend.EPOLL) as ctx:
            ctx.add(reader, Event.READ, "reader")
            ctx.add(w1, Event.WRITE, "w1")
            ctx.add(w2, Event.WRITE, "w2")
            reader_peer.send(b"x")
            assert len(ctx.wait(0)) == 3
            assert [w.data for w in ctx.wait(0, 0, 1)] == ["w1"]
            reader.recv(10)  # the reader is not ready any more
            assert [w.data for w in ctx.wait(0, 0, 1)] == ["w2"]  # w1 left out
            reader_peer.send(b"x")  # the reader becomes ready again
            assert next(w.data for w in ctx.wait(0)) == "w1"
    finally:
        for sock in (reader, reader_peer, w1, w1_peer, w2, w2_peer):
            sock.close()


@fz.xfail_bug("close-raising-fileno")
@pytest.mark.parametrize("name", [f"{n}-{b.name}" for n, _, b in IMPLEMENTATIONS])
def test_close_completes_when_a_handle_fileno_raises(name: str) -> None:
    """Bug close-raising-fileno: ``close()`` must finish (watchers inactive, OS object freed,
    ``add`` refused with ``PollError``) even when a handle's ``fileno()`` raises something
    other than OSError/ValueError once it was added."""
    impl, backend_name = name.split("-")
    api = {"c": iopoll, "pure": pure_iopoll, "polyfill": fallback}[impl]
    a, b = socket.socketpair()
    try:
        ctx = api.Context(api.Backend[backend_name])
        ctx.add(fz.ScriptedHandle([a.fileno(), RuntimeError]), Event.READ)
        other = ctx.add(b, Event.WRITE)
        outcome = fz.attempt(ctx.close)
        if outcome.raised:
            ctx.close()  # a second try must finish the job, if the first one raised
        assert not other.is_active()
        add = fz.attempt(lambda: ctx.add(b, Event.WRITE))
        fz.check_raised(add, frozenset({PollError}), call="add() after close()")
    finally:
        a.close()
        b.close()


@fz.xfail_bug("epoll-leftover-lost")
@pytest.mark.parametrize("api", [iopoll, pure_iopoll], ids=["c", "pure"])
def test_a_watcher_left_out_is_not_passed_over_by_one_just_reported(api: Any) -> None:
    """Bug epoll-leftover-lost (SPEC 4): a level watcher the Context cut by max_events comes
    out on the next call before one that the previous call reported."""
    pairs = [socket.socketpair() for _ in range(5)]
    try:
        with api.Context(api.Backend.EPOLL) as ctx:
            for name, (sock, _) in zip("ABCD", pairs[:4], strict=True):
                ctx.add(sock, Event.WRITE, name)
            ctx.add(pairs[4][0], Event.WRITE, "S")
            pairs[4][0].close()  # closed without remove(): a stale fd, one more in a batch
            assert len(ctx) == 4
            assert [w.data for w in ctx.wait(0, 0, 3)] == ["A", "B", "C"]  # D left out
            assert [w.data for w in ctx.wait(0, 0, 1)] == ["D"]
    finally:
        for pair in pairs:
            for sock in pair:
                sock.close()
