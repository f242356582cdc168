"""Every ``iopoll.loop`` driver, as pytest parameters: the C and pure-Python drivers on each
backend here, ``SelectorsDriver`` in both forms, and a ``TracingDriver`` around the default
one.  For the edge tests that hold every driver to the same rule: a module that imports
``every_driver`` has the fixture ``driver``, each driver made fresh and closed after the
test.  Also ``with_test_clock`` (a driver class on a clock the test sets) and
``bytes_grown_in_run`` (what a run's callbacks leave allocated between two points)."""

from __future__ import annotations

import functools
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from iopoll import Backend
from iopoll.loop import Driver, IoPollDriver, SelectorsDriver, TracingDriver
from iopoll.loop._iopoll_driver import PyIoPollDriver
from iopoll.loop._selectors_driver import PySelectorsDriver

__all__ = ["EVERY_DRIVER", "bytes_grown_in_run", "every_driver", "with_test_clock"]

EVERY_DRIVER = [
    pytest.param(SelectorsDriver, id="selectors"),
    pytest.param(PySelectorsDriver, id="py-selectors"),
    pytest.param(lambda: TracingDriver(IoPollDriver()), id="tracing"),
] + [
    pytest.param(functools.partial(make, backend), id=f"{name}-{backend.name.lower()}")
    for make, name in ((IoPollDriver, "iopoll"), (PyIoPollDriver, "py-iopoll"))
    for backend in Backend.available_backends()
]


@pytest.fixture(params=EVERY_DRIVER, name="driver")
def every_driver(request: pytest.FixtureRequest) -> Iterator[Driver]:
    """Each driver in turn, closed after the test."""
    make: Callable[[], Driver] = request.param
    made = make()
    yield made
    made.close()  # type: ignore[attr-defined]


def with_test_clock(base: type[Any], *, start: float, step: float = 0.0) -> type[Any]:
    """``base`` on a test clock: ``clock`` starts at ``start`` and moves ``step`` seconds
    at each reading (0: only when the test sets it), and a blocking wait moves it on
    instead of sleeping.  The C dispatch calls ``_now`` and ``_poll`` by name, so it reads
    this clock as the Python one does."""

    class Clocked(base):  # type: ignore[misc]
        clock = start

        def _now(self) -> float:
            self.clock += step
            return self.clock

        def _poll(self, timeout: float) -> None:
            self.clock += timeout  # a blocking wait passes on the test clock only
            super()._poll(0.0)

    Clocked.__name__ = f"Clocked{base.__name__}"
    return Clocked


def bytes_grown_in_run(driver: Any, snapshots: list[tracemalloc.Snapshot]) -> int:
    """``driver.run()`` with allocations traced, and the bytes still allocated at the
    second of the two snapshots its callbacks took into ``snapshots`` (by
    ``tracemalloc.take_snapshot()``) that were not at the first."""
    tracemalloc.start()
    try:
        driver.run()
    finally:
        tracemalloc.stop()
    first, last = snapshots
    return sum(stat.size_diff for stat in last.compare_to(first, "filename"))
