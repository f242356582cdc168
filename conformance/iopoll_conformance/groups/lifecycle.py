"""Context and Watcher lifecycle: close, len, GC, copy, pickle, fork, modify, remove (SPEC 4, 5)."""

from __future__ import annotations

import contextlib
import copy
import gc
import json
import os
import pickle
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from ..process import alarm, in_child
from ..streams import drain
from ..support import poll_now, reported, short_wait, socketpair

FORK_REFUSED_CALLS = ("add", "wait", "modify", "modify_events")


def check_inactive(api: ModuleType, watcher: Any, match: str | None = None) -> None:
    """``remove()`` and every modify of the inactive ``watcher`` raise InactiveWatcherError
    (with a message matching ``match``, when given), and change nothing."""
    data, events = watcher.data, watcher.watched_events
    calls: list[Callable[[], object]] = [
        watcher.remove,
        lambda: watcher.modify_events(api.Event.WRITE),
        lambda: watcher.modify_data("new"),
        lambda: watcher.modify(api.Event.WRITE, "new"),
    ]
    for call in calls:
        with pytest.raises(api.InactiveWatcherError, match=match):
            call()
    assert watcher.is_active() is False
    assert watcher.data == data
    assert watcher.watched_events == events


def fork_refusals(api: ModuleType, ctx: Any, pair: tuple[Any, Any], watcher: Any) -> dict[str, Any]:
    """Run in a forked child: what each of ``FORK_REFUSED_CALLS`` does with the parent's
    context: ``[error class name, code]`` for a FailedPollOperationError, else a string."""
    calls: dict[str, Callable[[], object]] = {
        "add": lambda: ctx.add(pair[1], api.Event.READ),
        "wait": lambda: ctx.wait(0),
        "modify": lambda: watcher.modify(api.Event.READ),
        "modify_events": lambda: watcher.modify_events(api.Event.READ),
    }
    outcome: dict[str, Any] = {}
    for name in FORK_REFUSED_CALLS:
        try:
            calls[name]()
            outcome[name] = "no error"
        except api.FailedPollOperationError as exc:
            outcome[name] = [type(exc).__name__, int(exc.code)]
        except Exception as exc:
            outcome[name] = f"{type(exc).__name__}: {exc}"
    return outcome


def wait_outcome(api: ModuleType, call: Callable[[], list[Any]]) -> list[Any]:
    """What a wait did, JSON-able: ``["returned", [data...]]``, or ``["raised", class
    name, code]`` for a FailedPollOperationError, else ``["raised", "Class: message"]``."""
    try:
        return ["returned", [watcher.data for watcher in call()]]
    except api.FailedPollOperationError as exc:
        return ["raised", type(exc).__name__, int(exc.code)]
    except Exception as exc:
        return ["raised", f"{type(exc).__name__}: {exc}"]


class LifecycleRules:
    """Context and Watcher lifecycle: close, len, GC, copy, fork, modify, remove (SPEC 4, 5)."""

    # -- close, with, len ----------------------------------------------------------------

    def test_spec_4_len(self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]) -> None:
        """SPEC 4: len(ctx) counts the active watchers; 0 after close."""
        assert len(ctx) == 0
        first = ctx.add(pair[0], api.Event.READ)
        ctx.add(pair[1], api.Event.READ)
        assert len(ctx) == 2
        first.remove()
        assert len(ctx) == 1
        ctx.close()
        assert len(ctx) == 0

    def test_spec_4_close_is_idempotent(
        self, api: ModuleType, backend: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: close() deactivates every watcher and may be called again."""
        ctx = api.Context(backend)
        watchers = [ctx.add(pair[0], api.Event.READ), ctx.add(pair[1], api.Event.WRITE)]
        ctx.close()
        assert not any(w.is_active() for w in watchers)
        ctx.close()
        ctx.close()
        assert len(ctx) == 0

    def test_spec_4_context_manager(
        self, api: ModuleType, backend: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: ``with Context() as ctx`` yields the context and closes it on exit."""
        with api.Context(backend) as ctx:
            assert isinstance(ctx, api.Context)
            watcher = ctx.add(pair[0], api.Event.WRITE)
            assert short_wait(ctx) == [watcher]
        assert not watcher.is_active()
        with pytest.raises(api.PollError):
            ctx.add(pair[1], api.Event.READ)

    def test_spec_4_context_manager_closes_on_error(
        self, api: ModuleType, backend: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: the with block closes the context when an exception leaves it."""
        with pytest.raises(KeyError), api.Context(backend) as ctx:
            watcher = ctx.add(pair[0], api.Event.WRITE)
            raise KeyError("out")
        assert not watcher.is_active()
        assert len(ctx) == 0

    def test_spec_4_after_close(self, api: ModuleType, backend: Any, pair: tuple[Any, Any]) -> None:
        """SPEC 4: after close add/wait raise PollError; watchers are inactive."""
        ctx = api.Context(backend)
        watcher = ctx.add(pair[0], api.Event.READ, "data")
        ctx.close()
        with pytest.raises(api.PollError):
            ctx.add(pair[1], api.Event.READ)
        with pytest.raises(api.PollError):
            ctx.wait(0)
        with pytest.raises(api.PollError):
            ctx.wait()
        check_inactive(api, watcher)
        assert watcher.data == "data"
        assert watcher.watched_events == api.Event.READ

    def test_poll_watcher_outlives_context(
        self, api: ModuleType, backend: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.43, php-src poll_watcher_outlives_context.phpt: a collected context's watchers."""
        ctx = api.Context(backend)
        watcher = ctx.add(pair[0], api.Event.READ, "kept")
        ref = weakref.ref(ctx)
        del ctx
        gc.collect()
        assert ref() is None, "a watcher must not keep its context alive"
        check_inactive(api, watcher)  # modify_data included: B.45
        assert watcher.data == "kept"
        assert watcher.handle.stream is pair[0]
        assert watcher.watched_events == api.Event.READ

    def test_spec_4_collected_with_data_that_leads_back_to_it(
        self, api: ModuleType, backend: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: a context is collected, and its watchers go inactive, also when watcher
        data refers back to it (a cycle, as asyncio's selector keys make through the loop):
        nothing held from outside the cycle may keep it alive."""
        ctx = api.Context(backend)

        class Owner:  # what an event loop is to its selector's keys
            def __init__(self, context: Any) -> None:
                self.context = context

        ctx.add(pair[0], api.Event.READ, Owner(ctx))
        kept = ctx.add(pair[1], api.Event.READ, "kept")
        ref = weakref.ref(ctx)
        del ctx
        gc.collect()
        assert ref() is None, "a cycle through watcher data must not keep the context alive"
        check_inactive(api, kept)
        assert kept.data == "kept"

    def test_spec_4_context_holds_watchers(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.44, SPEC 5: the context holds its watchers: dropping ours does not remove them."""
        ref = weakref.ref(ctx.add(pair[1], api.Event.READ, "held"))
        gc.collect()
        assert ref() is not None
        pair[0].send(b"x")
        assert reported(short_wait(ctx)) == {"held": api.Event.READ}

    # -- construction, copy, pickle ---------------------------------------------------------

    def test_spec_5_watcher_not_constructible(self, api: ModuleType, pair: tuple[Any, Any]) -> None:
        """SPEC 5: calling Watcher(...) directly is a TypeError."""
        with pytest.raises(TypeError):
            api.Watcher()
        with pytest.raises(TypeError):
            api.Watcher(api.StreamPollHandle(pair[0]), api.Event.READ)

    def test_poll_clone_not_allowed(self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]) -> None:
        """B.8, php-src poll_clone_not_allowed.phpt: copy/deepcopy/pickle are TypeErrors."""
        handle = api.StreamPollHandle(pair[0])
        watcher = ctx.add(handle, api.Event.READ)
        operations: list[Callable[[Any], Any]] = [
            copy.copy,
            copy.deepcopy,
            pickle.dumps,
            lambda obj: pickle.dumps(obj, protocol=0),
        ]
        for obj in (ctx, watcher, handle):
            for operation in operations:
                with pytest.raises(TypeError):
                    operation(obj)
        assert watcher.is_active()

    # -- fork --------------------------------------------------------------------------------

    def test_spec_4_fork_child_refused(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.10, SPEC 4: in a forked child add/wait/modify raise code PERMISSION."""
        watcher = ctx.add(pair[0], api.Event.WRITE)
        report = in_child(lambda: fork_refusals(api, ctx, pair, watcher))
        permission = int(api.ErrorCode.PERMISSION)
        codes = {
            call: outcome[1] if isinstance(outcome, list) else outcome
            for call, outcome in report.items()
        }
        assert codes == dict.fromkeys(FORK_REFUSED_CALLS, permission), report
        # The parent's context is untouched.
        assert short_wait(ctx) == [watcher]
        assert watcher.watched_events == api.Event.WRITE

    def test_spec_4_fork_during_a_wait(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: a signal handler forks while wait() blocks (a pre-fork server that
        respawns workers from SIGCHLD does): the wait goes on in both processes (PEP 475),
        and the child's raises code PERMISSION rather than report the parent's fds."""
        if not hasattr(os, "fork"):
            pytest.skip("os.fork is not available")
        ctx.add(pair[0], api.Event.READ, "parent's")
        parent = os.getpid()
        read_end, write_end = os.pipe()
        children: list[int] = []

        def fork_now(signum: int, frame: object) -> None:
            pid = os.fork()
            if pid:
                children.append(pid)
                pair[1].send(b"x")  # both waits have it to report

        outcome: list[Any] = []
        try:
            with alarm(fork_now, 0.05):
                outcome = wait_outcome(api, lambda: ctx.wait(5))
        finally:
            if os.getpid() != parent:  # pragma: no cover - runs in the child
                with contextlib.suppress(BaseException):
                    os.write(write_end, json.dumps(outcome).encode())
                os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as reader:
            told = reader.read()
        assert len(children) == 1, "SIGALRM did not come during the wait"
        os.waitpid(children[0], 0)
        assert outcome == ["returned", ["parent's"]]
        child = json.loads(told)
        assert child == ["raised", "FailedPollWaitError", int(api.ErrorCode.PERMISSION)], child

    # -- modify ------------------------------------------------------------------------------

    def test_poll_stream_sock_modify_write(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.40, php-src poll_stream_sock_modify_write.phpt: modify replaces events and data."""
        watcher = ctx.add(pair[0], api.Event.READ, "read")
        assert poll_now(ctx) == []
        watcher.modify(api.Event.WRITE, "write")
        assert watcher.watched_events == api.Event.WRITE
        assert watcher.data == "write"
        assert reported(short_wait(ctx)) == {"write": api.Event.WRITE}
        watcher.modify(api.Event.READ)
        assert watcher.data is None  # data defaults to None: replaced too
        assert poll_now(ctx) == []

    def test_spec_5_modify_events_keeps_data(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 5: modify_events changes only the events; accepts an iterable."""
        watcher = ctx.add(pair[0], api.Event.READ, "kept")
        watcher.modify_events([api.Event.WRITE, api.Event.READ])
        assert watcher.watched_events == api.Event.READ | api.Event.WRITE
        assert watcher.data == "kept"
        assert reported(short_wait(ctx)) == {"kept": api.Event.WRITE}

    def test_spec_5_modify_data_keeps_events(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.40, SPEC 5: modify_data changes only the data."""
        watcher = ctx.add(pair[0], api.Event.WRITE, "old")
        marker = object()
        watcher.modify_data(marker)
        assert watcher.data is marker
        assert watcher.watched_events == api.Event.WRITE
        assert short_wait(ctx) == [watcher]
        assert watcher.data is marker

    def test_spec_5_modify_events_first(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.40, SPEC 5: modify applies events first; if they fail, data is unchanged."""
        watcher = ctx.add(pair[0], api.Event.WRITE, "old")
        with pytest.raises(ValueError):
            watcher.modify([], "new")
        with pytest.raises(TypeError):
            watcher.modify("READ", "new")
        assert watcher.data == "old"
        assert watcher.watched_events == api.Event.WRITE
        assert reported(short_wait(ctx)) == {"old": api.Event.WRITE}

    def test_spec_5_modify_events_first_backend_refusal(
        self, api: ModuleType, backend: Any, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.40: a backend refusal of the events leaves the data unchanged too."""
        if backend.supports_edge_triggering():
            pytest.skip("EDGE_TRIGGERED is accepted here")
        watcher = ctx.add(pair[0], api.Event.WRITE, "old")
        with pytest.raises(api.FailedWatcherModificationError):
            watcher.modify(api.Event.WRITE | api.Event.EDGE_TRIGGERED, "new")
        assert watcher.data == "old"
        assert watcher.watched_events == api.Event.WRITE

    # -- remove ------------------------------------------------------------------------------

    def test_poll_stream_sock_remove_write(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.41, php-src poll_stream_sock_remove_write.phpt: others keep reporting."""
        a, b = pair
        first = ctx.add(a, api.Event.WRITE, "a")
        second = ctx.add(b, api.Event.WRITE, "b")
        assert reported(short_wait(ctx)) == {"a": api.Event.WRITE, "b": api.Event.WRITE}
        first.remove()
        assert first.is_active() is False
        assert second.is_active() is True
        assert short_wait(ctx) == [second]
        assert short_wait(ctx) == [second]
        a.send(b"still usable")
        assert drain(b) == b"still usable"

    def test_poll_weakhandle_manual_remove(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.42, php-src poll_weakhandle_manual_remove.phpt: remove twice: InactiveWatcherError."""
        watcher = ctx.add(pair[0], api.Event.READ)
        watcher.remove()
        check_inactive(api, watcher)  # modify_data included: B.45
        assert len(ctx) == 0

    # -- triggered_events, has_triggered ----------------------------------------------------

    def test_spec_5_triggered_events(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.31, SPEC 5: Event(0) before a report, kept until the next report."""
        a, b = pair
        watcher = ctx.add(b, api.Event.READ)
        assert watcher.triggered_events == api.Event(0)
        assert isinstance(watcher.triggered_events, api.Event)
        assert poll_now(ctx) == []
        assert watcher.triggered_events == api.Event(0)
        a.send(b"x")
        assert short_wait(ctx) == [watcher]
        assert watcher.triggered_events == api.Event.READ
        drain(b)
        assert poll_now(ctx) == []
        assert watcher.triggered_events == api.Event.READ  # not cleared
        watcher.modify_events(api.Event.WRITE)
        assert short_wait(ctx) == [watcher]
        assert watcher.triggered_events == api.Event.WRITE

    def test_poll_stream_tcp_read_one_shot_triggered(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.31, php-src poll_stream_tcp_read_one_shot.phpt: never ONESHOT/EDGE_TRIGGERED."""
        watcher = ctx.add(pair[0], api.Event.WRITE | api.Event.ONESHOT)
        assert short_wait(ctx) == [watcher]
        assert watcher.triggered_events == api.Event.WRITE
        assert not watcher.has_triggered(api.Event.ONESHOT)
        if ctx.backend.supports_edge_triggering():
            edge = ctx.add(pair[1], api.Event.WRITE | api.Event.EDGE_TRIGGERED)
            assert short_wait(ctx) == [edge]
            assert edge.triggered_events == api.Event.WRITE
            assert not edge.has_triggered(api.Event.EDGE_TRIGGERED)

    def test_spec_5_has_triggered(self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]) -> None:
        """SPEC 5: has_triggered(event) is true when every flag of event was reported."""
        e = api.Event
        watcher = ctx.add(pair[1], e.READ | e.WRITE)
        assert not watcher.has_triggered(e.WRITE)
        assert short_wait(ctx) == [watcher]
        assert watcher.has_triggered(e.WRITE)
        assert not watcher.has_triggered(e.READ)
        assert not watcher.has_triggered(e.READ | e.WRITE)
        pair[0].send(b"x")
        assert short_wait(ctx) == [watcher]
        assert watcher.has_triggered(e.READ)
        assert watcher.has_triggered(e.READ | e.WRITE)
        assert not watcher.has_triggered(e.HANGUP)

    def test_spec_5_modify_drops_what_a_max_events_cut_kept(
        self, api: ModuleType, ctx: Any
    ) -> None:
        """SPEC 5 and 6.2: modify() replaces the events, also of a watcher whose report a
        max_events cut keeps for the next wait: it is reported for what it asks now."""
        pairs = [socketpair() for _ in range(2)]
        try:
            for _, b in pairs:
                b.send(b"x")
            events = api.Event.READ | api.Event.ONESHOT
            watchers = {ctx.add(a, events, i): a for i, (a, _) in enumerate(pairs)}
            first = poll_now(ctx, 1)
            assert len(first) == 1
            left = next(w for w in watchers if w not in first)
            drain(watchers[left])  # nothing to read any more
            left.modify_events(api.Event.WRITE)
            assert reported(poll_now(ctx)) == {left.data: api.Event.WRITE}
        finally:
            for a, b in pairs:
                a.close()
                b.close()
