"""Revolt-style suspensions on greenlet (the optional ``iopoll[greenlet]`` extra).

A greenlet other than the root one behaves like a PHP Fiber: ``suspend()`` switches to its
parent (whoever started or last resumed it), and ``resume()``/``throw()`` queue a microtask
that switches back into it, so resumption is never re-entrant.  The root greenlet ("main")
runs the loop from ``suspend()``; ``resume()`` makes the loop hand control back to it after
the current callback.  If the loop ends while main is still suspended, ``suspend()`` raises.
"""

from __future__ import annotations

import importlib
import weakref
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ._errors import UnsupportedFeatureError

if TYPE_CHECKING:
    from ._driver import AbstractDriver

__all__ = ["Suspension", "greenlet_module", "suspension_for"]

_SUSPENDED = object()
_module: ModuleType | bool | None = False  # False: not looked for yet


def greenlet_module() -> ModuleType | None:
    """The ``greenlet`` module, imported on first use; ``None`` when it is not installed."""
    global _module
    if _module is False:
        try:
            _module = importlib.import_module("greenlet")  # no stubs: kept untyped
        except ImportError:
            _module = None
    return _module  # type: ignore[return-value]


def suspension_for(driver: AbstractDriver) -> Suspension:
    """The suspension of the current greenlet (one per greenlet), for ``get_suspension()``."""
    module: Any = greenlet_module()
    if module is None:
        raise UnsupportedFeatureError(
            "Suspensions need the greenlet package: pip install 'iopoll[greenlet]'"
        )
    driver._getcurrent = module.getcurrent
    current = module.getcurrent()
    if current.parent is None:
        suspension = driver._main_suspension
        if suspension is None or suspension._dead:
            suspension = driver._main_suspension = Suspension(driver, current, main=True)
        return suspension
    if driver._suspensions is None:
        driver._suspensions = weakref.WeakKeyDictionary()
    suspension = driver._suspensions.get(current)
    if suspension is None:
        suspension = driver._suspensions[current] = Suspension(driver, current, main=False)
    return suspension


class Suspension:
    """Suspends the greenlet it belongs to until ``resume()`` or ``throw()`` is called."""

    __slots__ = (
        "_driver",
        "_greenlet",
        "_getcurrent",
        "_main",
        "_pending",
        "_value",
        "_error",
        "_dead",
    )

    def __init__(self, driver: AbstractDriver, owner: Any, *, main: bool) -> None:
        self._driver = driver
        self._greenlet = weakref.ref(owner)
        self._getcurrent: Any = greenlet_module().getcurrent  # type: ignore[union-attr]
        self._main = main
        self._pending = False
        self._value: Any = None
        self._error: BaseException | None = None
        self._dead = False

    def suspend(self) -> Any:
        """Wait until resumed; return the ``resume()`` value or raise the ``throw()`` error.

        From the main greenlet this runs the event loop until the suspension is resumed.
        """
        if self._pending:
            raise RuntimeError("Must call resume() or throw() before calling suspend() again")
        owner = self._greenlet()
        if owner is None or self._getcurrent() is not owner:
            raise RuntimeError("Must not call suspend() from another greenlet")
        if self._dead:
            raise RuntimeError("Suspension is dead: the event loop ended without resuming it")
        self._pending = True
        if self._main:
            if self._driver._running:
                self._pending = False
                raise RuntimeError("Cannot suspend the main greenlet while the loop runs")
            try:
                interrupt = self._driver._enter_loop()
            except BaseException:
                self._pending = False
                raise
            if interrupt is None:
                self._pending = False
                self._dead = True
                raise RuntimeError(
                    "Event loop terminated without resuming the current suspension (the cause "
                    "is either a deadlock, or an incorrectly unreferenced or cancelled callback)"
                )
            if isinstance(interrupt, BaseException):
                self._pending = False
                raise interrupt
        elif owner is self._driver._loop_greenlet:
            self._driver._hand_over()  # the loop goes on in a successor; we wait to be resumed
        else:
            owner.parent.switch(_SUSPENDED)
        error, value = self._error, self._value
        self._error = self._value = None
        if error is not None:
            raise error
        return value

    def resume(self, value: Any = None) -> None:
        """Resume the suspended greenlet with ``value`` (after the current callback)."""
        self._wake(value, None)

    def throw(self, exc: BaseException) -> None:
        """Resume the suspended greenlet by raising ``exc`` from its ``suspend()``."""
        if not isinstance(exc, BaseException):
            raise TypeError(f"exc must be an exception instance, not {type(exc).__name__}")
        self._wake(None, exc)

    def _wake(self, value: Any, error: BaseException | None) -> None:
        if not self._pending:
            if self._dead:
                return  # the loop gave up on it: ignored, as Revolt does
            raise RuntimeError("Must call suspend() before calling resume()")
        self._pending = False
        self._value, self._error = value, error
        if self._main:
            if self._driver._interrupt is None:
                self._driver._interrupt = self
        else:
            self._driver._microtasks.append((self._switch_in, ()))

    def _switch_in(self) -> None:
        owner = self._greenlet()
        if owner is None or owner.dead:
            return
        current = self._getcurrent()
        if owner.parent is not current:
            owner.parent = current  # come back here when it suspends or ends
        owner.switch()

    def __repr__(self) -> str:
        state = "dead" if self._dead else "suspended" if self._pending else "idle"
        return f"<Suspension {'main' if self._main else 'greenlet'} {state}>"
