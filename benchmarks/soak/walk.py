"""The state of one Context walk and its watcher operations: the base ``ContextWalk``
(``context.py``) builds on, with the waits (``walk_waits.py``) and the stream traffic
(``walk_streams.py``) beside it.

``Walk`` owns everything a step reads: the Context under test, the slots of streams with
their model, the seeded generator and the log.  The operations here add, modify, re-arm and
remove watchers, inspect them, and make the calls SPEC says must be refused.
"""

from __future__ import annotations

import functools
import os
import random
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import iopoll
from _iopoll_core.events import ErrorCode, Event

from .common import OpLog, Violation
from .model import Expectation, Model, SlotModel, WatcherModel
from .streams import KINDS, Pair, Streams

if TYPE_CHECKING:
    from .context import ContextTarget

__all__ = ["SLOTS", "Walk"]

SLOTS = 8


class Walk:
    """One walk's state (a Context, its slots of streams, the model) and its watcher
    operations; the waits and the traffic are the mixins ``ContextWalk`` adds."""

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
