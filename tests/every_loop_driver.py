"""Every ``iopoll.loop`` driver, as pytest parameters: the C and pure-Python drivers on each
backend here, ``SelectorsDriver`` in both forms, and a ``TracingDriver`` around the default
one.  For the edge tests that hold every driver to the same rule."""

from __future__ import annotations

import functools

import pytest

from iopoll import Backend
from iopoll.loop import IoPollDriver, SelectorsDriver, TracingDriver
from iopoll.loop._iopoll_driver import PyIoPollDriver
from iopoll.loop._selectors_driver import PySelectorsDriver

__all__ = ["EVERY_DRIVER"]

EVERY_DRIVER = [
    pytest.param(SelectorsDriver, id="selectors"),
    pytest.param(PySelectorsDriver, id="py-selectors"),
    pytest.param(lambda: TracingDriver(IoPollDriver()), id="tracing"),
] + [
    pytest.param(functools.partial(make, backend), id=f"{name}-{backend.name.lower()}")
    for make, name in ((IoPollDriver, "iopoll"), (PyIoPollDriver, "py-iopoll"))
    for backend in Backend.available_backends()
]
