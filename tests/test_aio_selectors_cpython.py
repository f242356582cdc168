"""CPython's own selector tests (``test.test_selectors``) run against ``IoPollSelector``.

The tests are imported from the ``test`` package that ships with CPython, not copied:
``BaseSelectorTestCase`` on every available backend, and ``ScalableSelectorMixIn`` where the
backend has no ``FD_SETSIZE`` limit (not ``SELECT``).  Where ``test.test_selectors`` cannot
be imported (distributions that package the test suite separately), this module is skipped.
"""

from __future__ import annotations

import unittest
from typing import Any

import pytest

from iopoll import Backend
from iopoll.aio import IoPollSelector

test_selectors: Any = pytest.importorskip(
    "test.test_selectors", reason="CPython's test package (test.test_selectors) is not installed"
)


def _factory(backend: Backend) -> type[IoPollSelector]:
    """An ``IoPollSelector`` subclass fixed to ``backend``, called with no argument like
    the stdlib classes (a class, not a ``functools.partial``, which 3.13 warns about as a
    class attribute)."""

    def __init__(self: IoPollSelector) -> None:
        IoPollSelector.__init__(self, backend)

    return type(f"IoPollSelector{backend.name.title()}", (IoPollSelector,), {"__init__": __init__})


class _IoPollCases(test_selectors.BaseSelectorTestCase):  # type: ignore[misc]
    # KqueueSelectorTestCase's extra case holds for every Context: with nothing registered,
    # select(1) still waits its timeout.
    test_empty_select_timeout = test_selectors.KqueueSelectorTestCase.test_empty_select_timeout

    def test_modify_unregister(self) -> None:
        # The stdlib test patches selectors.{Epoll,Poll}Selector._selector_cls, a private
        # attribute of those classes, to make modify() fail; it has nothing to patch here.
        # The property it checks (a failed modify() unregisters the fd, bpo-30014) is
        # tested on IoPollSelector in tests/test_aio_selector.py.
        self.skipTest(
            "patches selectors.<Mechanism>Selector._selector_cls, private to the stdlib "
            "classes; same property tested in test_aio_selector.py"
        )


class _ScalableIoPollCases(
    _IoPollCases,
    test_selectors.ScalableSelectorMixIn,  # type: ignore[misc]
):
    """``BaseSelectorTestCase`` + ``ScalableSelectorMixIn``: for the backends with no
    ``FD_SETSIZE`` limit."""


def _available(name: str) -> bool:
    return Backend[name].is_available()


@unittest.skipUnless(_available("EPOLL"), "Backend.EPOLL is not available here")
class TestEpollIoPollSelector(_ScalableIoPollCases, unittest.TestCase):
    """``BaseSelectorTestCase`` + ``ScalableSelectorMixIn`` on ``Backend.EPOLL``."""

    SELECTOR = _factory(Backend.EPOLL)

    def test_register_file(self) -> None:
        # EpollSelectorTestCase's extra case, stated for this class: epoll refuses a
        # regular file with an OSError and leaves no key behind.
        test_selectors.EpollSelectorTestCase.test_register_file(self)

    # KqueueSelectorTestCase's extra case, which EpollSelector passes too: a closed fd is
    # refused by register() with EBADF and leaves no key behind.
    test_register_bad_fd = test_selectors.KqueueSelectorTestCase.test_register_bad_fd


@unittest.skipUnless(_available("POLL"), "Backend.POLL is not available here")
class TestPollIoPollSelector(_ScalableIoPollCases, unittest.TestCase):
    """``BaseSelectorTestCase`` + ``ScalableSelectorMixIn`` on ``Backend.POLL``."""

    SELECTOR = _factory(Backend.POLL)


@unittest.skipUnless(_available("KQUEUE"), "Backend.KQUEUE is not available here")
class TestKqueueIoPollSelector(_ScalableIoPollCases, unittest.TestCase):
    """``BaseSelectorTestCase`` + ``ScalableSelectorMixIn`` on ``Backend.KQUEUE``."""

    SELECTOR = _factory(Backend.KQUEUE)
    test_register_bad_fd = test_selectors.KqueueSelectorTestCase.test_register_bad_fd


@unittest.skipUnless(_available("WSAPOLL"), "Backend.WSAPOLL is not available here")
class TestWsapollIoPollSelector(_ScalableIoPollCases, unittest.TestCase):
    """``BaseSelectorTestCase`` + ``ScalableSelectorMixIn`` on ``Backend.WSAPOLL`` (on POSIX
    with ``IOPOLL_WSAPOLL_LIBC=1``: tests/test_wsapoll.py runs this class that way)."""

    SELECTOR = _factory(Backend.WSAPOLL)
    test_register_bad_fd = test_selectors.KqueueSelectorTestCase.test_register_bad_fd


class TestSelectIoPollSelector(_IoPollCases, unittest.TestCase):  # type: ignore[misc]
    """``BaseSelectorTestCase`` on ``Backend.SELECT`` (FD_SETSIZE-limited: not scalable)."""

    SELECTOR = _factory(Backend.SELECT)
