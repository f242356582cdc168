"""``TracingDriver``: a decorator that records where each callback was made and cancelled."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from types import FrameType
from typing import Any

from ._callbacks import CallbackType, check_callback
from ._errors import TRACED, InvalidCallbackError
from ._interface import Driver, ErrorHandler
from ._suspension import Suspension

__all__ = ["TracingDriver"]

_PACKAGE = __name__.rpartition(".")[0]  # iopoll.loop


def _inside_package(frame: FrameType) -> bool:
    name: str = frame.f_globals.get("__name__", "")
    return name == _PACKAGE or name.startswith(_PACKAGE + ".")


def _trace() -> str:
    """The stack from the innermost frame outside ``iopoll.loop`` out: where the user called
    a driver method (directly or through the module functions), however deep inside we are."""
    frame = sys._getframe(1)
    while frame.f_back is not None and _inside_package(frame):
        frame = frame.f_back
    return "".join(traceback.format_stack(frame))


class TracingDriver(Driver):
    """Wraps a driver; ``dump()`` lists the callbacks keeping the loop alive and their origin.

    It keeps a creation trace for every callback and a cancellation trace for every id it
    saw cancelled (so it grows with use: a debugging tool).  ``InvalidCallbackError`` from
    ``enable`` or ``reference`` gets both traces as notes.
    """

    def __init__(self, driver: Driver) -> None:
        if not isinstance(driver, Driver):
            raise TypeError(f"driver must be a Driver, not {type(driver).__name__}")
        self._driver = driver
        self._created: dict[str, str] = {}
        self._cancelled: dict[str, str] = {}
        self._enabled: set[str] = set()
        self._unreferenced: set[str] = set()

    @property
    def driver(self) -> Driver:
        """The wrapped driver."""
        return self._driver

    def _record(self, callback_id: str) -> str:
        self._created[callback_id] = _trace()
        self._enabled.add(callback_id)
        return callback_id

    def _forget(self, callback_id: str) -> None:
        # Defer and delay callbacks are cancelled by the driver before they run.
        self._cancelled.setdefault(callback_id, "cancelled by the loop before it ran the callback")
        self._enabled.discard(callback_id)
        self._unreferenced.discard(callback_id)

    def _once(self, fn: Callable[[str], None]) -> Callable[[str], None]:
        def once(callback_id: str) -> None:
            self._forget(callback_id)
            return fn(callback_id)

        once.__qualname__ = getattr(fn, "__qualname__", once.__qualname__)
        once.__module__ = getattr(fn, "__module__", once.__module__)
        setattr(once, TRACED, fn)  # errors name fn, its file and line (describe())
        return once

    def queue(self, fn: Callable[..., None], /, *args: Any) -> None:
        self._driver.queue(fn, *args)

    def defer(self, fn: Callable[[str], None]) -> str:
        check_callback(fn)
        return self._record(self._driver.defer(self._once(fn)))

    def delay(self, seconds: float, fn: Callable[[str], None]) -> str:
        check_callback(fn)
        return self._record(self._driver.delay(seconds, self._once(fn)))

    def repeat(self, interval: float, fn: Callable[[str], None]) -> str:
        return self._record(self._driver.repeat(interval, fn))

    def on_readable(self, stream: Any, fn: Callable[[str, Any], None]) -> str:
        return self._record(self._driver.on_readable(stream, fn))

    def on_writable(self, stream: Any, fn: Callable[[str, Any], None]) -> str:
        return self._record(self._driver.on_writable(stream, fn))

    def on_signal(self, signum: int, fn: Callable[[str, int], None]) -> str:
        return self._record(self._driver.on_signal(signum, fn))

    def _annotate(self, error: InvalidCallbackError, callback_id: str) -> InvalidCallbackError:
        created = self._created.get(callback_id, "(no such callback was created)")
        notes = [f"Creation trace:\n{created}"]
        if callback_id in self._cancelled:
            notes.append(f"Cancellation trace:\n{self._cancelled[callback_id]}")
        for note in notes:
            if hasattr(error, "add_note"):
                error.add_note(note)
            else:  # Python 3.10
                error.__notes__ = [*getattr(error, "__notes__", []), note]  # type: ignore[attr-defined]
        return error

    def _checked(self, method: Callable[[str], str], callback_id: str) -> str:
        """``method(callback_id)``, its ``InvalidCallbackError`` annotated with the traces."""
        try:
            return method(callback_id)
        except InvalidCallbackError as error:
            raise self._annotate(error, callback_id) from None

    def enable(self, callback_id: str) -> str:
        self._checked(self._driver.enable, callback_id)
        self._enabled.add(callback_id)
        return callback_id

    def disable(self, callback_id: str) -> str:
        self._driver.disable(callback_id)  # first: it refuses an id that cannot be one
        self._enabled.discard(callback_id)
        return callback_id

    def cancel(self, callback_id: str) -> None:
        self._driver.cancel(callback_id)
        if callback_id in self._created and callback_id not in self._cancelled:
            self._cancelled[callback_id] = _trace()
        self._enabled.discard(callback_id)
        self._unreferenced.discard(callback_id)

    def reference(self, callback_id: str) -> str:
        self._checked(self._driver.reference, callback_id)
        self._unreferenced.discard(callback_id)
        return callback_id

    def unreference(self, callback_id: str) -> str:
        self._driver.unreference(callback_id)  # first: it refuses an id that cannot be one
        if callback_id in self._created and callback_id not in self._cancelled:
            self._unreferenced.add(callback_id)
        return callback_id

    def run(self) -> None:
        self._driver.run()

    def stop(self) -> None:
        self._driver.stop()

    def is_running(self) -> bool:
        return self._driver.is_running()

    def set_error_handler(self, handler: ErrorHandler | None) -> ErrorHandler | None:
        return self._driver.set_error_handler(handler)

    def get_error_handler(self) -> ErrorHandler | None:
        return self._driver.get_error_handler()

    def get_identifiers(self) -> list[str]:
        return self._driver.get_identifiers()

    def get_type(self, callback_id: str) -> CallbackType:
        return self._driver.get_type(callback_id)

    def is_enabled(self, callback_id: str) -> bool:
        return self._driver.is_enabled(callback_id)

    def is_referenced(self, callback_id: str) -> bool:
        return self._driver.is_referenced(callback_id)

    def get_handle(self) -> Any:
        return self._driver.get_handle()

    def get_suspension(self) -> Suspension:
        return self._driver.get_suspension()

    def creation_trace(self, callback_id: str) -> str | None:
        """Where ``callback_id`` was created, or ``None`` if this driver never made it."""
        return self._created.get(callback_id)

    def cancellation_trace(self, callback_id: str) -> str | None:
        """Where ``callback_id`` was first cancelled, or ``None``."""
        return self._cancelled.get(callback_id)

    def dump(self) -> str:
        """The enabled, referenced callbacks (what keeps ``run()`` going), with creation traces."""
        lines = []
        for callback_id in self._driver.get_identifiers():
            if callback_id not in self._enabled or callback_id in self._unreferenced:
                continue
            kind = self._driver.get_type(callback_id).name
            lines.append(f"Enabled, referenced callback {callback_id!r} ({kind}) created at:")
            lines.append(self._created.get(callback_id, "(unknown)\n"))
        if not lines:
            return "No enabled, referenced callbacks keep the loop alive.\n"
        return "\n".join(lines)

    def close(self) -> None:
        """Close the wrapped driver."""
        close = getattr(self._driver, "close", None)
        if close is not None:
            close()

    def __repr__(self) -> str:
        return f"<TracingDriver of {self._driver!r}>"


# The methods that only forward to the wrapped driver (and record) do what the contract
# says: they carry the contract's docstrings rather than a second copy of them.
for _name, _method in list(vars(TracingDriver).items()):
    if callable(_method) and not _name.startswith("_") and not _method.__doc__:
        _method.__doc__ = getattr(Driver, _name).__doc__
del _name, _method
