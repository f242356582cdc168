"""The driver contract (``iopoll_conformance.loop.DriverConformance``) on every driver."""

from __future__ import annotations

import pytest

from iopoll import Backend
from iopoll.loop import Driver, IoPollDriver, SelectorsDriver, TracingDriver
from iopoll_conformance.loop import DriverConformance


def _needs(backend: Backend) -> pytest.MarkDecorator:
    return pytest.mark.skipif(
        backend not in Backend.available_backends(), reason=f"no {backend.name} backend here"
    )


class TestSelectorsDriver(DriverConformance):
    def make(self) -> Driver:
        return SelectorsDriver()


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
