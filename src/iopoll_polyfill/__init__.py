"""iopoll_polyfill: the iopoll API wherever Python runs.

``import iopoll_polyfill`` gives iopoll's own objects when iopoll is installed and has a
native backend (``AUTO`` resolves to something better than ``SELECT``), and the pure
standard library select() implementation (:mod:`iopoll_polyfill.fallback`) otherwise.
Set ``IOPOLL_POLYFILL=1`` to force the select implementation.  ``IMPLEMENTATION`` says
which one was chosen: ``"native"`` or ``"select"``.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import TYPE_CHECKING

from . import fallback

__all__ = ["IMPLEMENTATION", "fallback"]
__all__ += fallback.__all__


def _native() -> ModuleType | None:
    """iopoll, if it should be used: importable, not vetoed, better than select()."""
    if os.environ.get("IOPOLL_POLYFILL", "") not in ("", "0"):
        return None
    try:
        import iopoll  # the only import of iopoll on the polyfill's path
    except ImportError:
        return None
    if iopoll.Backend.AUTO.resolve() is iopoll.Backend.SELECT:
        return None
    return iopoll


_chosen = _native()
IMPLEMENTATION = "select" if _chosen is None else "native"
"""``"native"`` when the names below are iopoll's own objects, ``"select"`` otherwise."""

FD_SETSIZE = fallback.FD_SETSIZE
"""The select implementation's limit (1024 on POSIX: no fd numbered at or above it; 512
sockets on Windows), whichever implementation ``IMPLEMENTATION`` names: the native one has
no such limit."""

if TYPE_CHECKING:
    # Type checkers see the polyfill's signatures (whole-second ``wait``): code that
    # passes them runs on both implementations.
    from .fallback import *  # noqa: F403
else:
    _source: ModuleType = fallback if _chosen is None else _chosen
    globals().update({name: getattr(_source, name) for name in fallback.__all__[1:]})
