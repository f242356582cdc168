"""iopoll_conformance: the behaviour every implementation of the iopoll API must show.

Run it against any module exposing the iopoll names::

    python -m iopoll_conformance iopoll
    python -m iopoll_conformance theirpkg.poll --backend EPOLL -x

or subclass :class:`ConformanceSuite` in a pytest module (see its docstring).

The package also holds the contract of ``iopoll.loop`` drivers (Revolt's rules):
subclass :class:`DriverConformance` (``iopoll_conformance.loop``) in a pytest module, with a
``make()`` that returns a new driver (see its docstring, and docs/loop.md).

Both names are imported on first use: ``from iopoll_conformance import DriverConformance``
and ``from iopoll_conformance.loop import DriverConformance`` are the same class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .loop import DriverConformance
    from .suite import ConformanceSuite

__all__ = ["ConformanceSuite", "DriverConformance"]


def __getattr__(name: str) -> Any:
    # Imported on first use, so that ``python -m iopoll_conformance`` can say which
    # dependency is missing instead of failing inside this import (and so that the SPEC
    # suite does not import iopoll.loop, nor the driver contract the SPEC suite).
    if name == "ConformanceSuite":
        from .suite import ConformanceSuite

        return ConformanceSuite
    if name == "DriverConformance":
        from .loop import DriverConformance

        return DriverConformance
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
