"""``Watcher``: one registration of a handle in a context."""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from .errors import InactiveWatcherError
from .events import MODES, NO_EVENTS, Event, registers_oneshot
from .handles import Handle, _Uncopyable

if TYPE_CHECKING:
    from .context_state import ContextState

__all__ = ["Watcher", "ACTIVE", "RETIRED", "REMOVED"]

ACTIVE = 0
RETIRED = 1  # its stream was closed: inactive, and remove() is a no-op
REMOVED = 2  # removed, or its context closed: inactive, and remove() raises


class Watcher(_Uncopyable):
    """A handle registered in a ``Context``, with what it watches and the user's data.

    Only ``Context.add`` makes watchers.  A watcher holds its context weakly, so a context
    that is garbage collected leaves its watchers inactive.
    """

    __slots__ = (
        "_context",
        "_fd",
        "_handle",
        "_probe",
        "_data",
        "_events",
        "_kind",
        "_oneshot",
        "_plain",
        "_armed",
        "_triggered",
        "_state",
        "__weakref__",
    )

    _context: weakref.ReferenceType[ContextState]
    _fd: int
    _handle: Handle
    _probe: Callable[[], int]
    _data: Any
    _events: Event
    # Event(0) for a stream's watcher; for a handle that is not a stream, the one event it
    # reports (TIMER, NOTIFY, SIGNAL, PROCESS).
    _kind: Event
    _oneshot: bool  # watched one-shot (always, for a process: one report per context)
    # A report of it is only decoded: a stream's level or edge watcher.  wait()'s fast path
    # (and its C version) takes only these; every other report goes through _collect.
    _plain: bool
    _armed: bool
    _triggered: Event
    _state: int

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("Watcher objects are made by Context.add(), not directly")

    @classmethod
    def _make(
        cls,
        context: weakref.ReferenceType[ContextState],
        fd: int,
        handle: Handle,
        probe: Callable[[], int],
        events: Event,
        data: Any,
    ) -> Watcher:
        watcher = cls.__new__(cls)
        watcher._context = context
        watcher._fd = fd
        watcher._handle = handle
        watcher._probe = probe
        watcher._data = data
        watcher._kind = handle._event
        watcher._set_events(events)
        watcher._triggered = NO_EVENTS
        watcher._state = ACTIVE
        return watcher

    def _set_events(self, events: Event) -> None:
        """Watch ``events`` from now on, armed (the Context has told the OS already)."""
        self._events = events
        self._oneshot = registers_oneshot(events)
        self._plain = not self._oneshot and not self._kind
        self._armed = True

    @property
    def handle(self) -> Handle:
        """The handle this watcher watches."""
        return self._handle

    if TYPE_CHECKING:

        @property
        def data(self) -> Any:
            """The user data given to ``add`` or ``modify``."""

    else:
        # A loop reads it for every report: a C getter (no Python frame) behind the
        # property.  iopoll's C accelerator replaces it with a read-only slot member.
        data = property(
            operator.attrgetter("_data"), doc="The user data given to ``add`` or ``modify``."
        )

    @property
    def watched_events(self) -> Event:
        """What this watcher asks for, modes such as ``ONESHOT`` included."""
        return self._events

    @property
    def triggered_events(self) -> Event:
        """What the last ``wait()`` that returned this watcher reported (``Event(0)`` before)."""
        return self._triggered

    def has_triggered(self, event: Event) -> bool:
        """Whether every readiness flag of ``event`` is in ``triggered_events`` (the modes,
        ``ONESHOT`` and ``EDGE_TRIGGERED``, are left out; nothing left: ``False``)."""
        if not isinstance(event, Event):
            raise TypeError(f"event must be an Event, not {type(event).__name__}")
        wanted = event.value & ~MODES.value
        return wanted != 0 and self._triggered.value & wanted == wanted

    def is_active(self) -> bool:
        """False once removed, once its context is closed or gone, or once its stream is closed."""
        if self._state != ACTIVE:
            return False
        context = self._context()
        if context is None:
            return False
        return context._check_alive(self)

    def modify(self, events: Event | Iterable[Event], data: Any = None) -> None:
        """Replace the watched events, then the data (left unchanged if the events fail)."""
        self._owning_context()._modify(self, events)
        self._data = data

    def modify_events(self, events: Event | Iterable[Event]) -> None:
        """Replace the watched events; this also re-arms a fired one-shot watcher."""
        self._owning_context()._modify(self, events)

    def modify_data(self, data: Any) -> None:
        """Replace the user data."""
        self._owning_context()._check_modifiable(self)
        self._data = data

    def remove(self) -> None:
        """Unregister this watcher; a no-op if its stream was closed."""
        if self._state == RETIRED:
            return
        context = self._context()
        if self._state != ACTIVE or context is None:
            # Removed, or its context closed or collected (which left it REMOVED, or RETIRED
            # if its stream was closed first).
            raise InactiveWatcherError("Cannot remove inactive watcher")
        context._remove(self)

    def _stream_open(self) -> bool:
        """Whether the handle still answers with the fd it was added with.

        A handle whose ``fileno()`` raises anything is taken as closed: the bookkeeping that
        asks (``close()``, retiring) must not stop half-way for a broken handle.
        """
        try:
            return self._probe() == self._fd
        except Exception:
            return False

    def _owning_context(self) -> ContextState:
        context = self._context()
        if self._state != ACTIVE or context is None:
            raise InactiveWatcherError("Cannot modify inactive watcher")
        return context

    def __repr__(self) -> str:
        state = "active" if self.is_active() else "inactive"
        return f"<Watcher fd={self._fd} events={self._events!r} {state}>"

