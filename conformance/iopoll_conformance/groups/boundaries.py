"""The edges of what SPEC 3, 4, 5 and 10 state: the last value taken, the first refused.

The error group checks each bad-input row on an empty context; these rules check the same
rows where an implementation is most tempted to cut corners: with a watcher ready (the
path a fast ``wait()`` takes), at the exact bound of a range, and with values that look
like what is expected (a ``str`` of an event name, an ``int`` equal to an ``Event``, a
stream that says it is closed while its fd is still open).  A mutation run of iopoll's own
argument checks found slips at each of them that the other groups let through.
"""

from __future__ import annotations

import math
import time
from datetime import timedelta
from types import ModuleType
from typing import Any

import pytest

from ..process import within
from ..support import Capabilities, names_argument, refuses


class _SaysClosed:
    """A stream whose ``closed`` is true while its ``fileno()`` still names an open fd (a
    wrapper whose ``close()`` only marks it, say)."""

    closed = True

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd


class BoundaryRules:
    """The last value each range takes and the first it refuses; refusals with a watcher
    ready; look-alike values refused by type."""

    # -- wait() ----------------------------------------------------------------------------

    def test_spec_4_the_largest_microseconds_is_taken(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: ``microseconds`` 999999 is taken (a ready watcher comes back); 1000000 is a
        ``ValueError`` naming ``microseconds``."""
        watcher = ctx.add(pair[0], api.Event.WRITE)
        assert ctx.wait(0, 999_999) == [watcher]
        refuses(lambda bad: ctx.wait(0, bad), (1_000_000,), ValueError, "microseconds")

    def test_spec_4_negative_timeouts_are_refused_with_a_watcher_ready(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any], caps: Capabilities
    ) -> None:
        """SPEC 4: a negative timeout is a ``ValueError`` naming ``timeout`` even when a
        watcher is ready, however small it is (a fast path must not take -1 for "for
        ever", nor round -0.5 to 0)."""
        ctx.add(pair[0], api.Event.WRITE)
        bad: list[Any] = [-1, -2]
        if caps.float_timeouts:
            bad += [-0.5, -1.5, timedelta(milliseconds=-1), timedelta(seconds=-1)]
        refuses(ctx.wait, bad, ValueError, "timeout")

    def test_spec_4_a_bool_timeout_is_refused_with_a_watcher_ready(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: ``True`` and ``False`` are not seconds, also when a watcher is ready:
        ``TypeError`` naming ``timeout``."""
        ctx.add(pair[0], api.Event.WRITE)
        refuses(ctx.wait, (True, False), TypeError, "timeout")

    def test_spec_4_a_timeout_too_big_for_a_float_is_taken(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: huge timeouts never overflow: an ``int`` beyond any float is taken, with or
        without microseconds, and a ready watcher comes back at once."""
        watcher = ctx.add(pair[0], api.Event.WRITE)
        assert ctx.wait(10**400) == [watcher]
        assert ctx.wait(10**400, 5) == [watcher]

    def test_spec_4_inf_on_an_empty_context_returns_at_once(
        self, ctx: Any, caps: Capabilities
    ) -> None:
        """SPEC 4: ``math.inf`` is the same as ``None``: with no active watcher,
        ``wait(math.inf)`` returns ``[]`` at once, microseconds added or not."""
        if not caps.float_timeouts:
            pytest.skip("this implementation takes whole seconds only (SPEC 7)")
        started = time.monotonic()
        result = within(2.0, lambda: (ctx.wait(math.inf), ctx.wait(math.inf, 5)), "wait(inf)")
        assert result == ([], [])
        assert time.monotonic() - started < 1.0

    def test_spec_4_the_largest_max_events_is_taken_with_a_watcher_ready(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: ``max_events=2**31-1`` is taken and returns the ready watcher."""
        watcher = ctx.add(pair[0], api.Event.WRITE)
        assert ctx.wait(0, max_events=2**31 - 1) == [watcher]

    # -- add(events=...) -------------------------------------------------------------------

    def test_spec_4_str_and_bytes_are_not_iterables_of_events(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: a ``str`` or ``bytes`` (empty, or naming an event) is a ``TypeError``
        naming ``events``, not an empty iterable's ``ValueError``; nothing is added."""
        refuses(lambda bad: ctx.add(pair[0], bad), ("", "READ", b"", b"\x01"), TypeError, "events")
        assert len(ctx) == 0

    def test_spec_4_an_int_inside_an_iterable_of_events_is_refused(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: an iterable of events holds ``Event`` values only: ``[WRITE, 1]`` (1 equals
        ``Event.READ``) is a ``TypeError`` naming ``events``; nothing is added."""
        refuses(lambda bad: ctx.add(pair[0], bad), ([api.Event.WRITE, 1],), TypeError, "events")
        assert len(ctx) == 0

    def test_spec_10_a_stream_refuses_each_handle_event(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 10: ``TIMER``, ``NOTIFY``, ``SIGNAL`` and ``PROCESS`` are each a ``ValueError``
        for a stream, alone or with ``READ``, in ``add`` (nothing added) and in ``modify``
        (events and data unchanged)."""
        e = api.Event
        for extra in (e.TIMER, e.NOTIFY, e.SIGNAL, e.PROCESS):
            refuses(
                lambda bad: ctx.add(pair[0], bad), (extra, e.READ | extra), ValueError, "events"
            )
        assert len(ctx) == 0
        watcher = ctx.add(pair[0], e.READ, "kept")
        for extra in (e.TIMER, e.NOTIFY, e.SIGNAL, e.PROCESS):
            with pytest.raises(ValueError):
                watcher.modify(e.READ | extra, "changed")
        assert (watcher.watched_events, watcher.data) == (e.READ, "kept")

    def test_spec_10_a_timer_refuses_edge_triggering(self, api: ModuleType, ctx: Any) -> None:
        """SPEC 10: a ``TimerHandle`` takes ``ONESHOT`` but not ``EDGE_TRIGGERED``
        (``ValueError``), in ``add`` (nothing added) and in ``modify_events`` (unchanged)."""
        e = api.Event
        timer = api.TimerHandle(1.0)
        with pytest.raises(ValueError):
            ctx.add(timer, e.TIMER | e.EDGE_TRIGGERED)
        assert len(ctx) == 0
        watcher = ctx.add(timer, e.TIMER | e.ONESHOT)
        with pytest.raises(ValueError):
            watcher.modify_events(e.TIMER | e.EDGE_TRIGGERED)
        assert watcher.watched_events == e.TIMER | e.ONESHOT

    # -- add(handle) -----------------------------------------------------------------------

    def test_spec_4_a_handle_whose_fileno_raises_is_invalid(
        self, api: ModuleType, ctx: Any
    ) -> None:
        """SPEC 4: a third-party handle whose ``fileno()`` raises ``ValueError`` (as a closed
        file's does) is an ``InvalidHandleError``; nothing is added."""

        class Raising(api.Handle):  # type: ignore[name-defined,misc]
            def fileno(self) -> int:
                raise ValueError("I/O operation on closed file")

        with pytest.raises(api.InvalidHandleError):
            ctx.add(Raising(), api.Event.READ)
        assert len(ctx) == 0

    def test_spec_3_a_stream_that_says_it_is_closed_is_invalid(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 3-4: a stream whose ``closed`` is true is invalid while its ``fileno()`` still
        names an open fd: ``is_valid()`` is false, and ``add`` raises ``InvalidHandleError``
        for the stream, its ``StreamPollHandle`` and its weak handle."""
        stream = _SaysClosed(pair[0].fileno())
        weak = api.StreamPollWeakHandle.create(stream)
        assert (api.StreamPollHandle(stream).is_valid(), weak.is_valid()) == (False, False)
        for handle in (stream, api.StreamPollHandle(stream), weak):
            with pytest.raises(api.InvalidHandleError):
                ctx.add(handle, api.Event.READ)
        assert len(ctx) == 0

    # -- Watcher ---------------------------------------------------------------------------

    def test_spec_5_has_triggered_wants_every_flag(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 5: ``has_triggered(event)`` is true only when every flag of ``event`` was
        reported: ``READ | WRITE`` is false for a watcher that was only writable."""
        e = api.Event
        watcher = ctx.add(pair[0], e.READ | e.WRITE)
        assert ctx.wait(0) == [watcher]
        assert watcher.triggered_events == e.WRITE
        assert watcher.has_triggered(e.WRITE) is True
        assert watcher.has_triggered(e.READ | e.WRITE) is False
        assert watcher.has_triggered(e.READ) is False

    def test_spec_5_modify_with_events_that_are_not_events_changes_nothing(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 5: ``modify`` checks its events first: empty events (``ValueError``) or an
        ``int`` (``TypeError``), each naming ``events``, leave events and data as they were."""
        watcher = ctx.add(pair[0], api.Event.WRITE, "kept")
        with pytest.raises(ValueError) as empty:
            watcher.modify(api.Event(0), "changed")
        with pytest.raises(TypeError) as typed:
            watcher.modify(2, "changed")
        for caught in (empty, typed):
            names_argument(caught.value, "events")
        assert (watcher.watched_events, watcher.data) == (api.Event.WRITE, "kept")
