"""Differential: a Hypothesis state machine drives the implementation under test and the
select fallback (``iopoll_polyfill.fallback``, ``SELECT``) through the same random steps, and
compares what they report.

Each side has its own context and its own AF_UNIX socketpairs ("slots": a local end that is
watched, a peer end that the test drives), and every step is done on both: add, modify,
remove, close the local end, write / read / close the peer, fill / drain the local end, open a
new pair in a slot (the kernel reuses fd numbers), inspect ``len()`` and ``is_active()``, call
``wait()`` with bad arguments, and ``wait(0, 0, max_events)``.  Outcomes must agree: the same
exception class (a SPEC name) or none, and the same ``{data: events}`` from ``wait()``.

The two may differ only where SPEC lets them (``normalise``):

* ``READ_HANGUP`` is never reported by select (SPEC 6.2, 7); the implementation may report
  it, only when it was asked for, the backend supports it and the peer has closed.
* select finds a hang-up by peeking: while unread bytes remain, it reports no ``HANGUP``
  (SPEC 7), where a native backend does.
* After a reset (the peer closed with bytes it had not read), select reports ``ERROR|HANGUP``
  without ``READ``, where a native backend adds ``READ``; SPEC 7 lets select report ``ERROR``
  only once, so ``ERROR`` is not compared after a reset.
* With ``max_events``, which ready watchers come first is not specified: the cut is
  compared by its size, and what it and the next ``wait()`` return together.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import importlib
import operator
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from ..process import within
from ..streams import drain, fill
from ..support import SPEC_NAMES, socketpair

REFERENCE = "iopoll_polyfill.fallback"
SLOTS = 3
# The ends of a slot's socketpair.
LOCAL, PEER = 0, 1

# The plain argument errors SPEC section 1 refers to.
_BUILTIN_ERRORS = ("TypeError", "ValueError")

# Bad wait() arguments on which SPEC gives both the same error (floats excluded: the
# fallback refuses every float with TypeError, a native wait() only negative ones).
_BAD_WAITS: tuple[tuple[Any, Any, Any], ...] = (
    (-1, 0, None),
    (0, -1, None),
    (0, 1_000_000, None),
    (None, 1, None),
    (True, 0, None),
    ("1", 0, None),
    (0, 0, 0),
    (0, 0, -1),
    (0, 0, True),
    (0, 0, 2**31),
    (0, 0, 1.0),
)
# Seconds a bad wait() may block before the step fails: each is refused at once by a
# conforming side, and some (-1, None with microseconds) mean "for ever" if taken.
_REFUSE_WITHIN = 3.0

_EVENT_SETS = st.sets(st.sampled_from(["READ", "WRITE", "READ_HANGUP"]), min_size=1).filter(
    lambda names: "READ" in names or "WRITE" in names
)
_SLOT = st.integers(0, SLOTS - 1)


def event_names(event: Any) -> frozenset[str]:
    """The single-bit member names set in ``event`` (any implementation's ``Event``)."""
    members = type(event).__members__.items()
    return frozenset(
        name
        for name, member in members
        if member.value and member.value & (member.value - 1) == 0 and event & member == member
    )


def spec_error_name(api: ModuleType, exc: BaseException) -> str:
    """The most specific SPEC (or builtin) exception name ``exc`` is an instance of."""
    spec_classes = {id(getattr(api, name)): name for name in SPEC_NAMES if hasattr(api, name)}
    for cls in type(exc).__mro__:  # most derived first
        name = spec_classes.get(id(cls))
        if name is not None:
            return name
    for name in _BUILTIN_ERRORS:
        if isinstance(exc, getattr(builtins, name)):
            return name
    raise exc  # the reference raised something SPEC never names: a test or reference bug


def attempt(call: Callable[[], Any]) -> tuple[Any, Exception | None]:
    """``(result, None)``, or ``(None, exception)`` when ``call`` raised."""
    try:
        return call(), None
    except Exception as exc:
        return None, exc


@dataclass
class Slot:
    """What both sides did to one socketpair, for the normalisation rules."""

    local_open: bool = True
    peer_open: bool = True
    to_local: int = 0  # bytes the peer sent that the local end has not read
    to_peer: int = 0  # bytes the local end sent that the peer has not read
    reset: bool = False  # the peer closed with bytes unread: the local end was reset


class Side:
    """One implementation's context, socketpairs and watchers."""

    def __init__(self, api: ModuleType, backend: Any) -> None:
        self.api = api
        self.ctx = api.Context(backend)
        self.pairs = [socketpair() for _ in range(SLOTS)]
        self.current: list[Any] = [None] * SLOTS  # the slot's latest watcher, maybe inactive
        self.watchers: list[Any] = []  # every watcher add() returned, in order

    def events(self, names: frozenset[str] | set[str]) -> Any:
        return functools.reduce(operator.or_, (self.api.Event[name] for name in sorted(names)))

    def close(self) -> None:
        self.ctx.close()
        for local, peer in self.pairs:
            local.close()
            peer.close()


def _read_all(sock: socket.socket) -> None:
    """Read what ``sock`` holds; an error (a reset, a closed peer) ends it as end of file does."""
    with contextlib.suppress(OSError):
        drain(sock)


class Differential(RuleBasedStateMachine):
    """The same steps on the implementation under test and on the reference."""

    # Set by ``bind``: the implementation under test, its backend, and whether that backend
    # reports READ_HANGUP.
    api: ClassVar[ModuleType]
    backend: ClassVar[Any]
    read_hangup: ClassVar[bool]

    @classmethod
    def bind(cls, api: ModuleType, backend: Any, read_hangup: bool) -> type[Differential]:
        """This machine for one implementation and backend."""
        return type(
            f"Differential_{backend.name}",
            (cls,),
            {"api": api, "backend": backend, "read_hangup": read_hangup},
        )

    def __init__(self) -> None:
        super().__init__()
        reference = importlib.import_module(REFERENCE)
        self.impl = Side(self.api, self.backend)
        self.ref = Side(reference, reference.Backend.SELECT)
        self.slots = [Slot() for _ in range(SLOTS)]
        self.serial = 0
        self.slot_of: dict[int, int] = {}  # data -> slot
        self.asked: dict[int, frozenset[str]] = {}  # data -> event names watched

    def teardown(self) -> None:
        self.impl.close()
        self.ref.close()

    # -- choosing slots ---------------------------------------------------------------------

    def slots_where(self, **state: bool) -> list[int]:
        """The slots whose ``Slot`` fields have the values given."""
        return [
            index
            for index, slot in enumerate(self.slots)
            if all(getattr(slot, name) == value for name, value in state.items())
        ]

    def watched_slots(self) -> list[int]:
        """The slots with a watcher (maybe inactive) to modify or remove."""
        return [index for index, watcher in enumerate(self.ref.current) if watcher is not None]

    @staticmethod
    def pick(data: st.DataObject, slots: list[int]) -> int:
        return data.draw(st.sampled_from(slots), label="slot")

    def on_both(self, slot: int, end: int, action: Callable[[socket.socket], Any]) -> list[Any]:
        """``action`` on one end of the slot's pair, the reference's then ours; the results."""
        return [action(side.pairs[slot][end]) for side in (self.ref, self.impl)]

    # -- comparing outcomes ------------------------------------------------------------------

    def agree(self, step: str, ref_error: Exception | None, impl_error: Exception | None) -> None:
        if ref_error is None:
            assert impl_error is None, (
                f"{step}: the reference succeeded, the implementation raised {impl_error!r}"
            )
            return
        name = spec_error_name(self.ref.api, ref_error)
        assert impl_error is not None, (
            f"{step}: the reference raised {name} ({ref_error}), the implementation did not"
        )
        expected = getattr(self.impl.api, name, None) or getattr(builtins, name)
        assert isinstance(impl_error, expected), (
            f"{step}: the reference raised {name} ({ref_error}), "
            f"the implementation raised {impl_error!r}"
        )

    def both(self, step: str, action: Callable[[Side], Any]) -> tuple[Any, Any]:
        ref_result, ref_error = attempt(lambda: action(self.ref))
        impl_result, impl_error = attempt(lambda: action(self.impl))
        self.agree(step, ref_error, impl_error)
        return ref_result, impl_result

    def report(self, side: Side, ready: Any, step: str) -> dict[int, frozenset[str]]:
        """``{data: event names}`` of a wait's result, checking each entry is a watcher."""
        ready = list(ready)
        known = {id(w) for w in side.watchers}
        assert len({id(w) for w in ready}) == len(ready), f"{step}: a watcher came twice"
        for watcher in ready:
            assert id(watcher) in known, f"{step}: returned {watcher!r}, not from add()"
        return {w.data: event_names(w.triggered_events) for w in ready}

    def normalise(
        self, data: int, ref: frozenset[str], impl: frozenset[str]
    ) -> tuple[set[str], set[str]]:
        """Remove the differences SPEC allows between select and the implementation."""
        slot = self.slots[self.slot_of[data]]
        ref_set, impl_set = set(ref), set(impl)
        assert "READ_HANGUP" not in ref_set, "the reference reported READ_HANGUP"
        if "READ_HANGUP" in impl_set:
            assert "READ_HANGUP" in self.asked[data], f"READ_HANGUP reported unasked: {impl}"
            assert self.read_hangup, f"READ_HANGUP reported by a backend without it: {impl}"
            assert not slot.peer_open, f"READ_HANGUP reported with the peer open: {impl}"
            impl_set.discard("READ_HANGUP")
        if not slot.peer_open and slot.to_local:
            ref_set.discard("HANGUP")  # select sees the bytes first (SPEC 7)
            impl_set.discard("HANGUP")
        if slot.reset:
            if "ERROR" in ref_set:  # select's one report of the reset: ERROR|HANGUP
                ref_set.discard("READ")
                impl_set.discard("READ")
            ref_set.discard("ERROR")
            impl_set.discard("ERROR")
        return ref_set, impl_set

    def compare(
        self, step: str, ref: dict[int, frozenset[str]], impl: dict[int, frozenset[str]]
    ) -> None:
        for data in sorted(set(ref) | set(impl)):
            ref_set, impl_set = self.normalise(
                data, ref.get(data, frozenset()), impl.get(data, frozenset())
            )
            if ref_set or impl_set:
                assert ref_set == impl_set, (
                    f"{step}: watcher data={data} (slot {self.slot_of[data]}): the reference "
                    f"reported {sorted(ref.get(data, ()))}, the implementation "
                    f"{sorted(impl.get(data, ()))}"
                )

    # -- the Context and Watcher API ---------------------------------------------------------

    @initialize(
        watch=st.lists(
            st.none() | st.tuples(_EVENT_SETS, st.booleans()), min_size=SLOTS, max_size=SLOTS
        )
    )
    def start(self, watch: list[tuple[set[str], bool] | None]) -> None:
        """Most runs start with watchers: the interesting steps need some."""
        for slot, choice in enumerate(watch):
            if choice is not None:
                self.add(slot, *choice)

    @rule(slot=_SLOT, names=_EVENT_SETS, oneshot=st.booleans())
    def add(self, slot: int, names: set[str], oneshot: bool) -> None:
        self.serial += 1
        data = self.serial
        wanted = frozenset(names | {"ONESHOT"} if oneshot else names)

        def add(side: Side) -> Any:
            watcher = side.ctx.add(side.pairs[slot][LOCAL], side.events(wanted), data)
            side.current[slot] = watcher
            side.watchers.append(watcher)
            return watcher

        ref, impl = self.both(f"add(slot {slot}, {sorted(wanted)})", add)
        if ref is not None:
            self.slot_of[data] = slot
            self.asked[data] = wanted
            assert impl.data == data and impl.watched_events == self.impl.events(wanted)

    @precondition(lambda self: self.watched_slots())
    @rule(data=st.data(), names=_EVENT_SETS, oneshot=st.booleans(), new_data=st.booleans())
    def modify(self, data: st.DataObject, names: set[str], oneshot: bool, new_data: bool) -> None:
        slot = self.pick(data, self.watched_slots())
        wanted = frozenset(names | {"ONESHOT"} if oneshot else names)
        serial = self.serial + 1 if new_data else self.ref.current[slot].data

        def modify(side: Side) -> None:
            watcher = side.current[slot]
            if new_data:
                watcher.modify(side.events(wanted), serial)
            else:
                watcher.modify_events(side.events(wanted))

        _, error = attempt(lambda: modify(self.ref))
        _, impl_error = attempt(lambda: modify(self.impl))
        self.agree(f"modify(slot {slot}, {sorted(wanted)})", error, impl_error)
        if error is None:
            self.serial = max(self.serial, serial)
            self.slot_of[serial] = slot
            self.asked[serial] = wanted
        assert self.impl.current[slot].data == self.ref.current[slot].data

    @precondition(lambda self: self.watched_slots())
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        slot = self.pick(data, self.watched_slots())
        self.both(f"remove(slot {slot})", lambda side: side.current[slot].remove())

    @rule()
    def inspect(self) -> None:
        ref_len, impl_len = self.both("len(ctx)", lambda side: len(side.ctx))
        assert ref_len == impl_len, f"len(ctx): reference {ref_len}, implementation {impl_len}"
        for ref_w, impl_w in zip(self.ref.watchers, self.impl.watchers, strict=True):
            ref_active, impl_active = ref_w.is_active(), impl_w.is_active()
            assert ref_active == impl_active, (
                f"is_active() of watcher data={ref_w.data} (slot {self.slot_of[ref_w.data]}): "
                f"reference {ref_active}, implementation {impl_active}"
            )

    @rule(max_events=st.sampled_from([None, None, 1, 2]))
    def wait(self, max_events: int | None) -> None:
        step = f"wait(0, 0, {max_events})"
        ref_ready, impl_ready = self.both(step, lambda side: side.ctx.wait(0, 0, max_events))
        ref = self.report(self.ref, ref_ready, step)
        impl = self.report(self.impl, impl_ready, step)
        if max_events is None:
            self.compare(step, ref, impl)
            return
        assert len(impl) <= max_events, f"{step} returned {len(impl)} watchers"
        assert len(impl) == len(ref), (
            f"{step}: the reference returned {len(ref)} watchers, the implementation {len(impl)}"
        )
        # Left-out watchers come out next; a left-out one-shot was not consumed.
        then = "wait(0, 0, None) after " + step
        ref_next, impl_next = self.both(then, lambda side: side.ctx.wait(0, 0, None))
        ref = {**self.report(self.ref, ref_next, then), **ref}
        impl = {**self.report(self.impl, impl_next, then), **impl}
        self.compare(f"{step} then wait(0, 0, None), together", ref, impl)

    @rule(arguments=st.sampled_from(_BAD_WAITS))
    def bad_wait(self, arguments: tuple[Any, Any, Any]) -> None:
        step = f"wait{arguments!r}"
        self.both(
            step,
            lambda side: within(
                _REFUSE_WITHIN, lambda: side.ctx.wait(*arguments), f"{step}, not refused,"
            ),
        )

    # -- the streams ---------------------------------------------------------------------

    def read_out(self, slot: int, end: int) -> None:
        """Read all that one end of the slot's pair holds, on both sides: nothing is left
        unread there, and reading the local end consumes a reset's error too."""
        self.on_both(slot, end, _read_all)
        state = self.slots[slot]
        if end == LOCAL:
            state.to_local = 0
            state.reset = False  # reading consumed the error on both sides
        else:
            state.to_peer = 0

    @precondition(lambda self: self.slots_where(local_open=True))
    @rule(data=st.data())
    def close_local(self, data: st.DataObject) -> None:
        slot = self.pick(data, self.slots_where(local_open=True))
        self.on_both(slot, LOCAL, socket.socket.close)
        self.slots[slot].local_open = False

    @precondition(lambda self: self.slots_where(local_open=False))
    @rule(data=st.data())
    def renew(self, data: st.DataObject) -> None:
        """A new pair in a closed slot: the kernel hands out the freed fd numbers again."""
        slot = self.pick(data, self.slots_where(local_open=False))
        for side in (self.ref, self.impl):
            side.pairs[slot][PEER].close()
            side.pairs[slot] = socketpair()
        self.slots[slot] = Slot()

    @precondition(lambda self: self.slots_where(peer_open=True))
    @rule(data=st.data(), size=st.sampled_from([1, 100, 5000]))
    def peer_write(self, data: st.DataObject, size: int) -> None:
        slot = self.pick(data, self.slots_where(peer_open=True))
        state = self.slots[slot]
        sent = set()
        for side in (self.ref, self.impl):
            try:
                sent.add(side.pairs[slot][PEER].send(b"p" * size))
            except OSError:
                sent.add(0)
        assert len(sent) == 1, "the two sides' sockets disagree"
        state.to_local += sent.pop()

    @precondition(lambda self: self.slots_where(peer_open=True))
    @rule(data=st.data())
    def peer_read(self, data: st.DataObject) -> None:
        slot = self.pick(data, self.slots_where(peer_open=True))
        self.read_out(slot, PEER)

    @precondition(lambda self: self.slots_where(peer_open=True))
    @rule(data=st.data())
    def peer_close(self, data: st.DataObject) -> None:
        slot = self.pick(data, self.slots_where(peer_open=True))
        state = self.slots[slot]
        self.on_both(slot, PEER, socket.socket.close)
        state.peer_open = False
        state.reset = state.to_peer > 0
        state.to_peer = 0

    @precondition(lambda self: self.slots_where(local_open=True))
    @rule(data=st.data())
    def local_read(self, data: st.DataObject) -> None:
        slot = self.pick(data, self.slots_where(local_open=True))
        self.read_out(slot, LOCAL)

    @precondition(lambda self: self.slots_where(local_open=True, peer_open=True))
    @rule(data=st.data())
    def local_fill(self, data: st.DataObject) -> None:
        slot = self.pick(data, self.slots_where(local_open=True, peer_open=True))
        sent = set(self.on_both(slot, LOCAL, fill))
        assert len(sent) == 1, "the two sides' sockets disagree"
        self.slots[slot].to_peer += sent.pop()


class DifferentialRules:
    """Hypothesis stateful test against the select fallback as reference.

    Subclasses may raise ``differential_examples`` / ``differential_steps`` for a longer
    search; the defaults keep the run short enough for CI.  Set the environment variable
    ``CI`` to make the search deterministic.
    """

    differential_examples: ClassVar[int] = 100
    differential_steps: ClassVar[int] = 40

    def test_same_reports_as_select_fallback(
        self, api: ModuleType, backend: Any, caps: Any
    ) -> None:
        """Random add/modify/remove/close/peer steps: the reports agree with select's."""
        run_state_machine_as_test(
            Differential.bind(api, backend, caps.read_hangup),
            settings=settings(
                max_examples=self.differential_examples,
                stateful_step_count=self.differential_steps,
                deadline=None,
                database=None,
                derandomize=bool(os.environ.get("CI")),
                report_multiple_bugs=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )
