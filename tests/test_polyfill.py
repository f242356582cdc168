"""``iopoll_polyfill.fallback``: what makes it the polyfill (SPEC 7).

The conformance suite runs every common rule against the fallback too; this file holds
what only the polyfill promises: pure standard library, only ``SELECT``, whole-second
timeouts, and code written for it running unchanged on native ``iopoll``.  Hang-up
mapping, ``FD_SETSIZE`` and spinning are in ``test_select_backend.py`` (shared with the
native SELECT backend); the hand-over is in ``test_polyfill_handover.py``.
"""

from __future__ import annotations

import ast
import functools
import math
import socket
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import _iopoll_core
import iopoll
import iopoll_polyfill
from _iopoll_core.context import Context as EngineContext
from iopoll_polyfill import fallback

# -- only SELECT (SPEC 7) -------------------------------------------------------------------


def test_only_select_is_available_and_auto_resolves_to_it() -> None:
    B = fallback.Backend
    assert B.available_backends() == [B.SELECT]
    assert B.AUTO.resolve() is B.SELECT
    with fallback.Context() as ctx:
        assert ctx.backend is B.SELECT
    with fallback.Context(B.SELECT) as ctx:
        assert ctx.backend is B.SELECT


@pytest.mark.parametrize("name", ["POLL", "EPOLL", "KQUEUE", "EVENT_PORTS", "WSAPOLL"])
def test_other_backends_are_unavailable(name: str) -> None:
    backend = fallback.Backend[name]
    assert not backend.is_available()
    with pytest.raises(fallback.BackendUnavailableError, match=name):
        fallback.Context(backend)


def test_no_backend_supports_anything_optional() -> None:
    """Level-triggered only: no edge, priority, signals or processes, not even via AUTO."""
    for backend in fallback.Backend:
        assert backend.supports_edge_triggering() is False
        assert backend.supports_priority() is False
        assert backend.supports_signal_handles() is False
        assert backend.supports_process_handles() is False


def test_iopoll_backend_members_are_not_accepted() -> None:
    """The polyfill has its own Backend enum; iopoll's members are a different type, and the
    message says whose each is (both classes are named Backend)."""
    with pytest.raises(TypeError) as caught:
        fallback.Context(iopoll.Backend.SELECT)  # type: ignore[arg-type]
    assert str(caught.value) == "backend must be a Backend of iopoll_polyfill, not one of iopoll"
    with pytest.raises(TypeError) as caught:
        iopoll.Context(fallback.Backend.SELECT)  # type: ignore[arg-type]
    assert str(caught.value) == "backend must be a Backend of iopoll, not one of iopoll_polyfill"
    with pytest.raises(TypeError, match=r"^backend must be a Backend, not str$"):
        fallback.Context("SELECT")  # type: ignore[arg-type]


# -- whole seconds (SPEC 7) ------------------------------------------------------------------


@pytest.mark.parametrize(
    "timeout",
    [
        1.5,
        0.0,
        -1.0,
        math.nan,
        math.inf,
        timedelta(seconds=1),
        timedelta(seconds=-1),
        True,
        Decimal("1"),
        Fraction(1, 2),
        "1",
    ],
    ids=repr,
)
def test_non_int_timeout_is_type_error_explaining_the_rule(timeout: Any) -> None:
    with fallback.Context() as ctx:
        a, b = socket.socketpair()
        with a, b:
            ctx.add(a, fallback.Event.WRITE)  # ready: a wait that got through would return
            with pytest.raises(TypeError) as caught:
                ctx.wait(timeout)
    message = str(caught.value)
    assert "timeout" in message
    assert "whole" in message and "microseconds" in message
    assert type(timeout).__name__ in message
    assert "wait(1, 500000)" in message  # the example shows the form to use


def test_refused_before_anything_else() -> None:
    """Even with no watcher (where a positive timeout would just sleep)."""
    with fallback.Context() as ctx:
        start = time.monotonic()
        with pytest.raises(TypeError, match="whole"):
            ctx.wait(0.5)
        assert time.monotonic() - start < 0.1


@pytest.mark.parametrize("timeout", ["x", 1.5, -1, None], ids=repr)
def test_a_closed_context_says_so_before_judging_the_timeout(timeout: Any) -> None:
    """As iopoll's Context does: ``PollError("Context is closed")`` whatever the timeout,
    so that one call gets one class in both packages (SPEC 1)."""
    for api in (iopoll, fallback):
        ctx = api.Context()
        ctx.close()
        with pytest.raises(api.PollError, match="Context is closed") as caught:
            ctx.wait(timeout)
        assert type(caught.value) is api.PollError


def test_int_seconds_plus_microseconds_is_the_timeout() -> None:
    class Seconds(int):
        """An int subclass is still whole seconds."""

    with fallback.Context() as ctx:
        a, b = socket.socketpair()
        with a, b:
            ctx.add(b, fallback.Event.READ, "b")
            for timeout, micro, expected in ((0, 300_000, 0.3), (Seconds(0), 100_000, 0.1)):
                start = time.monotonic()
                assert ctx.wait(timeout, micro) == []
                assert expected - 0.01 <= time.monotonic() - start < expected + 0.5
            a.send(b"x")
            start = time.monotonic()
            assert [w.data for w in ctx.wait(5)] == ["b"]
            assert [w.data for w in ctx.wait(None)] == ["b"]
            assert time.monotonic() - start < 0.5
    with fallback.Context() as ctx, pytest.raises(ValueError, match="negative"):
        ctx.wait(-1)


# -- code written for the polyfill runs on native iopoll (SPEC 7) ---------------------------


def polyfill_style_session(api: ModuleType, ctx: Any) -> list[Any]:
    """A small exchange as a library written for the polyfill would do it: int timeouts
    plus microseconds, one-shot re-arming, max_events, hang-up.  Returns a transcript."""
    E = api.Event
    transcript: list[Any] = []

    def record(step: str, watchers: list[Any]) -> None:
        transcript.append((step, sorted((w.data, int(w.triggered_events)) for w in watchers)))

    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    try:
        reader = ctx.add(b, E.READ, "reader")
        writer = ctx.add(a, E.WRITE | E.ONESHOT, "writer")
        record("writable", ctx.wait(0, 100_000))
        start = time.monotonic()
        record("one-shot fired", ctx.wait(0, 100_000))
        transcript.append(("waited 0.1 s", time.monotonic() - start >= 0.09))
        a.send(b"ping")
        record("readable", ctx.wait(1))
        record("level", ctx.wait(1, 0))
        writer.modify_events(E.WRITE)
        first = ctx.wait(1, 0, 1)
        second = ctx.wait(1, 0, 1)
        transcript.append(("max_events=1", len(first), len(second)))
        record("both", ctx.wait(None))
        transcript.append(("read", b.recv(10)))
        writer.remove()
        a.close()
        record("hang-up", ctx.wait(1))
        transcript.append(("read at end", b.recv(10)))
        reader.modify_data("renamed")
        record("still there", ctx.wait(0))
        transcript.append(("active", len(ctx)))
    finally:
        a.close()
        b.close()
    return transcript


def test_same_code_same_results_on_polyfill_and_native() -> None:
    with fallback.Context() as ctx:
        expected = polyfill_style_session(fallback, ctx)
    R, W = 1, 2
    HUP = 8
    assert expected == [
        ("writable", [("writer", W)]),
        ("one-shot fired", []),
        ("waited 0.1 s", True),
        ("readable", [("reader", R)]),
        ("level", [("reader", R)]),
        ("max_events=1", 1, 1),
        ("both", [("reader", R), ("writer", W)]),
        ("read", b"ping"),
        ("hang-up", [("reader", R | HUP)]),
        ("read at end", b""),
        ("still there", [("renamed", R | HUP)]),
        ("active", 1),
    ]
    runs: dict[str, tuple[ModuleType, Callable[[], Any]]] = {
        "iopoll AUTO": (iopoll, iopoll.Context)
    }
    for backend in iopoll.Backend.available_backends():
        runs[f"iopoll {backend.name}"] = (iopoll, functools.partial(iopoll.Context, backend))
    runs["iopoll_polyfill"] = (iopoll_polyfill, iopoll_polyfill.Context)
    for name, (api, make) in runs.items():
        with make() as ctx:
            assert polyfill_style_session(api, ctx) == expected, name


# -- pure standard library (SPEC 7) ----------------------------------------------------------


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(absolute module imported, whether at module level) for every import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    in_function: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_function.update(id(child) for child in ast.walk(node) if child is not node)
    found: list[tuple[str, bool]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found.extend((name, id(node) not in in_function) for name in names)
    return found


def _polyfill_path_files() -> list[Path]:
    core = Path(_iopoll_core.__file__).parent
    package = Path(iopoll_polyfill.__file__).parent
    return sorted(core.glob("*.py")) + sorted(package.glob("*.py"))


def test_polyfill_path_imports_only_the_standard_library() -> None:
    stdlib = sys.stdlib_module_names
    files = _polyfill_path_files()
    hand_over = Path(iopoll_polyfill.__file__)
    assert any(p.name == "select_mechanism.py" for p in files)
    for path in files:
        for module, _ in _imports(path):
            top = module.partition(".")[0]
            if top == "iopoll" and path == hand_over:
                continue  # the hand-over, checked below
            assert top in stdlib or top == "_iopoll_core", f"{path.name} imports {module}"


def test_only_the_hand_over_imports_iopoll_and_not_at_module_level() -> None:
    importing = {
        (path.parent.name, path.name, at_module_level)
        for path in _polyfill_path_files()
        for module, at_module_level in _imports(path)
        if module.partition(".")[0] == "iopoll"
    }
    assert importing == {("iopoll_polyfill", "__init__.py", False)}


def test_fallback_shares_the_engine_with_iopoll() -> None:
    """One implementation of the logic: the polyfill's names are the engine's own."""
    # iopoll's Watcher is the engine's, plus the C accelerator's `data` getter when built.
    assert issubclass(iopoll.Watcher, fallback.Watcher)
    assert iopoll.Watcher.__slots__ == ()
    assert fallback.Event is iopoll.Event
    assert fallback.PollError is iopoll.PollError
    assert fallback.StreamPollHandle is iopoll.StreamPollHandle
    assert issubclass(fallback.Context, EngineContext)
    native_context: object = iopoll.Context
    assert fallback.Context is not native_context
