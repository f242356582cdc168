"""Strict extras: behaviour this project holds its own implementations to that SPEC does not state.

SPEC 8: the suite fails an implementation only for breaking a rule SPEC states.  The cases
here check PHP details and this project's own choices, so the plugin collects them only when
asked: ``--strict-extras`` on the command line, or ``strict_extras = True`` on the suite
class (this project's own runs set it).  Each case says where its rule comes from and what
SPEC says, or does not say, about it.

A few cases elsewhere state a rule SPEC gives for some backends only (the two socket
examples of SPEC 6.2 hold "on epoll and poll"; SPEC 7 describes select's hang-up mapping
for sockets only).  On the other backends those cases call ``skip_unless_stated``: skipped
by default, run with ``--strict-extras``.
"""

from __future__ import annotations

import gc
import signal
import sys
import time
import warnings
import weakref
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ..process import in_child
from ..support import Capabilities, reported, short_wait, socketpair
from .errors import check_flag_refused
from .lifecycle import check_inactive, fork_refusals
from .processes import (
    EXIT_ON_INPUT,
    PATIENCE,
    children,
    finish_child,
    process_handles_here,
    start_child,
)
from .signals import posix_signals, signal_handles_here, signal_sandbox
from .timers import require


def skip_unless_stated(stated: bool, strict_extras_on: bool, why: str) -> None:
    """Skip the calling case where SPEC does not state its rule, unless strict extras are on.

    ``stated``: whether SPEC states the rule for the backend under test; ``strict_extras_on``:
    the suite fixture of that name; ``why``: what SPEC says instead, for the skip reason.
    """
    if not stated and not strict_extras_on:
        pytest.skip(f"{why} (--strict-extras checks it here too)")


def spec_6_2_examples_stated(backend: Any, caps: Capabilities) -> bool:
    """Whether SPEC states the two socketpair examples of 6.2 for ``backend``.

    SPEC 6.2 says they must hold on EPOLL and POLL; SPEC 7 gives select semantics the same
    shapes (a peer closed after reading reads as closed: HANGUP; one closed with unread
    data is a reset: ERROR|HANGUP).  Other backends (PHP's kqueue and event ports differ
    here) are not held to them by default.
    """
    return backend.name in ("EPOLL", "POLL") or caps.select_semantics


def skip_unless_spec_6_2_example(backend: Any, caps: Capabilities, strict_extras_on: bool) -> None:
    """``skip_unless_stated`` for a case asserting one of SPEC 6.2's socketpair examples."""
    skip_unless_stated(
        spec_6_2_examples_stated(backend, caps),
        strict_extras_on,
        "SPEC 6.2 states this example for EPOLL and POLL, SPEC 7 for select semantics",
    )


class _Data:
    """User data that can point back at its watcher (a reference cycle)."""

    watcher: Any = None


def _open_fds() -> int | None:
    for directory in ("/proc/self/fd", "/dev/fd"):
        if Path(directory).is_dir():
            return len(list(Path(directory).iterdir()))
    return None


class StrictExtraRules:
    """Strict extras: PHP details and this project's choices that SPEC does not state.

    Collected only with ``--strict-extras`` or ``strict_extras = True`` on the suite class.
    """

    # -- SPEC 1: names ---------------------------------------------------------------------

    def test_event_values_ascend_in_declaration_order(self, api: ModuleType) -> None:
        """Event's bit values rise in declaration order, as PHP's do (A.1).

        SPEC 1 gives the order of the members, not of their values.
        """
        values = [member.value for member in api.Event.__members__.values()]
        assert values == sorted(values)

    def test_other_errors_are_not_failed_operations(self, api: ModuleType) -> None:
        """The four errors that are not operation failures carry no ErrorCode (PHP's A.2).

        SPEC 1 makes them PollError subclasses and does not forbid them being
        FailedPollOperationError subclasses too.
        """
        for name in (
            "BackendUnavailableError",
            "InactiveWatcherError",
            "HandleAlreadyWatchedError",
            "InvalidHandleError",
        ):
            assert not issubclass(getattr(api, name), api.FailedPollOperationError), name

    def test_os_refusal_carries_its_errno(
        self, api: ModuleType, caps: Capabilities, ctx: Any, tmp_path: Path
    ) -> None:
        """A refusal by the OS (epoll's EPERM for a regular file, WSAPOLL's ENOTSOCK) keeps
        the errno.

        SPEC 1 says ``.errno`` is an int or None, not when it must be an int.
        """
        if caps.regular_files:
            pytest.skip("the OS refuses nothing to provoke on this backend")
        with (
            open(tmp_path / "f", "wb") as regular,
            pytest.raises(api.FailedHandleAddError) as info,
        ):
            ctx.add(regular, api.Event.READ)
        assert isinstance(info.value.errno, int)

    # -- SPEC 2: backends ------------------------------------------------------------------

    def test_spec_2_select_is_available(self, api: ModuleType) -> None:
        """SELECT is available in every implementation (native and polyfill), as here.

        SPEC 2 gives this project's lists; which backends a third party offers is its own
        (SPEC 8 finds them through ``available_backends()``).
        """
        assert api.Backend.SELECT in api.Backend.available_backends()

    def test_spec_2_poll_available_on_posix(self, api: ModuleType) -> None:
        """B.2: a native implementation on POSIX has POLL; the select fallback has only SELECT.

        PHP always has Poll on POSIX; SPEC 2 lists backends for this project only.
        """
        available = api.Backend.available_backends()
        if available == [api.Backend.SELECT]:
            with pytest.raises(api.BackendUnavailableError, match="POLL"):
                api.Context(api.Backend.POLL)
            return
        if sys.platform == "win32":
            pytest.skip("POLL is a POSIX backend")
        assert api.Backend.POLL in available

    def test_select_has_no_priority(self, api: ModuleType) -> None:
        """SELECT reports no PRIORITY (this project's select ignores select()'s third set).

        SPEC 2 states priority support for the native backends of PHP's matrix only.
        """
        if not api.Backend.SELECT.is_available():
            pytest.skip("SELECT is not available here")
        assert api.Backend.SELECT.supports_priority() is False

    # -- SPEC 3: handles -------------------------------------------------------------------

    def test_poll_stream_handle_fd_release(self, api: ModuleType, ctx: Any) -> None:
        """B.20, php-src poll_stream_handle_fd_release.phpt: a handle does not leak its stream.

        SPEC 3 says nothing of what a handle keeps alive once its watcher is removed.
        """
        gc.collect()
        before = _open_fds()
        refs = []
        with warnings.catch_warnings():
            # The dropped sockets are closed by the collector: that is the point here.
            warnings.simplefilter("ignore", ResourceWarning)
            for _ in range(100):
                a, b = socketpair()
                handle = api.StreamPollHandle(a)
                watcher = ctx.add(handle, api.Event.READ)
                watcher.remove()
                refs.append(weakref.ref(a))
                del a, b, handle, watcher
            gc.collect()
        assert all(ref() is None for ref in refs)
        after = _open_fds()
        if before is not None and after is not None:
            assert after <= before + 2, (before, after)

    # -- SPEC 4 and 5: lifecycle -------------------------------------------------------------

    def test_poll_double_construct(self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]) -> None:
        """B.7, php-src poll_double_construct.phpt: __init__ again is a TypeError, no change.

        A PHP detail (a second ``__construct`` is an Error there) that SPEC 8 names as one
        the default run must not check.
        """
        with pytest.raises(TypeError):
            ctx.__init__()
        assert ctx.wait(0) == []
        handle = api.StreamPollHandle(pair[0])
        with pytest.raises(TypeError):
            handle.__init__(pair[1])
        assert handle.stream is pair[0]

    def test_poll_watcher_gc_cycle(
        self, api: ModuleType, backend: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.44, php-src poll_watcher_gc_cycle.phpt: watcher -> data -> watcher is collectable.

        SPEC 4 and 5 say who holds whom (the context its watchers, a watcher its context
        weakly), not that a cycle through a watcher's data is collected.
        """
        collected: list[str] = []

        def build() -> weakref.ref[Any]:
            ctx = api.Context(backend)
            data = _Data()
            data.watcher = ctx.add(pair[0], api.Event.READ, data)
            weakref.finalize(data, collected.append, "data")
            return weakref.ref(ctx)

        ref = build()
        gc.collect()
        assert ref() is None
        assert collected == ["data"]

    def test_inactive_watcher_error_says_inactive(
        self, api: ModuleType, backend: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.15, B.42, B.43, B.45: InactiveWatcherError's message says the watcher is inactive.

        Removed, its context closed, or its context collected: remove and every modify
        raise it with "inactive" in the message, as PHP's "Cannot remove inactive watcher".
        SPEC 1 asks messages to name the argument only for TypeError and ValueError.
        """
        ctx = api.Context(backend)
        removed = ctx.add(pair[0], api.Event.READ)
        removed.remove()
        closed = ctx.add(pair[1], api.Event.READ)
        ctx.close()
        other = api.Context(backend)
        orphaned = other.add(pair[0], api.Event.READ)
        del other
        gc.collect()
        for watcher in (removed, closed, orphaned):
            check_inactive(api, watcher, match=r"(?i)inactive")

    def test_fork_refusals_use_each_operations_error(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.10: in a forked child, each call raises the error class of its operation.

        add: FailedHandleAddError, wait: FailedPollWaitError, modify: FailedWatcherModification
        Error.  SPEC 4 asks only for "a FailedPollOperationError subclass" with PERMISSION.
        """
        watcher = ctx.add(pair[0], api.Event.WRITE)
        report = in_child(lambda: fork_refusals(api, ctx, pair, watcher))
        permission = int(api.ErrorCode.PERMISSION)
        assert report == {
            "add": ["FailedHandleAddError", permission],
            "wait": ["FailedPollWaitError", permission],
            "modify": ["FailedWatcherModificationError", permission],
            "modify_events": ["FailedWatcherModificationError", permission],
        }

    # -- SPEC 4: arguments -----------------------------------------------------------------

    def test_bool_microseconds_is_type_error(self, api: ModuleType, ctx: Any) -> None:
        """A bool microseconds is a TypeError naming microseconds, as a bool timeout is.

        SPEC 4 refuses bool for timeout and max_events by name; for microseconds it says
        only "int", and a bool is an int in Python.
        """
        with pytest.raises(TypeError, match="microseconds"):
            ctx.wait(0, True)

    def test_events_with_bits_no_member_has_are_value_error(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """An Event holding bits that no member has is a ValueError naming events, from add,
        modify and modify_events alike, and leaves nothing registered or changed.

        SPEC 4 refuses what is not an Event, and an empty one; an IntFlag keeps bits it has
        no member for, so ``Event.READ | select.EPOLLET`` is an Event.  Ignored, it would
        watch level-triggered without a word.
        """
        a, b = pair
        e = api.Event
        unknown = [e.READ | e(1 << 28), e(1 << 30), [e.READ, e(1 << 29)]]
        for bad in unknown:
            with pytest.raises(ValueError, match="events"):
                ctx.add(a, bad)
        assert len(ctx) == 0
        watcher = ctx.add(a, e.READ, "kept")
        for bad in unknown:
            with pytest.raises(ValueError, match="events"):
                watcher.modify(bad, "new")
            with pytest.raises(ValueError, match="events"):
                watcher.modify_events(bad)
        assert (watcher.watched_events, watcher.data) == (e.READ, "kept")
        b.send(b"x")
        assert reported(ctx.wait(1)) == {"kept": e.READ}

    # -- SPEC 6.2 and 6.5: flags -----------------------------------------------------------

    def test_poll_event_priority_unsupported(
        self, api: ModuleType, backend: Any, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.68, php-src poll_event_priority_unsupported.phpt: PRIORITY where unsupported.

        add and modify refuse it with NOSUPPORT, as EDGE_TRIGGERED (SPEC 6.5).  SPEC 6.2
        says only that PRIORITY is reported where the backend supports it.
        """
        if backend.supports_priority():
            pytest.skip("PRIORITY is supported here")
        check_flag_refused(api, ctx, pair, api.Event.PRIORITY)
        watcher = ctx.add(pair[0], api.Event.READ, "alone")
        with pytest.raises(api.FailedWatcherModificationError):
            watcher.modify(api.Event.PRIORITY, "new")
        assert watcher.data == "alone"

    def test_spec_6_5_edge_modify_reports_current_state_once(
        self, api: Any, caps: Capabilities, ctx: Any, pair: Any
    ) -> None:
        """Switching a level watcher to edge mode reports its current state once (epoll and
        kqueue look at the fd again when a registration changes).

        SPEC 6.5 says an edge watcher reports a transition once, not whether the switch is one.
        """
        if not caps.edge_triggering:
            pytest.skip("backend does not support EDGE_TRIGGERED")
        a, b = pair
        watcher = ctx.add(b, api.Event.READ, "b")
        a.send(b"x")
        assert reported(short_wait(ctx)) == {"b": api.Event.READ}
        watcher.modify_events([api.Event.READ, api.Event.EDGE_TRIGGERED])
        assert reported(short_wait(ctx)) == {"b": api.Event.READ}
        assert short_wait(ctx) == []

    # -- SPEC 10: handles that are not streams ---------------------------------------------

    def test_a_timer_due_at_every_wait_leaves_slots_to_ready_fds(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4 against SPEC 10: a periodic timer due at every wait, with max_events 1,
        takes the slot at one wait and leaves it to the ready socket at the next.

        SPEC 10 puts due timers first; SPEC 4 says nothing left out by max_events loses its
        turn.  Read literally, the first keeps the socket out of every result (it is never
        polled, so never "left out"); this project alternates.
        """
        timer_handle = require(api, "TimerHandle")
        a, b = pair
        ctx.add(b, api.Event.READ, "socket")
        ctx.add(timer_handle(0.001, periodic=True), api.Event.TIMER, "tick")
        a.send(b"x")
        seen = {"socket": 0, "tick": 0}
        for _ in range(10):
            time.sleep(0.003)  # longer than the period: the timer is due at every wait
            for watcher in ctx.wait(0, 0, 1):
                seen[watcher.data] += 1
        assert seen["socket"] >= 4 and seen["tick"] >= 4, seen

    @pytest.mark.parametrize(("timer_count", "limit"), [(2, 1), (3, 2)])
    def test_more_timers_due_at_every_wait_than_slots_leave_a_turn_to_ready_fds(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any], timer_count: int, limit: int
    ) -> None:
        """SPEC 4 against SPEC 10, when timers are left out at every wait: more periodic
        timers due at each wait than max_events has slots still leave the ready socket a
        turn, while each left-out timer comes out at the next wait (php-src's
        poll_timer_handle_with_stream.phpt).

        SPEC 10 puts due timers first and keeps a left-out one due; read literally, the
        socket is never polled.  This project gives fds the wait after two waits of timers
        alone: at least one wait in three.
        """
        timer_handle = require(api, "TimerHandle")
        a, b = pair
        ctx.add(b, api.Event.READ, "socket")
        for i in range(timer_count):
            ctx.add(timer_handle(0.001, periodic=True), api.Event.TIMER, f"t{i}")
        a.send(b"x")
        results = []
        for _ in range(12):
            time.sleep(0.003)  # longer than the period: every timer is due at every wait
            results.append([watcher.data for watcher in ctx.wait(0, 0, limit)])
        assert all(len(result) == limit for result in results), results
        assert sum("socket" in result for result in results) >= 4, results
        timers_seen = {data for result in results for data in result if data != "socket"}
        assert timers_seen == {f"t{i}" for i in range(timer_count)}, results

    def test_poll_timer_handle_basic_is_handle(self, api: ModuleType) -> None:
        """B.76, B.82, php-src poll_timer_handle_basic.phpt, poll_notify_handle_basic.phpt:
        timer, notify, signal and process handles are Handles.

        SPEC 10 says what each handle does, not what it derives from.
        """
        timer = require(api, "TimerHandle")(1)
        notify = require(api, "NotifyHandle")()
        try:
            assert isinstance(timer, api.Handle)
            assert isinstance(notify, api.Handle)
        finally:
            notify.close()
        signal_handle = getattr(api, "SignalHandle", None)
        usr1 = getattr(signal, "SIGUSR1", None)
        if signal_handle is not None and usr1 is not None:
            assert isinstance(signal_handle([usr1]), api.Handle)
        process_handle = getattr(api, "ProcessHandle", None)
        if process_handle is not None:
            with children() as started:
                handle = process_handle.from_popen(
                    start_child(started, "import time; time.sleep(60)")
                )
                assert isinstance(handle, api.Handle)

    def test_poll_weakhandle_not_constructible(
        self, api: ModuleType, pair: tuple[Any, Any]
    ) -> None:
        """B.69, php-src poll_weakhandle_exposure.phpt: StreamPollWeakHandle(s) is a TypeError:
        create(s) is the way (PHP's constructor is private).

        SPEC 10 names create() and says nothing of calling the class.
        """
        weak = require(api, "StreamPollWeakHandle")
        with pytest.raises(TypeError):
            weak(pair[0])

    def test_poll_weakhandle_stream_gc_frees_watcher(self, api: ModuleType, ctx: Any) -> None:
        """B.71, php-src poll_weakhandle_stream_gc.phpt: once its stream is collected and it
        left the context, nothing keeps a weak handle's watcher or the handle alive.

        SPEC 10 says the watchers leave every context, not that nothing else holds them.
        """
        weak = require(api, "StreamPollWeakHandle")
        a, b = socketpair()
        try:
            handle = weak.create(b)
            refs = [weakref.ref(handle), weakref.ref(ctx.add(handle, api.Event.READ))]
            del handle, b
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ResourceWarning)
                gc.collect()
            assert short_wait(ctx) == []
            gc.collect()
            assert [ref() for ref in refs] == [None, None]
        finally:
            a.close()

    def test_poll_process_handle_collected_elsewhere_status(
        self, api: ModuleType, ctx: Any
    ) -> None:
        """B.94, php-src poll_process_handle_collected_elsewhere.phpt: a child reaped elsewhere
        is reported with ``status`` None; the watcher stays active until removed (B.92).

        SPEC 10 gives the status "once it exited and was not reaped elsewhere", and says
        nothing of the watcher after its one report.
        """
        process_handle = process_handles_here(api, ctx)
        with children() as started:
            child = start_child(started, EXIT_ON_INPUT, piped=True)
            handle = process_handle.from_popen(child)
            watcher = ctx.add(handle, api.Event.PROCESS)
            finish_child(child, 0)
            assert child.wait(PATIENCE) == 0
            assert ctx.wait(PATIENCE) == [watcher]
            assert handle.status is None
            assert watcher.is_active()
            watcher.remove()
            assert not watcher.is_active()

    def test_poll_signal_handle_child_mask(self, api: ModuleType, ctx: Any) -> None:
        """B.90, php-src poll_signal_handle_child_mask.phpt: a child forked while a signal is
        watched does not inherit its block; the parent keeps it blocked.

        SPEC 10 asks this to be documented (os.register_at_fork), as what Python can give.
        """
        signal_handle = signal_handles_here(api, ctx)
        with signal_sandbox():
            usr1, _usr2 = posix_signals()
            watcher = ctx.add(signal_handle([usr1]), api.Event.SIGNAL)
            report = in_child(
                lambda: {"blocked": usr1 in signal.pthread_sigmask(signal.SIG_BLOCK, [])}
            )
            assert report == {"blocked": False}
            assert usr1 in signal.pthread_sigmask(signal.SIG_BLOCK, [])
            watcher.remove()
