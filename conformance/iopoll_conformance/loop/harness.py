"""``DriverHarness``: what every driver rule group stands on.

``make()`` (which a subclass defines), ``leaks``, the ``loop`` fixture, and the helpers the
tests share: ``pair()``, ``registrations()``, ``watchdog()``, ``writable_once()`` and
``assert_writable_runs_once()``.  Each rule group (``LivenessRules``, ``TimerRules``, ...)
subclasses it, so that its tests can use them; ``DriverConformance`` documents them.
"""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from iopoll.loop import Driver

__all__ = ["DriverHarness", "Registrar"]

Registrar = Callable[[Driver, Callable[..., None]], str]


def _pair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    return a, b


class DriverHarness:
    """``make()``, ``leaks``, the ``loop`` fixture and the shared helpers.

    ``DriverConformance`` documents them: subclass it, not this class.
    """

    leaks = True

    def make(self) -> Driver:
        """A new driver to test (a subclass must define it)."""
        raise NotImplementedError(f"{type(self).__name__} must define make() -> Driver")

    @pytest.fixture
    def loop(self) -> Iterator[Driver]:
        """A driver from ``make()``, cleaned up after the test."""
        driver = self.make()
        self._sockets: list[socket.socket] = []
        yield driver
        for sock in self._sockets:
            sock.close()
        for callback_id in driver.get_identifiers():
            driver.cancel(callback_id)  # restores signal handlers
        close = getattr(driver, "close", None)
        if close is not None:
            close()

    @staticmethod
    def watchdog(loop: Driver, seconds: float) -> list[str]:
        """An unreferenced delay of ``seconds``: it runs only if something keeps ``run()``
        going that should not, and then cancels every callback and stops the loop, so that
        the test fails instead of hanging.  Returns the list it appends its id to."""
        fired: list[str] = []

        def bark(cid: str) -> None:
            fired.append(cid)
            for callback_id in loop.get_identifiers():
                loop.cancel(callback_id)
            loop.stop()

        loop.unreference(loop.delay(seconds, bark))
        return fired

    def pair(self) -> tuple[socket.socket, socket.socket]:
        """A non-blocking socketpair, closed after the test."""
        a, b = _pair()
        self._sockets += [a, b]
        return a, b

    def registrations(self, loop: Driver) -> dict[str, Registrar]:
        """One registration per callback type (Revolt's provideRegistrationArgs)."""
        reader, writer = self.pair()
        return {
            "defer": lambda d, fn: d.defer(fn),
            "delay": lambda d, fn: d.delay(0.005, fn),
            "repeat": lambda d, fn: d.repeat(0.005, fn),
            "writable": lambda d, fn: d.on_writable(writer, fn),
            "readable": lambda d, fn: d.on_readable(reader, fn),
            "signal": lambda d, fn: d.on_signal(signal.SIGUSR1, fn),
        }

    @staticmethod
    def writable_once(loop: Driver, writer: socket.socket, got: list[str]) -> str:
        """Watch ``writer`` with a callback that appends its id to ``got``, then cancels."""

        def fn(cid: str, stream: Any) -> None:
            got.append(cid)
            loop.cancel(cid)

        return loop.on_writable(writer, fn)

    def assert_writable_runs_once(self, loop: Driver, writer: socket.socket) -> None:
        """Run ``loop`` with ``writable_once()`` on ``writer``: its callback must run once."""
        got: list[str] = []
        self.writable_once(loop, writer, got)
        loop.run()
        assert len(got) == 1
