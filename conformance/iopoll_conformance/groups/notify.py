"""NotifyHandle: a level-triggered wake-up that any thread can set (SPEC 10)."""

from __future__ import annotations

import gc
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ..support import poll_now, reported, short_wait, timed
from .timers import require

_LATE = 5.0


@contextmanager
def _notify_handle(api: ModuleType) -> Iterator[Any]:
    """A new NotifyHandle, closed on exit (the case is skipped where there is none)."""
    handle = require(api, "NotifyHandle")()
    try:
        yield handle
    finally:
        handle.close()


def _open_fds() -> int | None:
    """How many fds this process has open, where the OS lists them (else None)."""
    for directory in ("/proc/self/fd", "/dev/fd"):
        if Path(directory).is_dir():
            return len(list(Path(directory).iterdir()))
    return None


class NotifyRules:
    """NotifyHandle (SPEC 10): NOTIFY alone, level from notify() to clear(), any thread."""

    def test_poll_notify_handle_basic_events(self, api: ModuleType, ctx: Any) -> None:
        """B.82, php-src poll_notify_handle_basic.phpt, SPEC 10 event rules: a NotifyHandle is
        watched with NOTIFY alone (ONESHOT allowed); READ, [NOTIFY, WRITE], TIMER and
        EDGE_TRIGGERED are ValueErrors naming the rule, by add and by modify."""
        e = api.Event
        with _notify_handle(api) as handle:
            for events in (e.READ, [e.NOTIFY, e.WRITE], e.TIMER, e.NOTIFY | e.PROCESS):
                with pytest.raises(ValueError, match=re.escape("Event.NOTIFY")) as info:
                    ctx.add(handle, events)
                assert "NotifyHandle" in str(info.value)
            with pytest.raises(ValueError, match="events"):
                ctx.add(handle, e.NOTIFY | e.EDGE_TRIGGERED)
            assert len(ctx) == 0
            watcher = ctx.add(handle, e.NOTIFY, "n")
            assert watcher.handle is handle
            assert watcher.watched_events == e.NOTIFY
            with pytest.raises(ValueError, match=re.escape("Event.NOTIFY")):
                watcher.modify_events(e.READ)
            with pytest.raises(ValueError, match="events"):
                watcher.modify_events(e.NOTIFY | e.EDGE_TRIGGERED)
            assert watcher.watched_events == e.NOTIFY
            assert len(ctx) == 1

    def test_poll_notify_handle_basic(self, api: ModuleType, ctx: Any) -> None:
        """B.83, php-src poll_notify_handle_basic.phpt, SPEC 10: level-triggered.

        Nothing before notify(); two notify() calls are one report, [NOTIFY]; reported on
        every wait until clear(); nothing after it; notify() again: reported again.
        """
        e = api.Event
        with _notify_handle(api) as handle:
            watcher = ctx.add(handle, e.NOTIFY, "n")
            assert poll_now(ctx) == []
            assert ctx.wait(0, 50_000) == []
            handle.notify()
            handle.notify()
            result = short_wait(ctx)
            assert result == [watcher]
            assert watcher.triggered_events == e.NOTIFY
            assert [reported(poll_now(ctx)) for _ in range(3)] == [{"n": e.NOTIFY}] * 3
            assert reported(ctx.wait(0, 50_000)) == {"n": e.NOTIFY}
            handle.clear()
            assert poll_now(ctx) == []
            assert ctx.wait(0, 50_000) == []
            handle.notify()
            assert reported(short_wait(ctx)) == {"n": e.NOTIFY}
            assert reported(poll_now(ctx)) == {"n": e.NOTIFY}

    def test_spec_10_notify_before_add(self, api: ModuleType, ctx: Any) -> None:
        """SPEC 10: level: a handle notified before it is watched is reported at once."""
        with _notify_handle(api) as handle:
            handle.notify()
            watcher = ctx.add(handle, api.Event.NOTIFY, "n")
            assert short_wait(ctx) == [watcher]
            handle.clear()
            assert poll_now(ctx) == []

    def test_spec_10_notify_from_threads(self, api: ModuleType, ctx: Any) -> None:
        """SPEC 10: notify() from another thread wakes a blocking wait(None); many calls from
        several threads are still one report."""
        with _notify_handle(api) as handle:
            watcher = ctx.add(handle, api.Event.NOTIFY, "n")

            def late() -> None:
                time.sleep(0.2)
                handle.notify()

            thread = threading.Thread(target=late)
            thread.start()
            try:
                result, elapsed = timed(lambda: ctx.wait(None))
            finally:
                thread.join()
            assert result == [watcher]
            assert elapsed < _LATE
            handle.clear()
            assert poll_now(ctx) == []

            def many() -> None:
                for _ in range(200):
                    handle.notify()

            threads = [threading.Thread(target=many) for _ in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert short_wait(ctx) == [watcher]
            handle.clear()
            assert poll_now(ctx) == []

    def test_spec_10_notify_oneshot(self, api: ModuleType, ctx: Any) -> None:
        """SPEC 10 and 6.4: ONESHOT with NOTIFY: reported once although still notified;
        modify_events re-arms it and the pending notification is reported at once."""
        e = api.Event
        with _notify_handle(api) as handle:
            watcher = ctx.add(handle, [e.NOTIFY, e.ONESHOT], "shot")
            handle.notify()
            assert short_wait(ctx) == [watcher]
            assert poll_now(ctx) == []
            assert watcher.is_active()
            watcher.modify_events([e.NOTIFY, e.ONESHOT])
            assert poll_now(ctx) == [watcher]
            assert poll_now(ctx) == []

    def test_poll_notify_handle_basic_remove(self, api: ModuleType, ctx: Any) -> None:
        """B.83, B.15, php-src poll_notify_handle_basic.phpt: remove() makes the watcher
        inactive and unreported; the handle can be added again and is reported again."""
        e = api.Event
        with _notify_handle(api) as handle:
            watcher = ctx.add(handle, e.NOTIFY, "old")
            handle.notify()
            watcher.remove()
            assert not watcher.is_active()
            assert len(ctx) == 0
            assert ctx.wait(0, 50_000) == []
            result, elapsed = timed(lambda: ctx.wait(None))  # no active watcher: at once
            assert result == [] and elapsed < _LATE
            with pytest.raises(api.InactiveWatcherError):
                watcher.remove()
            again = ctx.add(handle, e.NOTIFY, "new")
            assert reported(short_wait(ctx)) == {"new": e.NOTIFY}
            assert again.is_active()

    def test_spec_10_notify_in_two_contexts(self, api: ModuleType, backend: Any, ctx: Any) -> None:
        """SPEC 6.1 and 10: one NotifyHandle in two contexts: both report it until clear()."""
        e = api.Event
        with _notify_handle(api) as handle, api.Context(backend) as second:
            first_watcher = ctx.add(handle, e.NOTIFY, "first")
            second_watcher = second.add(handle, e.NOTIFY, "second")
            handle.notify()
            assert short_wait(ctx) == [first_watcher]
            assert short_wait(second) == [second_watcher]
            assert poll_now(ctx) == [first_watcher]
            handle.clear()
            assert poll_now(ctx) == [] and poll_now(second) == []

    def test_poll_notify_handle_basic_closed(self, api: ModuleType, ctx: Any) -> None:
        """SPEC 10: a closed NotifyHandle cannot be added (InvalidHandleError), and close()
        frees its fds (where the OS lists them)."""
        notify_handle = require(api, "NotifyHandle")
        handle = notify_handle()
        handle.close()
        with pytest.raises(api.InvalidHandleError):
            ctx.add(handle, api.Event.NOTIFY)
        assert len(ctx) == 0
        gc.collect()  # so that no earlier test's garbage closes an fd in between
        before = _open_fds()
        handles = [notify_handle() for _ in range(20)]
        for each in handles:
            each.close()
        if before is not None:
            # At most as many: 20 handles that kept their fds would be 20 more (another
            # thread or finalizer may close one of its own meanwhile).
            after = _open_fds()
            assert after is not None and after <= before
