"""iopoll_conformance: the behaviour every implementation of the iopoll API must show.

Run it against any module exposing the iopoll names::

    python -m iopoll_conformance iopoll
    python -m iopoll_conformance theirpkg.poll --backend EPOLL -x

or subclass :class:`ConformanceSuite` in a pytest module (see its docstring).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .suite import ConformanceSuite

__all__ = ["ConformanceSuite"]


def __getattr__(name: str) -> Any:
    # Imported on first use, so that ``python -m iopoll_conformance`` can say which
    # dependency is missing instead of failing inside this import.
    if name == "ConformanceSuite":
        from .suite import ConformanceSuite

        return ConformanceSuite
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
