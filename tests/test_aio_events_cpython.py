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

import os
import sys
import unittest
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

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
EVENTS = (test_events.UnixEventLoopTestsMixin, test_events.SubprocessTestsMixin)
SOCK = (test_sock_lowlevel.BaseSockTestsMixin,)
SENDFILE = (test_sendfile.SendfileTestsBase,)
_CaseT = TypeVar("_CaseT", bound=type)


@pytest.fixture(autouse=True, scope="module")
def _scratch_directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Run in a directory of pytest's: test_sendfile writes its data file (``TESTFN``) in
    the current one, and a run cut short would leave it in the checkout."""
    before = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("cpython_asyncio"))
    yield
    os.chdir(before)


def own_selector(cases: _CaseT) -> _CaseT:
    """Run ``cases`` on ``Loop()``, whose own selector hands it the ready watchers."""

    def create_event_loop(self: unittest.TestCase) -> Loop:
        return Loop()

    cases.create_event_loop = create_event_loop  # type: ignore[attr-defined]
    return cases


def on(backend: Backend) -> Callable[[_CaseT], _CaseT]:
    """Run the decorated cases on ``Loop(IoPollSelector(backend))``, skipped where that
    backend is unavailable.  Marked slow: through asyncio's own ``_process_events`` what
    differs by backend is the selector's ``select()``, which test_aio_selectors_cpython
    covers on every version, so one version will do."""

    def decorate(cases: _CaseT) -> _CaseT:
        def create_event_loop(self: unittest.TestCase) -> Loop:
            return Loop(IoPollSelector(backend))

        cases.create_event_loop = create_event_loop  # type: ignore[attr-defined]
        if not backend.is_available():
            cases = unittest.skip(f"Backend.{backend.name} is not available here")(cases)
        return pytest.mark.slow(cases)  # type: ignore[no-any-return]

    return decorate


@own_selector
class TestEventsLoop(*EVENTS, test_utils.TestCase):  # type: ignore[misc]
    pass


@own_selector
class TestSockLoop(*SOCK, test_utils.TestCase):  # type: ignore[misc]
    pass


@own_selector
class TestSendfileLoop(*SENDFILE, test_utils.TestCase):  # type: ignore[misc]
    pass


@on(Backend.POLL)
class TestEventsLoopOnPoll(*EVENTS, test_utils.TestCase):  # type: ignore[misc]
    pass


@on(Backend.EPOLL)
class TestEventsLoopOnEpoll(*EVENTS, test_utils.TestCase):  # type: ignore[misc]
    pass


@on(Backend.KQUEUE)
class TestEventsLoopOnKqueue(*EVENTS, test_utils.TestCase):  # type: ignore[misc]
    pass


@on(Backend.EVENT_PORTS)
class TestEventsLoopOnEvent_Ports(*EVENTS, test_utils.TestCase):  # type: ignore[misc]
    pass


@on(Backend.WSAPOLL)
class TestEventsLoopOnWsapoll(*EVENTS, test_utils.TestCase):  # type: ignore[misc]
    pass


@on(Backend.SELECT)
class TestEventsLoopOnSelect(*EVENTS, test_utils.TestCase):  # type: ignore[misc]
    pass


@on(Backend.POLL)
class TestSockLoopOnPoll(*SOCK, test_utils.TestCase):  # type: ignore[misc]
    pass


@on(Backend.EPOLL)
class TestSockLoopOnEpoll(*SOCK, test_utils.TestCase):  # type: ignore[misc]
    pass


@on(Backend.KQUEUE)
class TestSockLoopOnKqueue(*SOCK, test_utils.TestCase):  # type: ignore[misc]
    pass


@on(Backend.EVENT_PORTS)
class TestSockLoopOnEvent_Ports(*SOCK, test_utils.TestCase):  # type: ignore[misc]
    pass


@on(Backend.WSAPOLL)
class TestSockLoopOnWsapoll(*SOCK, test_utils.TestCase):  # type: ignore[misc]
    pass


@on(Backend.SELECT)
class TestSockLoopOnSelect(*SOCK, test_utils.TestCase):  # type: ignore[misc]
    pass


@on(Backend.POLL)
class TestSendfileLoopOnPoll(*SENDFILE, test_utils.TestCase):  # type: ignore[misc]
    pass


@on(Backend.EPOLL)
class TestSendfileLoopOnEpoll(*SENDFILE, test_utils.TestCase):  # type: ignore[misc]
    pass


@on(Backend.KQUEUE)
class TestSendfileLoopOnKqueue(*SENDFILE, test_utils.TestCase):  # type: ignore[misc]
    pass


@on(Backend.EVENT_PORTS)
class TestSendfileLoopOnEvent_Ports(*SENDFILE, test_utils.TestCase):  # type: ignore[misc]
    pass


@on(Backend.WSAPOLL)
class TestSendfileLoopOnWsapoll(*SENDFILE, test_utils.TestCase):  # type: ignore[misc]
    pass


@on(Backend.SELECT)
class TestSendfileLoopOnSelect(*SENDFILE, test_utils.TestCase):  # type: ignore[misc]
    pass
