"""CPython's own event loop tests (``test.test_asyncio``) run on ``iopoll.aio.Loop``.

The test classes CPython runs against ``SelectorEventLoop`` on ``EpollSelector``,
``PollSelector`` and ``SelectSelector``, imported from the ``test`` package that ships with
CPython, not copied:

* ``test_events``: ``UnixEventLoopTestsMixin`` and ``SubprocessTestsMixin`` (streams,
  servers, datagrams, TLS, pipes, ptys, subprocesses, signals, ``add_reader``/``add_writer``);
* ``test_sock_lowlevel``: ``BaseSockTestsMixin`` (the ``sock_*`` methods);
* ``test_sendfile``: ``SendfileTestsBase`` (``loop.sendfile``, with and without ``os.sendfile``).

Each runs on ``Loop()`` (its own selector, whose ``select()`` hands the ready watchers to
``Loop._process_events``) and on ``Loop(IoPollSelector(b))`` for every available backend
(asyncio's own ``_process_events`` on ``(key, events)`` pairs; marked slow, so tox runs
those on one Python version).  Where the ``test`` package
cannot be imported, this module is skipped.
"""

from __future__ import annotations

import sys
import unittest
from collections.abc import Callable
from typing import Any

import pytest

from iopoll import Backend
from iopoll.aio import IoPollSelector, Loop

if sys.platform == "win32":  # pragma: no cover - the classes below are the Unix ones
    pytest.skip("CPython's Unix event loop tests", allow_module_level=True)

_REASON = "CPython's test package (test.test_asyncio) is not installed"
test_events: Any = pytest.importorskip("test.test_asyncio.test_events", reason=_REASON)
test_sock_lowlevel: Any = pytest.importorskip("test.test_asyncio.test_sock_lowlevel")
test_sendfile: Any = pytest.importorskip("test.test_asyncio.test_sendfile")
test_utils: Any = pytest.importorskip("test.test_asyncio.utils")

# What CPython's EPollEventLoopTests classes mix in, per module.
SUITES: dict[str, tuple[type, ...]] = {
    "Events": (test_events.UnixEventLoopTestsMixin, test_events.SubprocessTestsMixin),
    "Sock": (test_sock_lowlevel.BaseSockTestsMixin,),
    "Sendfile": (test_sendfile.SendfileTestsBase,),
}


def _own_selector() -> Loop:
    return Loop()


def _on(backend: Backend) -> Callable[[], Loop]:
    def make_loop() -> Loop:
        return Loop(IoPollSelector(backend))

    return make_loop


LOOPS: dict[str, tuple[Callable[[], Loop], Backend | None]] = {
    "": (_own_selector, None),
    **{f"On{b.name.title()}": (_on(b), b) for b in Backend if b is not Backend.AUTO},
}


def _cases(suite: str, loop: str) -> type:
    make_loop, backend = LOOPS[loop]

    def create_event_loop(self: unittest.TestCase) -> Loop:
        return make_loop()

    cases = type(
        f"Test{suite}Loop{loop}",
        (*SUITES[suite], test_utils.TestCase),
        {"create_event_loop": create_event_loop},
    )
    if backend is not None:
        if not backend.is_available():
            cases = unittest.skip(f"Backend.{backend.name} is not available here")(cases)
        # Through asyncio's own _process_events, the selector's select() is what differs by
        # backend, and test_aio_selectors_cpython covers it on every version: one will do.
        cases = pytest.mark.slow(cases)
    return cases


for _suite in SUITES:
    for _loop in LOOPS:
        _class = _cases(_suite, _loop)
        globals()[_class.__name__] = _class
