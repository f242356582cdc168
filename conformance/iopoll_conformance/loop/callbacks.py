"""Callbacks the driver rules share: ones that discard, append or raise, and ``receive_once``."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from iopoll.loop import Driver

__all__ = ["appending", "nil", "raising", "receive_once"]


def nil(*results: object) -> None:
    """Discard what a lambda's calls return: callbacks must return None."""


def appending(items: list[Any], value: object) -> Callable[..., None]:
    """A callback, whatever its arguments, that appends ``value`` to ``items``."""
    return lambda *args: items.append(value)


def raising(error: Exception) -> Callable[..., None]:
    """A callback, whatever its arguments, that raises ``error``."""

    def fn(*args: object) -> None:
        raise error

    return fn


def receive_once(driver: Driver, reader: socket.socket) -> list[bytes]:
    """Watch ``reader`` with a callback that receives once, then cancels itself.

    Returns the list that callback appends what it received to.
    """
    got: list[bytes] = []

    def fn(callback_id: str, stream: Any) -> None:
        got.append(stream.recv(10))
        driver.cancel(callback_id)

    driver.on_readable(reader, fn)
    return got
