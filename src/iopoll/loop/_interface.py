"""``Driver``: the interface every event-loop driver implements (Revolt's ``Driver``).

Only the contract: abstract methods, each with the rule it must keep (SPEC 9.1).  The shared
implementation is ``AbstractDriver`` (``_abstract_driver.py``).
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

from ._callbacks import CallbackType
from ._suspension import Suspension

__all__ = ["Driver", "ErrorHandler"]

ErrorHandler = Callable[[Exception], None]


class Driver(abc.ABC):
    """An event loop: callbacks identified by string ids, run one tick at a time.

    Callbacks are called ``fn(id)`` (defer, delay, repeat), ``fn(id, stream)`` (readable,
    writable) or ``fn(id, signum)`` (signal) and must return ``None``.
    """

    @abc.abstractmethod
    def queue(self, fn: Callable[..., None], /, *args: Any) -> None:
        """Run ``fn(*args)`` as a microtask: after the current callback, before the next."""

    @abc.abstractmethod
    def defer(self, fn: Callable[[str], None]) -> str:
        """Run ``fn(id)`` in the next tick, before its other callbacks; return the id."""

    @abc.abstractmethod
    def delay(self, seconds: float, fn: Callable[[str], None]) -> str:
        """Run ``fn(id)`` once, ``seconds`` from now (``math.inf``: never); return the id."""

    @abc.abstractmethod
    def repeat(self, interval: float, fn: Callable[[str], None]) -> str:
        """Run ``fn(id)`` every ``interval`` seconds, at most once a tick; return the id."""

    @abc.abstractmethod
    def on_readable(self, stream: Any, fn: Callable[[str, Any], None]) -> str:
        """Run ``fn(id, stream)`` whenever ``stream`` is readable (or closed); return the id."""

    @abc.abstractmethod
    def on_writable(self, stream: Any, fn: Callable[[str, Any], None]) -> str:
        """Run ``fn(id, stream)`` whenever ``stream`` is writable (or closed); return the id."""

    @abc.abstractmethod
    def on_signal(self, signum: int, fn: Callable[[str, int], None]) -> str:
        """Run ``fn(id, signum)`` when the process receives ``signum`` (main thread only)."""

    @abc.abstractmethod
    def enable(self, callback_id: str) -> str:
        """Enable a callback from the next tick on (a timer re-arms from now)."""

    @abc.abstractmethod
    def disable(self, callback_id: str) -> str:
        """Disable a callback at once; unknown ids are ignored.  Returns the id."""

    @abc.abstractmethod
    def cancel(self, callback_id: str) -> None:
        """Disable and forget a callback for good; unknown ids are ignored."""

    @abc.abstractmethod
    def reference(self, callback_id: str) -> str:
        """Make an enabled callback keep ``run()`` going (the default)."""

    @abc.abstractmethod
    def unreference(self, callback_id: str) -> str:
        """Let ``run()`` return even though this callback is enabled; unknown ids are ignored."""

    @abc.abstractmethod
    def run(self) -> None:
        """Run ticks until ``stop()``, or until no enabled, referenced callback is left."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Make ``run()`` return once the current tick is finished."""

    @abc.abstractmethod
    def is_running(self) -> bool:
        """Whether ``run()`` (or a suspension of the main greenlet) is running the loop."""

    @abc.abstractmethod
    def set_error_handler(self, handler: ErrorHandler | None) -> ErrorHandler | None:
        """Send callbacks' exceptions to ``handler`` (``None``: end ``run()``); return the old."""

    @abc.abstractmethod
    def get_error_handler(self) -> ErrorHandler | None:
        """The current error handler, or ``None``."""

    @abc.abstractmethod
    def get_identifiers(self) -> list[str]:
        """Every id not yet cancelled, disabled ones included."""

    @abc.abstractmethod
    def get_type(self, callback_id: str) -> CallbackType:
        """The type of a callback; ``InvalidCallbackError`` for an unknown id."""

    @abc.abstractmethod
    def is_enabled(self, callback_id: str) -> bool:
        """Whether a callback is enabled; ``InvalidCallbackError`` for an unknown id."""

    @abc.abstractmethod
    def is_referenced(self, callback_id: str) -> bool:
        """Whether a callback is referenced; ``InvalidCallbackError`` for an unknown id."""

    @abc.abstractmethod
    def get_handle(self) -> Any:
        """The backend object (an ``iopoll.Context`` for ``IoPollDriver``), or ``None``."""

    @abc.abstractmethod
    def get_suspension(self) -> Suspension:
        """The suspension of the current greenlet (needs the ``greenlet`` package)."""

    def debug_info(self) -> dict[str, dict[str, object]]:
        """``{id: {"type", "enabled", "referenced"}}`` for every callback."""
        return {
            cid: {
                "type": self.get_type(cid),
                "enabled": self.is_enabled(cid),
                "referenced": self.is_referenced(cid),
            }
            for cid in self.get_identifiers()
        }

    def __repr__(self) -> str:
        return f"<{type(self).__name__} callbacks={len(self.get_identifiers())}>"
