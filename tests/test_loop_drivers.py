"""The driver contract (``iopoll_conformance.loop.DriverConformance``) on every driver.

``IoPollDriver`` and ``SelectorsDriver`` run their dispatch in C when it was built; their
pure-Python parents (``PyIoPollDriver``, ``PySelectorsDriver``), the reference, run it too.
"""

from __future__ import annotations

import pytest

from iopoll import Backend
from iopoll.loop import Driver, IoPollDriver, SelectorsDriver, TracingDriver
from iopoll.loop._iopoll_driver import PyIoPollDriver
from iopoll.loop._selectors_driver import PySelectorsDriver
from iopoll_conformance.loop import DriverConformance


def _needs(backend: Backend) -> pytest.MarkDecorator:
    return pytest.mark.skipif(
        backend not in Backend.available_backends(), reason=f"no {backend.name} backend here"
    )


class TestSelectorsDriver(DriverConformance):
    def make(self) -> Driver:
        return SelectorsDriver()


class TestPySelectorsDriver(DriverConformance):
    def make(self) -> Driver:
        return PySelectorsDriver()


@_needs(Backend.EPOLL)
class TestPyIoPollDriverEpoll(DriverConformance):
    def make(self) -> Driver:
        return PyIoPollDriver(Backend.EPOLL)


@_needs(Backend.POLL)
class TestPyIoPollDriverPoll(DriverConformance):
    def make(self) -> Driver:
        return PyIoPollDriver(Backend.POLL)


class TestTracingDriver(DriverConformance):
    leaks = False

    def make(self) -> Driver:
        return TracingDriver(IoPollDriver())


@_needs(Backend.EPOLL)
class TestIoPollDriverEpoll(DriverConformance):
    def make(self) -> Driver:
        return IoPollDriver(Backend.EPOLL)


@_needs(Backend.KQUEUE)
class TestIoPollDriverKqueue(DriverConformance):
    def make(self) -> Driver:
        return IoPollDriver(Backend.KQUEUE)


@_needs(Backend.EVENT_PORTS)
class TestIoPollDriverEventPorts(DriverConformance):
    def make(self) -> Driver:
        return IoPollDriver(Backend.EVENT_PORTS)


@_needs(Backend.POLL)
class TestIoPollDriverPoll(DriverConformance):
    def make(self) -> Driver:
        return IoPollDriver(Backend.POLL)


@_needs(Backend.WSAPOLL)
class TestIoPollDriverWsapoll(DriverConformance):
    def make(self) -> Driver:
        return IoPollDriver(Backend.WSAPOLL)


@_needs(Backend.SELECT)
class TestIoPollDriverSelect(DriverConformance):
    def make(self) -> Driver:
        return IoPollDriver(Backend.SELECT)
