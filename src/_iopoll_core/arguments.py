"""Validation of ``wait()`` arguments, shared by every implementation."""

from __future__ import annotations

import math
import sys
from datetime import timedelta

__all__ = ["MAX_EVENTS_LIMIT", "check_max_events", "timeout_seconds"]

MAX_EVENTS_LIMIT = 2**31 - 1
FOREVER = -1.0


def _type_name(value: object) -> str:
    return type(value).__name__


def check_microseconds(microseconds: object) -> int:
    """Return ``microseconds`` if it is an int in 0..999999; raise otherwise."""
    if type(microseconds) is not int:
        raise TypeError(f"microseconds must be an int, not {_type_name(microseconds)}")
    if not 0 <= microseconds <= 999_999:
        raise ValueError(f"microseconds must be between 0 and 999999, not {microseconds}")
    return microseconds


def timeout_seconds(timeout: object, microseconds: object = 0) -> float:
    """Seconds to wait for ``timeout`` plus ``microseconds``; ``FOREVER`` (-1.0) for no limit.

    ``timeout`` is ``None``, an ``int`` or ``float`` number of seconds (``math.inf`` means
    ``None``), or a ``datetime.timedelta``.
    """
    extra = check_microseconds(microseconds)
    if timeout is None:
        if extra:
            raise ValueError("microseconds must be 0 when timeout is None")
        return FOREVER
    if isinstance(timeout, bool):
        raise TypeError(
            "timeout must be None, a number of seconds or a datetime.timedelta, not bool"
        )
    if isinstance(timeout, int):
        if timeout < 0:
            raise ValueError(f"timeout must not be negative, not {timeout}")
        try:
            seconds = float(timeout)
        except OverflowError:  # longer than a float can say: the longest one can
            seconds = sys.float_info.max
    elif isinstance(timeout, float):
        if math.isnan(timeout):
            raise ValueError("timeout must be a number of seconds, not NaN")
        if timeout < 0:
            raise ValueError(f"timeout must not be negative, not {timeout}")
        seconds = timeout
    elif isinstance(timeout, timedelta):
        seconds = timeout.total_seconds()
        if seconds < 0:
            raise ValueError(f"timeout must not be negative, not {timeout!r}")
    else:
        raise TypeError(
            "timeout must be None, a number of seconds or a datetime.timedelta, "
            f"not {_type_name(timeout)}"
        )
    if math.isinf(seconds):
        return FOREVER
    return seconds + extra / 1_000_000


def check_max_events(max_events: object) -> int:
    """Return ``max_events`` as a limit (``MAX_EVENTS_LIMIT`` for ``None``); raise if invalid."""
    if max_events is None:
        return MAX_EVENTS_LIMIT
    if type(max_events) is not int:
        raise TypeError(f"max_events must be None or an int, not {_type_name(max_events)}")
    if not 1 <= max_events <= MAX_EVENTS_LIMIT:
        raise ValueError(
            f"max_events must be between 1 and {MAX_EVENTS_LIMIT}, not {max_events}"
        )
    return max_events
