"""The driver contract (``test_loop_conformance.DriverConformance``) on every driver."""

from __future__ import annotations

from iopoll import Backend
from iopoll.loop import Driver, IoPollDriver, SelectorsDriver, TracingDriver
from test_loop_conformance import DriverConformance


class TestSelectorsDriver(DriverConformance):
    def make(self) -> Driver:
        return SelectorsDriver()


class TestTracingDriver(DriverConformance):
    leaks = False

    def make(self) -> Driver:
        return TracingDriver(IoPollDriver())


def _iopoll_case(backend: Backend) -> type[DriverConformance]:
    class Case(DriverConformance):
        def make(self) -> Driver:
            return IoPollDriver(backend)

    Case.__name__ = Case.__qualname__ = f"TestIoPollDriver{backend.name.title()}"
    return Case


for _backend in Backend.available_backends():
    _case = _iopoll_case(_backend)
    globals()[_case.__name__] = _case
del _backend, _case
