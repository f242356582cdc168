"""``iopoll`` without its C accelerator: the pure-Python ``Context`` on the native backends.

``iopoll.Context.wait`` and ``iopoll.Watcher.data`` run in C when ``iopoll._speedups`` was
built.  This module offers the same API on the engine's own classes, which that code never
touches, so that one test session holds both versions to the conformance suite
(``tests/test_conformance.py``) and to the fast-path tests (``tests/test_fast_path.py``).
"""

from __future__ import annotations

import iopoll
from _iopoll_core.context import Context as _EngineContext
from _iopoll_core.watcher import Watcher as _EngineWatcher
from iopoll import *  # noqa: F403  (every name of SPEC section 1)

# After the star import, which brings iopoll.Watcher and its C ``data`` getter.
Watcher = _EngineWatcher  # type: ignore[misc]

__all__ = [*iopoll.__all__]


class Context(_EngineContext):  # type: ignore[no-redef]  # replaces the re-exported one
    """``iopoll.Context`` as it runs with ``IOPOLL_PURE_PYTHON=1``."""

    __slots__ = ()
    _backend_type = iopoll.Backend
    _watcher_type = _EngineWatcher

    def __init__(self, backend: iopoll.Backend = iopoll.Backend.AUTO) -> None:
        super().__init__(backend)
