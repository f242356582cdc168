"""CPython's own event loop tests (``test.test_asyncio.test_events``) run on ``iopoll.aio.Loop``.

The same test classes CPython runs against ``SelectorEventLoop`` on ``EpollSelector``,
``PollSelector`` and ``SelectSelector`` (``UnixEventLoopTestsMixin`` and
``SubprocessTestsMixin``: streams, servers, datagrams, TLS, pipes, ptys, subprocesses,
signals, ``sock_*``, ``add_reader``/``add_writer``), imported from the ``test`` package that
ships with CPython, not copied.  ``Loop()`` (its own selector, whose ``select()`` hands the
ready watchers to ``Loop._process_events``) runs them, and so does ``Loop(IoPollSelector(b))``
on every available backend (asyncio's own ``_process_events`` on ``(key, events)`` pairs).
Where the ``test`` package cannot be imported, this module is skipped.
"""

from __future__ import annotations

import sys
import unittest
from typing import Any

import pytest

from iopoll import Backend
from iopoll.aio import IoPollSelector, Loop

if sys.platform == "win32":  # pragma: no cover - the classes below are the Unix ones
    pytest.skip("CPython's Unix event loop tests", allow_module_level=True)

test_events: Any = pytest.importorskip(
    "test.test_asyncio.test_events",
    reason="CPython's test package (test.test_asyncio) is not installed",
)
test_utils: Any = pytest.importorskip("test.test_asyncio.utils")


class _LoopCases(
    test_events.UnixEventLoopTestsMixin,  # type: ignore[misc]
    test_events.SubprocessTestsMixin,  # type: ignore[misc]
):
    """What CPython's ``EPollEventLoopTests`` runs, with the loop made by ``make_loop``."""

    def make_loop(self) -> Loop:
        raise NotImplementedError

    def create_event_loop(self) -> Loop:
        loop = self.make_loop()
        assert isinstance(loop, Loop)
        return loop


class TestLoop(_LoopCases, test_utils.TestCase):  # type: ignore[misc]
    def make_loop(self) -> Loop:
        return Loop()


def _backend_cases(backend: Backend) -> type[_LoopCases]:
    def make_loop(self: _LoopCases) -> Loop:
        return Loop(IoPollSelector(backend))

    name = f"TestLoopOn{backend.name.title()}"
    cases = type(name, (_LoopCases, test_utils.TestCase), {"make_loop": make_loop})
    return unittest.skipUnless(backend.is_available(), f"Backend.{backend.name} is not here")(
        cases
    )


TestLoopOnEpoll = _backend_cases(Backend.EPOLL)
TestLoopOnPoll = _backend_cases(Backend.POLL)
TestLoopOnSelect = _backend_cases(Backend.SELECT)
TestLoopOnKqueue = _backend_cases(Backend.KQUEUE)
