"""Putting the C dispatch (``_speedups.c``) on a driver class, when it was built.

``IoPollDriver`` and ``SelectorsDriver`` are each a subclass of a pure-Python class
(``PyIoPollDriver``, ``PySelectorsDriver``) that ``accelerate()`` gives the C versions of the
methods a busy loop runs per callback and per tick (``_speedups.method_names()``).  The
parents keep the Python methods, which are the reference: the tests run both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._native import install_accelerator
from ._abstract_driver import AbstractDriver
from ._suspension import LoopRunner

__all__ = ["accelerate"]


def accelerate(
    cls: type[AbstractDriver],  # type: ignore[type-arg]
    io: tuple[type, type, Mapping[Any, int], type[BaseException]] | None = None,
) -> bool:
    """Put the C dispatch methods on ``cls``; return whether it now runs them.

    ``io``, for ``IoPollDriver``: its ``Watcher`` class, ``FdEntry``, the table of wake
    bits and the exception that ends a wait after a lost stream; with it, ``cls`` also gets
    the C ``_wait`` and ``_queue_ready``.  Not when the extension was not built (it is
    optional) or ``IOPOLL_PURE_PYTHON`` is set; a build whose slots do not match the
    classes' warns and leaves ``cls`` pure.
    """

    def install_dispatch() -> None:
        from ._speedups import install, install_io

        install(cls, AbstractDriver, LoopRunner)
        if io is not None:
            install_io(cls, *io)

    return install_accelerator("iopoll.loop: the C dispatch", install_dispatch)
