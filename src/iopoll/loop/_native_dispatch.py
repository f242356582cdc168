"""Putting the C dispatch (``_speedups.c``) on a driver class, when it was built.

``IoPollDriver`` and ``SelectorsDriver`` are each a subclass of a pure-Python class
(``PyIoPollDriver``, ``PySelectorsDriver``) that ``accelerate()`` gives the C versions of the
methods a busy loop runs per callback and per tick (``_speedups.method_names()``).  The
parents keep the Python methods, which are the reference: the tests run both.

Their suspensions go the same way: such a driver's ``LoopRunner`` is a ``NativeLoopRunner``,
which hands out ``NativeSuspension`` objects, and both get the C versions of the methods one
suspension and its resumption run (``_suspend.c``).

The records their C ``defer()``, ``delay()`` and ``repeat()`` make are not tracked by the
garbage collector when made (``_records.c`` says why): every driver of an accelerated class
goes into ``RECORD_OWNERS`` as it is made, and a ``gc.callbacks`` entry has the records they
hold tracked at the start of each full collection, so that a cycle through one is found.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from .._native import install_accelerator
from ._abstract_driver import AbstractDriver
from ._suspension import LoopRunner, Suspension

__all__ = ["RECORD_OWNERS", "NativeLoopRunner", "NativeSuspension", "accelerate"]

# The drivers whose untracked C records a full collection must see (the module doc), and
# what tracks them: _speedups.track_records, once a class is accelerated.
RECORD_OWNERS: weakref.WeakSet[Any] = weakref.WeakSet()
_track: Callable[[Any], None] | None = None


def _track_records(phase: str, info: dict[str, int]) -> None:
    """The ``gc.callbacks`` entry: before a full collection, track the C records of every
    driver still in ``RECORD_OWNERS``, the unreachable ones included (their weak references
    hold until the collection frees them)."""
    track = _track
    if track is not None and phase == "start" and info["generation"] == 2:
        for driver in list(RECORD_OWNERS):
            track(driver)


class NativeSuspension(Suspension):
    """A ``Suspension`` whose ``suspend()``, ``resume()`` and ``_switch_in()`` are C."""

    __slots__ = ()


class NativeLoopRunner(LoopRunner):
    """A ``LoopRunner`` whose ``suspension()``, ``hand_over()`` and ``_loop_main()`` are C."""

    __slots__ = ()

    _suspension_type = NativeSuspension


def accelerate(
    cls: type[AbstractDriver],  # type: ignore[type-arg]
    io: tuple[type, type, Mapping[Any, int], type[BaseException], type] | None = None,
) -> bool:
    """Put the C dispatch methods on ``cls``; return whether it now runs them.

    ``io``, for ``IoPollDriver``: its ``Watcher`` class, ``FdEntry``, the table of wake
    bits, the exception that ends a wait after a lost stream and its ``Context`` class;
    with it, ``cls`` also gets the C ``_wait`` and ``_queue_ready``, and its C poll calls
    that ``Context``'s C ``wait()`` directly while the class has it.  Not when the
    extension was not built (it is optional) or ``IOPOLL_PURE_PYTHON`` is set; a build
    whose slots do not match the classes' warns and leaves ``cls`` pure.
    """

    def install_dispatch() -> None:
        global _track
        from ._speedups import install, install_io, install_suspensions, track_records

        install(cls, AbstractDriver, LoopRunner)
        install_suspensions(NativeLoopRunner, NativeSuspension)
        cls._runner_type = NativeLoopRunner
        cls._record_owners = RECORD_OWNERS
        _track = track_records
        if _track_records not in gc.callbacks:
            gc.callbacks.append(_track_records)
        if io is not None:
            install_io(cls, *io)

    return install_accelerator("iopoll.loop: the C dispatch", install_dispatch)
