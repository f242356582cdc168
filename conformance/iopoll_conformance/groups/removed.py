"""Context.on_watcher_removed: hearing of watchers lost without remove() (SPEC 10).

A closed stream's watcher is lost once the context notices the close, as SPEC 6.8 says;
the cases make it notice through ``is_active()`` (or a new registration on the fd number),
so that the next wait is the one that must make the call.
"""

from __future__ import annotations

import gc
import warnings
import weakref
from types import ModuleType
from typing import Any

import pytest

from ..streams import closing_all, socketpair_on_fd
from ..support import poll_now, reported, short_wait, socketpair
from .timers import require


def _removal_callbacks(ctx: Any) -> None:
    """Skip the calling case where contexts have no ``on_watcher_removed``."""
    if getattr(ctx, "on_watcher_removed", None) is None:
        pytest.skip("this implementation has no Context.on_watcher_removed (SPEC 10)")


class _Raised(Exception):
    """What the callback of a case raises."""


class RemovalCallbackRules:
    """Context.on_watcher_removed (SPEC 10): deferred to the next wait, before polling."""

    def test_poll_weakhandle_on_watcher_removed(self, api: ModuleType, ctx: Any) -> None:
        """B.73, B.41, php-src poll_weakhandle_on_watcher_removed.phpt, SPEC 10.

        A closed stream's watcher is given to the callback at the start of the next wait,
        once, not from the close nor from is_active(); remove() never calls it, nor does a
        watcher still active.
        """
        _removal_callbacks(ctx)
        removed: list[Any] = []
        ctx.on_watcher_removed(removed.append)
        a, b = socketpair()
        c, d = socketpair()
        with closing_all(a, b, c, d):
            kept = ctx.add(c, api.Event.WRITE, "kept")
            manual = ctx.add(d, api.Event.WRITE, "manual")
            closed = ctx.add(b, api.Event.READ, "closed")
            manual.remove()
            b.close()
            assert not closed.is_active()
            assert removed == []
            assert reported(poll_now(ctx)) == {"kept": api.Event.WRITE}
            assert removed == [closed]
            assert reported(short_wait(ctx)) == {"kept": api.Event.WRITE}
            kept.remove()
            assert poll_now(ctx) == []
            assert removed == [closed]

    def test_poll_on_watcher_removed_deferred_before_polling(
        self, api: ModuleType, ctx: Any
    ) -> None:
        """B.73, php-src poll_on_watcher_removed_deferred.phpt, SPEC 10: the calls come at
        the start of wait(), before polling: what the callback makes ready is reported by
        that same wait."""
        _removal_callbacks(ctx)
        a, b = socketpair()
        x, y = socketpair()
        with closing_all(a, b, x, y):
            reader = ctx.add(y, api.Event.READ, "reader")
            closed = ctx.add(b, api.Event.READ, "closed")

            def callback(watcher: Any) -> None:
                assert watcher is closed
                x.send(b"!")

            ctx.on_watcher_removed(callback)
            b.close()
            assert not closed.is_active()
            assert poll_now(ctx) == [reader]

    def test_poll_stream_closed_fd_reuse_removed(self, api: ModuleType, ctx: Any) -> None:
        """B.63, B.73, php-src poll_stream_closed_fd_reuse.phpt, SPEC 10: a closed stream's
        watcher whose fd number a new registration takes is given to the callback at the
        next wait (not by the add)."""
        _removal_callbacks(ctx)
        removed: list[Any] = []
        ctx.on_watcher_removed(removed.append)
        old, old_peer = socketpair()
        with closing_all(old, old_peer):
            old_watcher = ctx.add(old, api.Event.READ, "old")
            number = old.fileno()
            old.close()
            new, new_peer = socketpair_on_fd(number)
            with closing_all(new, new_peer):
                new_watcher = ctx.add(new, api.Event.READ, "new")
                assert removed == []
                assert poll_now(ctx) == []
                assert removed == [old_watcher]
                new_peer.send(b"x")
                assert short_wait(ctx) == [new_watcher]
                assert removed == [old_watcher]

    def test_poll_on_watcher_removed_deferred_gc(self, api: ModuleType, ctx: Any) -> None:
        """B.73, B.75, php-src poll_on_watcher_removed_deferred.phpt, SPEC 10: a weak stream
        collected: the callback runs at the next wait, not from the collector, and sees
        the watcher with ``handle.stream`` None."""
        _removal_callbacks(ctx)
        weak = require(api, "StreamPollWeakHandle")
        seen: list[tuple[Any, Any]] = []
        ctx.on_watcher_removed(lambda watcher: seen.append((watcher.data, watcher.handle.stream)))
        a, b = socketpair()
        with closing_all(a):
            ctx.add(weak.create(b), api.Event.READ, "weak")
            stream = weakref.ref(b)
            del b
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ResourceWarning)
                gc.collect()
            assert stream() is None
            assert seen == []
            assert poll_now(ctx) == []
            assert seen == [("weak", None)]
            assert poll_now(ctx) == []
            assert seen == [("weak", None)]

    def test_poll_on_watcher_removed_cleared(self, api: ModuleType, ctx: Any) -> None:
        """B.73, SPEC 10: a new callback replaces the old one; None clears it."""
        _removal_callbacks(ctx)
        pairs = [socketpair() for _ in range(2)]
        first: list[Any] = []
        second: list[Any] = []
        with closing_all(*(end for pair in pairs for end in pair)):
            watchers = [ctx.add(a, api.Event.READ, i) for i, (a, _b) in enumerate(pairs)]
            ctx.on_watcher_removed(first.append)
            ctx.on_watcher_removed(second.append)
            pairs[0][0].close()
            assert not watchers[0].is_active()
            assert poll_now(ctx) == []
            assert first == [] and second == [watchers[0]]
            ctx.on_watcher_removed(None)
            pairs[1][0].close()
            assert not watchers[1].is_active()
            assert poll_now(ctx) == []
            assert poll_now(ctx) == []
            assert first == [] and second == [watchers[0]]

    def test_poll_on_watcher_removed_deferred(self, api: ModuleType, ctx: Any) -> None:
        """B.74, php-src poll_on_watcher_removed_deferred.phpt, SPEC 10.

        Two removals queued, a callback that raises: the first wait raises for one of
        them, polling nothing (a ready one-shot is not consumed), the second raises for
        the other, the third is a normal wait.
        """
        _removal_callbacks(ctx)
        a, b = socketpair()
        c, d = socketpair()
        x, y = socketpair()
        seen: list[Any] = []

        def callback(watcher: Any) -> None:
            seen.append(watcher.data)
            raise _Raised(watcher.data)

        with closing_all(a, b, c, d, x, y):
            one = ctx.add(b, api.Event.READ, "one")
            two = ctx.add(d, api.Event.READ, "two")
            ctx.add(x, [api.Event.WRITE, api.Event.ONESHOT], "shot")
            ctx.on_watcher_removed(callback)
            b.close()
            assert not one.is_active()
            d.close()
            assert not two.is_active()
            raised = []
            for _ in range(2):
                with pytest.raises(_Raised) as info:
                    ctx.wait(0)
                raised.append(str(info.value))
            assert sorted(raised) == ["one", "two"]
            assert seen == raised
            assert reported(poll_now(ctx)) == {"shot": api.Event.WRITE}
            assert poll_now(ctx) == []
            assert seen == raised

    @pytest.mark.parametrize("how", ["close", "gc"])
    def test_poll_on_watcher_removed_deferred_context_closed(
        self, api: ModuleType, backend: Any, how: str
    ) -> None:
        """B.75, php-src poll_on_watcher_removed_deferred.phpt, SPEC 10: closing (or
        collecting) the context drops the queued removals, and deactivating its watchers
        is no removal either: the callback never runs."""
        a, b = socketpair()
        c, d = socketpair()
        removed: list[Any] = []
        with closing_all(a, b, c, d):
            context = api.Context(backend)
            _removal_callbacks(context)
            context.on_watcher_removed(removed.append)
            closed = context.add(b, api.Event.READ, "closed")
            active = context.add(c, api.Event.WRITE, "active")
            b.close()
            assert not closed.is_active()
            if how == "close":
                context.close()
                with pytest.raises(api.PollError):
                    context.wait(0)
            else:
                del context
            gc.collect()
            assert not active.is_active()
            assert removed == []
