"""The Context soak's model: what the soak did, and from that what a ``wait()`` must, may and
must not report.

The OS decides readiness, so the model states only what follows for sure from what the soak
did to its streams (bytes sent and not read, a peer closed, a send queue that is empty), plus
kernel counts it asks for itself (``FIONREAD``, ``TIOCOUTQ``, ``pending()``) where TCP's
timing or TLS's framing leave the counters short of a fact.  Three verdicts per watcher:

* **must**: it is certain to be ready, so ``wait()`` has to report it (within the
  ``max_events`` rotation);
* **may**: it could be ready; anything else reported is a violation;
* everything else must not be reported: watchers of closed streams, removed ones, fired
  one-shots, edge watchers with no new transition, ``READ`` watchers with nothing to read.

``docs/reliability.md`` states every rule with its reason.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from _iopoll_core.events import Event

from .common import Violation
from .streams import Pair, inq, outq

__all__ = ["EDGE_GRACE", "Expectation", "Model", "SlotModel", "WatcherModel"]

# An edge watcher on TCP or TLS may report again this long after the last operation on its
# streams: the kernel wakes a TCP socket from its own ACK processing (a window update for a
# socket it once found unwritable), which comes when it comes.
EDGE_GRACE = 0.5

_MODES = Event.ONESHOT | Event.EDGE_TRIGGERED
_RESERVED = Event.PRIORITY | Event.TIMER | Event.NOTIFY | Event.SIGNAL | Event.PROCESS | _MODES
_SOCKETS = ("unix", "tcp", "tls")


@dataclass(eq=False)
class SlotModel:
    """One pair of streams and what the soak did to it."""

    index: int
    pair: Pair
    local_open: bool = True
    peer_open: bool = True
    peer_shut: bool = False  # the peer shut down its writing side
    reset: bool = False  # the peer closed with bytes unread: the local end is reset
    to_local: int = 0  # bytes the peer wrote that the local end has not read
    to_peer: int = 0  # bytes the local end wrote that the peer has not read
    filled: bool = False  # the local end's writes were refused since the peer last drained
    unsure: bool = False  # a settle timed out: no "must" for this slot any more
    kept: bool = False  # the local end was closed while a dup keeps its file open
    serial: int = 0  # bumped by every operation on either end
    last_activity: float = 0.0  # when that last happened (monotonic)
    watcher: WatcherModel | None = None  # the current watcher (active, maybe a fired one-shot)

    @property
    def kind(self) -> str:
        return self.pair.kind

    def touch(self) -> None:
        """Record an operation on either end (edge watchers may report after one)."""
        self.serial += 1
        self.last_activity = time.monotonic()

    def peer_gone(self) -> bool:
        """End of file is visible on the local end (peer closed or shut down writing)."""
        return not self.peer_open or self.peer_shut

    def fd_readable_sure(self) -> bool:
        """The local fd itself is readable for sure (TLS ``pending()`` not counted)."""
        if self.kind == "pipe-w":
            return not self.peer_open  # the reader is gone: ERROR
        if self.peer_gone() or self.reset:
            return True
        if self.to_local == 0:
            return False
        if self.kind == "tls":
            return inq(self.pair.local) > 0  # the rest may be in the SSL object or in flight
        return True

    def readable_sure(self) -> bool:
        """A level ``READ`` watcher is ready for sure (SPEC 6.6: TLS buffered bytes count)."""
        if self.fd_readable_sure():
            return True
        return self.kind == "tls" and self.to_local > 0 and self.pair.local.pending() > 0

    def readable_possible(self) -> bool:
        """A ``READ`` watcher could be ready: there is something to read, or end of file."""
        if self.kind == "pipe-w":
            return not self.peer_open
        return self.to_local > 0 or self.peer_gone() or self.reset

    def hangup_sure(self, select_semantics: bool) -> bool:
        """``ERROR`` or ``HANGUP`` is reported for sure, asked or not (SPEC 6.2).

        select() sees a hang-up through the read set, and a fd readable only for bytes its
        watcher did not ask for is parked (SPEC 7): only sure there with nothing unread.
        """
        if select_semantics and self.to_local:
            return False
        if self.kind in ("unix", "pipe-r", "pipe-w"):
            return not self.peer_open
        return self.reset

    def writable_sure(self) -> bool:
        """The local end is writable for sure: nothing of its writes is still queued."""
        if self.kind == "pipe-r" or self.filled or self.to_peer:
            return False
        if self.kind == "pipe-w":
            return self.peer_open  # an empty pipe (a gone reader is hangup_sure's)
        return outq(self.pair.local) == 0

    def hangup_possible(self) -> bool:
        """``ERROR``/``HANGUP`` may be reported: the peer closed, shut down, or reset."""
        return self.peer_gone() or self.reset


@dataclass(eq=False)
class WatcherModel:
    """One watcher ``add()`` returned, as the model sees it."""

    watcher: Any
    slot: SlotModel
    events: Event
    data: Any
    serial: int  # which add() made it, for the messages
    armed: bool = True  # False: a one-shot that fired and was not re-armed
    state: str = "active"  # "active", "removed" (remove()) or "retired" (stream closed)
    seen: int = 0  # the slot's serial when last reported or armed (edge watchers)
    edge_due: bool = False  # an edge it must report (a transition the soak caused)
    late_ok: bool = False  # a one-shot cut by max_events: may still come out, stale
    reports: int = 0
    # The flags of ``events``, as plain booleans (IntFlag arithmetic is slow); kept in step
    # by ``__setattr__``.
    reads: bool = field(init=False, default=False)
    writes: bool = field(init=False, default=False)
    oneshot: bool = field(init=False, default=False)
    edge: bool = field(init=False, default=False)

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name == "events":
            super().__setattr__("reads", bool(value & Event.READ))
            super().__setattr__("writes", bool(value & Event.WRITE))
            super().__setattr__("oneshot", bool(value & Event.ONESHOT))
            super().__setattr__("edge", bool(value & Event.EDGE_TRIGGERED))

    def name(self) -> str:
        return f"watcher #{self.serial} (slot {self.slot.index} {self.slot.kind}, {self.events!r})"


@dataclass
class Expectation:
    """The verdicts for one ``wait()``, computed just before it."""

    must: list[WatcherModel] = field(default_factory=list)
    may: set[int] = field(default_factory=set)  # id() of the WatcherModels that may come
    competitors: int = 0  # how many watchers may take a max_events slot


class Model:
    """Every watcher and slot of one walk, and the checks of every ``wait()``."""

    def __init__(self, backend: Any, edge: bool, read_hangup: bool) -> None:
        self.backend = backend
        self.supports_edge = edge
        self.supports_read_hangup = read_hangup
        self.select_semantics = backend.name == "SELECT"
        self.slots: list[SlotModel] = []
        self.by_watcher: dict[int, WatcherModel] = {}  # id(Watcher) -> its model
        self.ghosts: list[WatcherModel] = []  # recent removed/retired ones, kept alive
        self.serial = 0
        self.reports = 0
        self.waits = 0
        # Waits where a TLS watcher was due only to bytes in its SSL object (SPEC 6.6).
        self.pending_only = 0

    # -- bookkeeping ----------------------------------------------------------------------------

    def active(self) -> list[WatcherModel]:
        """The watchers ``len(ctx)`` counts (fired one-shots included)."""
        return [slot.watcher for slot in self.slots if slot.watcher is not None]

    def added(self, slot: SlotModel, watcher: Any, events: Event, data: Any) -> WatcherModel:
        """Record a watcher ``add()`` returned for the slot's local end."""
        self.serial += 1
        model = WatcherModel(watcher, slot, events, data, self.serial)
        slot.watcher = model
        self.by_watcher[id(watcher)] = model
        self.armed(model)
        return model

    def armed(self, model: WatcherModel) -> None:
        """``add`` or ``modify``: armed, and an edge watcher may report what is ready now."""
        model.armed = True
        model.late_ok = False
        if model.edge:
            model.seen = model.slot.serial - 1
            model.edge_due = self.fd_ready_sure(model)

    def retire(self, model: WatcherModel, state: str) -> None:
        """The watcher left: ``remove()`` (``removed``) or its stream closed (``retired``)."""
        model.state = state
        model.slot.watcher = None
        self.ghosts.append(model)
        if len(self.ghosts) > 32:
            old = self.ghosts.pop(0)
            del self.by_watcher[id(old.watcher)]

    def transition(self, slot: SlotModel, read: bool, write: bool, hangup: bool) -> None:
        """The soak caused an edge on the slot's local end: bytes came (``read``), its
        queue drained after a fill (``write``), or the peer left (``hangup``)."""
        model = slot.watcher
        if model is None or not model.edge or slot.unsure:
            return
        if (
            (read and model.reads)
            or (write and model.writes)
            or (hangup and self.fd_ready_sure(model))
        ):
            model.edge_due = True

    # -- verdicts -------------------------------------------------------------------------------

    def ready_sure(self, model: WatcherModel, readable_sure: Callable[[], bool]) -> bool:
        """The slot is ready for the watcher's events for sure, ``readable_sure`` saying
        whether it is readable (the fd itself, or with TLS buffered bytes counted)."""
        if model.reads and readable_sure():
            return True
        if model.writes and model.slot.writable_sure():
            return True
        return model.slot.hangup_sure(self.select_semantics)

    def fd_ready_sure(self, model: WatcherModel) -> bool:
        """The fd is ready for the watcher's events for sure (what epoll's edge sees)."""
        slot = model.slot
        if slot.unsure or not slot.local_open:
            return False
        return self.ready_sure(model, slot.fd_readable_sure)

    def must(self, model: WatcherModel) -> bool:
        """Whether ``wait()`` has to report this watcher now."""
        if model.state != "active" or not model.armed:
            return False
        if model.edge:
            # epoll re-polls a queued item before reporting it: an edge whose fd is no
            # longer ready (drained since) is dropped, so it is owed only while ready.
            return model.edge_due and self.fd_ready_sure(model)
        if model.slot.unsure:
            return False
        return self.ready_sure(model, model.slot.readable_sure)

    def may(self, model: WatcherModel) -> bool:
        """Whether ``wait()`` may report this watcher now."""
        if model.state != "active" or not model.armed:
            return False
        if model.late_ok:
            return True
        slot = model.slot
        if model.edge:
            if slot.serial > model.seen:  # an operation on its streams since its report
                return True
            tcp = slot.kind in ("tcp", "tls")
            if tcp and model.writes and slot.filled:
                # Its send queue drains as the peer's kernel takes more into a receive
                # window that grows by itself, with no operation of the soak: each ACK that
                # frees room is a write edge, seconds later (seed 20261204, step 70,610:
                # 2.0 s after the fill, 69,033 bytes still unacknowledged).
                return True
            return tcp and time.monotonic() - slot.last_activity < EDGE_GRACE
        if model.writes:
            return True  # writability is the kernel's call
        return slot.readable_possible()

    def expect(self) -> Expectation:
        """The verdicts for the next ``wait()``."""
        expectation = Expectation()
        for model in self.active():
            if self.must(model):
                expectation.must.append(model)
                expectation.may.add(id(model))
                slot = model.slot
                if (
                    slot.kind == "tls"
                    and model.reads
                    and not model.edge
                    and not (slot.fd_readable_sure() or (model.writes and slot.writable_sure()))
                ):
                    self.pending_only += 1
            elif self.may(model):
                expectation.may.add(id(model))
        expectation.competitors = len(expectation.may)
        return expectation

    def rotation_calls(self, expectation: Expectation, max_events: int) -> int:
        """How many ``wait(0, max_events=k)`` calls report every ready watcher at least once:
        ``ceil(n / k)``, n being every watcher that may take a slot."""
        return max(1, math.ceil(expectation.competitors / max_events))

    # -- checking one wait() ----------------------------------------------------------------------

    def check(
        self,
        what: str,
        result: Any,
        expectation: Expectation,
        max_events: int | None,
        require_all: bool,
    ) -> list[WatcherModel]:
        """Check one ``wait()`` result against ``expectation`` and update the model.

        ``require_all``: every "must" watcher is in this result (``max_events=None``); else
        only that the ``max_events`` slots were not wasted (the rotation checks the rest).
        Returns the models of the watchers reported.
        """
        self.waits += 1
        if type(result) is not list:
            raise Violation(f"{what} returned {type(result).__name__}, not a list")
        if max_events is not None and len(result) > max_events:
            raise Violation(f"{what} returned {len(result)} watchers, more than max_events")
        reported: list[WatcherModel] = []
        seen: set[int] = set()
        for watcher in result:
            model = self.by_watcher.get(id(watcher))
            if model is None or model.watcher is not watcher:
                raise Violation(f"{what} returned {watcher!r}, which is no watcher of this walk")
            if id(model) in seen:
                raise Violation(f"{what} returned {model.name()} twice (one entry per watcher)")
            seen.add(id(model))
            self._check_one(what, model, watcher, expectation)
            reported.append(model)
        must_ids = {id(model) for model in expectation.must}
        if require_all:
            missing = [model for model in expectation.must if id(model) not in seen]
            if missing:
                raise Violation(
                    f"{what} left out {', '.join(m.name() for m in missing)}, which "
                    f"{'is' if len(missing) == 1 else 'are'} ready for sure: "
                    + "; ".join(self.why(m) for m in missing)
                )
        elif max_events is not None and len(result) < min(max_events, len(must_ids)):
            raise Violation(
                f"{what} returned {len(result)} watchers while {len(must_ids)} are ready for "
                f"sure ({', '.join(m.name() for m in expectation.must)})"
            )
        self._consume(reported, expectation, max_events, len(result))
        return reported

    def _check_one(
        self, what: str, model: WatcherModel, watcher: Any, expectation: Expectation
    ) -> None:
        name = model.name()
        if model.state == "retired":
            raise Violation(f"{what} reported {name}, whose stream was closed (SPEC 6.8)")
        if model.state == "removed":
            raise Violation(f"{what} reported {name}, which was removed")
        if id(model) not in expectation.may:
            if not model.armed:
                reason = "a one-shot that fired and was not re-armed (SPEC 6.4)"
            elif model.edge:
                reason = "an edge watcher with no new transition since its last report (SPEC 6.5)"
            else:
                reason = f"a READ watcher with nothing to read ({self.why(model)})"
            raise Violation(f"{what} reported {name}: {reason}")
        if watcher.data is not model.data:
            raise Violation(f"{what}: {name} has data {watcher.data!r}, not {model.data!r}")
        triggered = watcher.triggered_events
        if not isinstance(triggered, Event) or not triggered:
            raise Violation(f"{what}: {name} reported {triggered!r}: no event")
        allowed = self._allowed(model)
        if triggered & ~allowed or triggered & _RESERVED:
            raise Violation(
                f"{what}: {name} reported {triggered!r}; allowed here: {allowed!r} "
                f"({self.why(model)})"
            )
        self._check_required_flags(what, model, triggered)

    def _allowed(self, model: WatcherModel) -> Event:
        slot = model.slot
        allowed = Event(0)
        if slot.hangup_possible():
            allowed |= Event.ERROR | Event.HANGUP
            if model.events & Event.READ_HANGUP and self.supports_read_hangup:
                allowed |= Event.READ_HANGUP
        return allowed | (model.events & (Event.READ | Event.WRITE))

    def _check_required_flags(self, what: str, model: WatcherModel, triggered: Event) -> None:
        """A level watcher ready for sure with the peer there reports what it is ready for.

        Not a one-shot that a ``max_events`` cut left out: it keeps what it had when it was
        cut (epoll disarmed it as it returned it, so nothing newer is known).
        """
        slot = model.slot
        if model.edge or model.late_ok or slot.unsure or slot.hangup_possible():
            return
        if model.reads and slot.readable_sure() and not triggered & Event.READ:
            raise Violation(f"{what}: {model.name()} has bytes to read but reported {triggered!r}")
        if model.writes and slot.writable_sure() and not triggered & Event.WRITE:
            raise Violation(f"{what}: {model.name()} is writable but reported {triggered!r}")

    def _consume(
        self,
        reported: list[WatcherModel],
        expectation: Expectation,
        max_events: int | None,
        count: int,
    ) -> None:
        """What a report does: one-shots fire, edges are used up."""
        self.reports += len(reported)
        done = {id(model) for model in reported}
        for model in reported:
            model.reports += 1
            model.late_ok = False
            if model.oneshot:
                model.armed = False
            if model.edge:
                model.seen = model.slot.serial
                model.edge_due = False
        if max_events is not None and count == max_events:
            # A one-shot the cut left out keeps what it had (SPEC 4): it may come out later
            # even if the fd is no longer ready.
            for model in self.active():
                if id(model) in expectation.may and id(model) not in done and model.oneshot:
                    model.late_ok = True

    def why(self, model: WatcherModel) -> str:
        """The facts behind a verdict, for the messages."""
        slot = model.slot
        facts = [
            f"to_local={slot.to_local}",
            f"to_peer={slot.to_peer}",
            f"peer {'open' if slot.peer_open else 'closed'}",
        ]
        if slot.peer_shut:
            facts.append("peer shut down writing")
        if slot.reset:
            facts.append("reset")
        if slot.filled:
            facts.append("filled")
        if not model.armed:
            facts.append("fired")
        if slot.local_open:
            try:
                facts.append(f"FIONREAD={inq(slot.pair.local)}")
                if slot.kind in _SOCKETS:
                    facts.append(f"TIOCOUTQ={outq(slot.pair.local)}")
                if slot.kind == "tls":
                    facts.append(f"pending={slot.pair.local.pending()}")
            except (OSError, ValueError):
                pass
        return ", ".join(facts)

    # -- the model's own consistency -----------------------------------------------------------

    def self_check(self) -> None:
        """The kernel agrees with the counters (a failure here is a bug of the model)."""
        for slot in self.slots:
            if not slot.local_open or slot.unsure or slot.reset:
                continue
            local = slot.pair.local
            if slot.kind in ("unix", "tcp", "pipe-r"):
                waiting = inq(local)
                if waiting != slot.to_local:
                    raise Violation(
                        f"model: slot {slot.index} ({slot.kind}) holds {waiting} bytes, the "
                        f"model counts {slot.to_local}",
                        model_bug=True,
                    )
            elif slot.kind == "tls" and slot.to_local == 0 and (inq(local) or local.pending()):
                raise Violation(
                    f"model: TLS slot {slot.index} has bytes the model does not know of",
                    model_bug=True,
                )
