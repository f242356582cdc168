"""SignalHandle: signals taken by a watcher instead of a handler, where the backend can (SPEC 10).

Every case that sends or blocks a signal runs in ``signal_sandbox()``: it installs a recording
Python handler for SIGUSR1 and SIGUSR2 (so that a signal the implementation failed to take
never kills the run), checks on the way out that the signal mask and those handlers are
as they were, and puts them back however the case ended.
"""

from __future__ import annotations

import gc
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType, ModuleType
from typing import Any

import pytest

from ..support import poll_now, short_wait
from .timers import require

_SIGNALS = tuple(getattr(signal, name, None) for name in ("SIGUSR1", "SIGUSR2"))
_UNBLOCKABLE = ("SIGKILL", "SIGSTOP", "SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL")


def posix_signals() -> tuple[int, int]:
    """(SIGUSR1, SIGUSR2); the case is skipped where there are no such signals or no masks."""
    usr1, usr2 = _SIGNALS
    if usr1 is None or usr2 is None or not hasattr(signal, "pthread_sigmask"):
        pytest.skip("needs SIGUSR1, SIGUSR2 and signal.pthread_sigmask")
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers can only be set in the main thread")
    return usr1, usr2


def _blocked() -> set[int]:
    return set(signal.pthread_sigmask(signal.SIG_BLOCK, []))


def signal_handles_here(api: ModuleType, ctx: Any) -> Any:
    """``api.SignalHandle`` where ``ctx``'s backend supports it; else the case is skipped."""
    signal_handle = require(api, "SignalHandle")
    posix_signals()
    if not ctx.backend.supports_signal_handles():
        pytest.skip(
            f"{ctx.backend.name} has no signal handles "
            "(test_spec_10_signal_handle_unsupported checks its refusal)"
        )
    return signal_handle


def _eventually(condition: Any, patience: float = 5.0) -> bool:
    """Whether ``condition()`` became true within ``patience`` seconds (a Python signal
    handler runs between bytecodes of the main thread, soon after delivery)."""
    deadline = time.monotonic() + patience
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


@contextmanager
def signal_sandbox() -> Iterator[list[int]]:
    """Record SIGUSR1/SIGUSR2 in a Python handler; on exit the mask and the handlers must be
    as they were (checked, then put back).  Yields the list of signals the handler saw."""
    posix_signals()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    previous = {signum: signal.getsignal(signum) for signum in _SIGNALS if signum is not None}
    calls: list[int] = []

    def record(signum: int, frame: FrameType | None) -> None:
        calls.append(signum)

    for signum in previous:
        signal.signal(signum, record)
    try:
        yield calls
        assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == mask, "the mask was not restored"
        for signum in previous:
            assert signal.getsignal(signum) is record, f"the handler of {signum} was replaced"
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        time.sleep(0.01)  # anything left pending and now unblocked goes to `record`
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class SignalRules:
    """SignalHandle (SPEC 10): validation, blocking while watched, delivery to the handle."""

    # -- the handle, on every backend -------------------------------------------------------

    def test_poll_signal_handle_invalid(self, api: ModuleType) -> None:
        """B.84, php-src poll_signal_handle_invalid.phpt, SPEC 10: empty, out of range,
        unblockable or not in ``signal.valid_signals()``: ValueError; a non-int entry, or not
        an iterable: TypeError.  Each message names ``signals``; making (or failing to make)
        a handle blocks nothing."""
        signal_handle = require(api, "SignalHandle")
        usr1, _usr2 = posix_signals()
        mask = _blocked()
        bad_values: tuple[Any, ...] = ([], (), set(), [0], [-1], [signal.NSIG], [10**6], [usr1, 0])
        # Below NSIG but not this system's (glibc keeps 32 and 33 for its threads): never
        # blocked, one delivered would take its default action.
        foreign = [[n] for n in range(1, signal.NSIG) if n not in signal.valid_signals()]
        bad_values = (*bad_values, *foreign)
        for bad in bad_values:
            with pytest.raises(ValueError, match="signals"):
                signal_handle(bad)
        for name in _UNBLOCKABLE:
            if hasattr(signal, name):
                with pytest.raises(ValueError, match="signals"):
                    signal_handle([usr1, getattr(signal, name)])
        wrong_types: tuple[Any, ...] = (["15"], [15.0], [None], [usr1, "x"], usr1, None)
        for wrong in wrong_types:
            with pytest.raises(TypeError, match="signals"):
                signal_handle(wrong)
        assert _blocked() == mask

    def test_poll_signal_handle_basic_signals(self, api: ModuleType) -> None:
        """B.84, php-src poll_signal_handle_basic.phpt, SPEC 10: ``signals`` is a sorted
        tuple without duplicates, from any iterable; making a handle blocks nothing."""
        signal_handle = require(api, "SignalHandle")
        usr1, usr2 = posix_signals()
        mask = _blocked()
        handle = signal_handle([usr2, usr1, usr2, usr1])
        assert type(handle.signals) is tuple
        assert handle.signals == (min(usr1, usr2), max(usr1, usr2))
        assert signal_handle(iter([usr1])).signals == (usr1,)
        assert signal_handle({usr2}).signals == (usr2,)
        assert _blocked() == mask

    def test_spec_10_signal_handle_unsupported(self, api: ModuleType, ctx: Any) -> None:
        """SPEC 10 "Where each works": where the backend has no signal handles, the handle
        can be made but add is a FailedHandleAddError with code NOSUPPORT, blocking nothing."""
        signal_handle = require(api, "SignalHandle")
        if ctx.backend.supports_signal_handles():
            pytest.skip(f"{ctx.backend.name} supports signal handles")
        with signal_sandbox():
            usr1, _usr2 = posix_signals()
            handle = signal_handle([usr1])
            with pytest.raises(api.FailedHandleAddError) as info:
                ctx.add(handle, api.Event.SIGNAL)
            assert info.value.code == api.ErrorCode.NOSUPPORT
            assert len(ctx) == 0

    # -- where the backend supports them ----------------------------------------------------

    def test_poll_signal_handle_basic(self, api: ModuleType, ctx: Any) -> None:
        """B.85, B.86, php-src poll_signal_handle_basic.phpt, SPEC 10.

        SIGNAL alone (other events, EDGE_TRIGGERED: ValueError); blocked only while
        watched; a signal sent is one [SIGNAL] report and delivered() returns it, then
        nothing; two signals are one report and two deliveries; no handler runs.
        """
        signal_handle = signal_handles_here(api, ctx)
        e = api.Event
        with signal_sandbox() as calls:
            usr1, usr2 = posix_signals()
            handle = signal_handle([usr1, usr2])
            for events in (e.READ, e.SIGNAL | e.READ, e.NOTIFY):
                with pytest.raises(ValueError, match=re.escape("Event.SIGNAL")):
                    ctx.add(handle, events)
            with pytest.raises(ValueError, match="events"):
                ctx.add(handle, e.SIGNAL | e.EDGE_TRIGGERED)
            assert not {usr1, usr2} & _blocked()
            watcher = ctx.add(handle, e.SIGNAL, "sig")
            assert {usr1, usr2} <= _blocked()
            assert poll_now(ctx) == []
            os.kill(os.getpid(), usr1)
            assert short_wait(ctx) == [watcher]
            assert watcher.triggered_events == e.SIGNAL
            assert handle.delivered() == [usr1]
            assert handle.delivered() == []
            assert poll_now(ctx) == []
            os.kill(os.getpid(), usr1)
            os.kill(os.getpid(), usr2)
            assert short_wait(ctx) == [watcher]
            assert sorted(handle.delivered()) == sorted([usr1, usr2])
            assert poll_now(ctx) == []
            assert calls == []
            watcher.remove()
            assert not {usr1, usr2} & _blocked()

    def test_spec_10_signal_delivered_without_wait(self, api: ModuleType, ctx: Any) -> None:
        """SPEC 10: a delivery that arrived while watched is in delivered() even if no wait()
        read it yet; the handle took it, so no wait reports it afterwards."""
        signal_handle = signal_handles_here(api, ctx)
        with signal_sandbox() as calls:
            usr1, _usr2 = posix_signals()
            handle = signal_handle([usr1])
            watcher = ctx.add(handle, api.Event.SIGNAL, "sig")
            os.kill(os.getpid(), usr1)
            assert handle.delivered() == [usr1]
            assert poll_now(ctx) == []
            watcher.remove()
            assert calls == []

    def test_poll_signal_handle_pending(self, api: ModuleType, ctx: Any) -> None:
        """B.85, B.86, php-src poll_signal_handle_pending.phpt, SPEC 10: a signal pending
        (blocked) before it was watched is reported at once; one outside the set is left
        pending; a signal blocked before stays blocked after the watcher goes."""
        signal_handle = signal_handles_here(api, ctx)
        with signal_sandbox() as calls:
            usr1, usr2 = posix_signals()
            signal.pthread_sigmask(signal.SIG_BLOCK, [usr1, usr2])
            os.kill(os.getpid(), usr1)
            os.kill(os.getpid(), usr2)
            handle = signal_handle([usr1])
            watcher = ctx.add(handle, api.Event.SIGNAL, "sig")
            assert short_wait(ctx) == [watcher]
            assert handle.delivered() == [usr1]
            watcher.remove()
            assert {usr1, usr2} <= _blocked()  # as it was before the watcher
            assert usr2 in signal.sigpending()
            assert usr1 not in signal.sigpending()
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [usr1, usr2])
            assert _eventually(lambda: calls == [usr2]), calls

    def test_poll_signal_handle_registrations(
        self, api: ModuleType, backend: Any, ctx: Any
    ) -> None:
        """B.85, php-src poll_signal_handle_registrations.phpt, SPEC 10: blocked while any
        watcher of it is active, counted per signal across handles and contexts; unblocked
        when the last goes, by remove(), close() or collection."""
        signal_handle = signal_handles_here(api, ctx)
        with signal_sandbox():
            usr1, usr2 = posix_signals()
            one = signal_handle([usr1])
            both = signal_handle([usr1, usr2])
            first = ctx.add(one, api.Event.SIGNAL)
            with api.Context(backend) as second:
                second.add(both, api.Event.SIGNAL)
                second.add(one, api.Event.SIGNAL)
                assert {usr1, usr2} <= _blocked()
                first.remove()
                assert {usr1, usr2} <= _blocked()
            assert not {usr1, usr2} & _blocked()
            third = api.Context(backend)
            third.add(both, api.Event.SIGNAL)
            assert {usr1, usr2} <= _blocked()
            del third
            gc.collect()
            assert not {usr1, usr2} & _blocked()

    def test_poll_signal_handle_registrations_blocked_before(
        self, api: ModuleType, ctx: Any
    ) -> None:
        """B.85, SPEC 10: a signal blocked before it was watched is still blocked after."""
        signal_handle = signal_handles_here(api, ctx)
        with signal_sandbox():
            usr1, usr2 = posix_signals()
            signal.pthread_sigmask(signal.SIG_BLOCK, [usr2])
            watcher = ctx.add(signal_handle([usr1, usr2]), api.Event.SIGNAL)
            assert {usr1, usr2} <= _blocked()
            watcher.remove()
            assert usr2 in _blocked()
            assert usr1 not in _blocked()
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [usr2])

    def test_poll_signal_handle_shared(self, api: ModuleType, ctx: Any) -> None:
        """B.87, php-src poll_signal_handle_shared.phpt: two handles on one signal in one
        context: only the one that took the delivery reports it, once."""
        signal_handle = signal_handles_here(api, ctx)
        with signal_sandbox() as calls:
            usr1, _usr2 = posix_signals()
            watchers = [ctx.add(signal_handle([usr1]), api.Event.SIGNAL, i) for i in range(2)]
            os.kill(os.getpid(), usr1)
            result = short_wait(ctx)
            assert len(result) == 1 and result[0] in watchers
            assert poll_now(ctx) == []
            delivered = {w.data: w.handle.delivered() for w in watchers}
            assert delivered[result[0].data] == [usr1]
            assert delivered[1 - result[0].data] == []
            for watcher in watchers:
                watcher.remove()
            assert calls == []

    def test_poll_signal_handle_remove_pending(self, api: ModuleType, ctx: Any) -> None:
        """B.88, php-src poll_signal_handle_remove_pending.phpt, SPEC 10: a delivery taken
        while watched stays with the handle after the last watcher goes (no handler runs
        for it); after that, the signal goes to its handler as usual."""
        signal_handle = signal_handles_here(api, ctx)
        with signal_sandbox() as calls:
            usr1, _usr2 = posix_signals()
            handle = signal_handle([usr1])
            watcher = ctx.add(handle, api.Event.SIGNAL)
            os.kill(os.getpid(), usr1)
            watcher.remove()
            time.sleep(0.05)
            assert calls == []
            assert handle.delivered() == [usr1]
            os.kill(os.getpid(), usr1)
            assert _eventually(lambda: calls == [usr1]), calls
            assert handle.delivered() == []

    def test_poll_signal_handle_pcntl(self, api: ModuleType, ctx: Any) -> None:
        """B.89, php-src poll_signal_handle_pcntl.phpt, SPEC 10: a Python handler installed
        while the signal is watched does not run: the handle takes the signal."""
        signal_handle = signal_handles_here(api, ctx)
        with signal_sandbox() as calls:
            usr1, _usr2 = posix_signals()
            handle = signal_handle([usr1])
            watcher = ctx.add(handle, api.Event.SIGNAL, "sig")
            late: list[int] = []
            previous = signal.signal(usr1, lambda signum, frame: late.append(signum))
            try:
                os.kill(os.getpid(), usr1)
                assert short_wait(ctx) == [watcher]
                time.sleep(0.05)
                assert late == [] and calls == []
                assert handle.delivered() == [usr1]
                watcher.remove()
            finally:
                signal.signal(usr1, previous)

    def test_spec_10_signal_handle_add_outside_main_thread(self, api: ModuleType, ctx: Any) -> None:
        """SPEC 10: adding a SignalHandle from a thread other than the main one is a
        ValueError (as signal.signal), and blocks nothing."""
        signal_handle = signal_handles_here(api, ctx)
        with signal_sandbox():
            usr1, _usr2 = posix_signals()
            handle = signal_handle([usr1])
            outcome: list[BaseException | None] = []

            def add() -> None:
                try:
                    ctx.add(handle, api.Event.SIGNAL)
                except BaseException as exc:
                    outcome.append(exc)
                else:
                    outcome.append(None)

            thread = threading.Thread(target=add)
            thread.start()
            thread.join()
            assert len(outcome) == 1 and isinstance(outcome[0], ValueError), outcome
            assert len(ctx) == 0
            assert usr1 not in _blocked()
