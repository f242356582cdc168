"""iopoll_conformance: the behaviour every implementation of the iopoll API must show.

Run it against any module exposing the iopoll names::

    python -m iopoll_conformance iopoll
    python -m iopoll_conformance theirpkg.poll --backend EPOLL -x

or subclass :class:`ConformanceSuite` in a pytest module (see its docstring).
"""

from .suite import ConformanceSuite

__all__ = ["ConformanceSuite"]
