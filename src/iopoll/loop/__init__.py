"""iopoll.loop: a callback event loop with Revolt's contract, on an ``iopoll.Context``.

    from iopoll import loop

    def tick(callback_id: str) -> None:
        print("one second later")

    loop.delay(1.0, tick)
    loop.run()          # returns when no enabled, referenced callback is left

Each thread has its own driver (``get_driver()``, made by ``DriverFactory`` on first use);
every driver method is also a module function working on the current thread's driver.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from typing import Any

from ._abstract_driver import AbstractDriver
from ._callbacks import CallbackType
from ._errors import InvalidCallbackError, UncaughtError, UnsupportedFeatureError
from ._factory import DriverFactory
from ._interface import Driver, ErrorHandler
from ._iopoll_driver import IoPollDriver
from ._selectors_driver import SelectorsDriver
from ._suspension import Suspension
from ._tracing import TracingDriver

__all__ = [
    "AbstractDriver",
    "CallbackType",
    "Driver",
    "DriverFactory",
    "InvalidCallbackError",
    "IoPollDriver",
    "SelectorsDriver",
    "Suspension",
    "TracingDriver",
    "UncaughtError",
    "UnsupportedFeatureError",
    "cancel",
    "defer",
    "delay",
    "disable",
    "enable",
    "get_driver",
    "get_error_handler",
    "get_identifiers",
    "get_suspension",
    "get_type",
    "is_enabled",
    "is_referenced",
    "is_running",
    "on_readable",
    "on_signal",
    "on_writable",
    "queue",
    "reference",
    "repeat",
    "run",
    "set_driver",
    "set_error_handler",
    "stop",
    "unreference",
]

_local = threading.local()


def get_driver() -> Driver:
    """The current thread's driver, made by ``DriverFactory().create()`` on first use."""
    driver: Driver | None = getattr(_local, "driver", None)
    if driver is None:
        driver = _local.driver = DriverFactory().create()
    return driver


def set_driver(driver: Driver) -> None:
    """Make ``driver`` the current thread's driver; refused while the current one runs."""
    if not isinstance(driver, Driver):
        raise TypeError(f"driver must be a Driver, not {type(driver).__name__}")
    current: Driver | None = getattr(_local, "driver", None)
    if current is not None and current.is_running():
        raise RuntimeError("Cannot set the driver while the current one is running")
    _local.driver = driver
    # Objects whose finalizers reference the old driver go now, not mid-tick later.
    gc.collect()


def queue(fn: Callable[..., None], /, *args: Any) -> None:
    """Queue a microtask on the current driver (see ``Driver.queue``)."""
    get_driver().queue(fn, *args)


def defer(fn: Callable[[str], None]) -> str:
    """Run ``fn(id)`` in the next tick (see ``Driver.defer``)."""
    return get_driver().defer(fn)


def delay(seconds: float, fn: Callable[[str], None]) -> str:
    """Run ``fn(id)`` once after ``seconds`` (see ``Driver.delay``)."""
    return get_driver().delay(seconds, fn)


def repeat(interval: float, fn: Callable[[str], None]) -> str:
    """Run ``fn(id)`` every ``interval`` seconds (see ``Driver.repeat``)."""
    return get_driver().repeat(interval, fn)


def on_readable(stream: Any, fn: Callable[[str, Any], None]) -> str:
    """Run ``fn(id, stream)`` while ``stream`` is readable (see ``Driver.on_readable``)."""
    return get_driver().on_readable(stream, fn)


def on_writable(stream: Any, fn: Callable[[str, Any], None]) -> str:
    """Run ``fn(id, stream)`` while ``stream`` is writable (see ``Driver.on_writable``)."""
    return get_driver().on_writable(stream, fn)


def on_signal(signum: int, fn: Callable[[str, int], None]) -> str:
    """Run ``fn(id, signum)`` on each ``signum`` (see ``Driver.on_signal``)."""
    return get_driver().on_signal(signum, fn)


def enable(callback_id: str) -> str:
    """Enable a callback from the next tick on (see ``Driver.enable``)."""
    return get_driver().enable(callback_id)


def disable(callback_id: str) -> str:
    """Disable a callback at once (see ``Driver.disable``)."""
    return get_driver().disable(callback_id)


def cancel(callback_id: str) -> None:
    """Cancel a callback for good (see ``Driver.cancel``)."""
    get_driver().cancel(callback_id)


def reference(callback_id: str) -> str:
    """Make a callback keep ``run()`` going (see ``Driver.reference``)."""
    return get_driver().reference(callback_id)


def unreference(callback_id: str) -> str:
    """Let ``run()`` return despite this callback (see ``Driver.unreference``)."""
    return get_driver().unreference(callback_id)


def run() -> None:
    """Run the current driver (see ``Driver.run``)."""
    get_driver().run()


def stop() -> None:
    """Stop the current driver after this tick (see ``Driver.stop``)."""
    get_driver().stop()


def is_running() -> bool:
    """Whether the current driver is running."""
    return get_driver().is_running()


def set_error_handler(handler: ErrorHandler | None) -> ErrorHandler | None:
    """Set the current driver's error handler; returns the previous one."""
    return get_driver().set_error_handler(handler)


def get_error_handler() -> ErrorHandler | None:
    """The current driver's error handler."""
    return get_driver().get_error_handler()


def get_identifiers() -> list[str]:
    """The ids of the current driver's callbacks."""
    return get_driver().get_identifiers()


def get_type(callback_id: str) -> CallbackType:
    """The type of a callback of the current driver."""
    return get_driver().get_type(callback_id)


def is_enabled(callback_id: str) -> bool:
    """Whether a callback of the current driver is enabled."""
    return get_driver().is_enabled(callback_id)


def is_referenced(callback_id: str) -> bool:
    """Whether a callback of the current driver is referenced."""
    return get_driver().is_referenced(callback_id)


def get_suspension() -> Suspension:
    """The current greenlet's suspension on the current driver."""
    return get_driver().get_suspension()
