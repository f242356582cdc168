"""Event flags, error codes, and the table type backends use to decode OS readiness bits."""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Iterable

__all__ = [
    "ErrorCode",
    "Event",
    "DecodeTable",
    "coerce_events",
    "decode_bits",
    "decode_table",
    "flag_encoder",
]


class Event(enum.IntFlag):
    """What a watcher asks for and what ``wait()`` reports.

    ``READ``, ``WRITE`` and ``PRIORITY`` are readiness; ``ERROR`` and ``HANGUP`` are always
    reported; ``READ_HANGUP`` (peer shut down its writing side) only when asked for.
    ``ONESHOT`` and ``EDGE_TRIGGERED`` are registration modes, never reported.  ``TIMER``,
    ``NOTIFY``, ``SIGNAL`` and ``PROCESS`` are reserved for handle kinds this version lacks.
    """

    READ = 1 << 0
    WRITE = 1 << 1
    ERROR = 1 << 2
    HANGUP = 1 << 3
    READ_HANGUP = 1 << 4
    ONESHOT = 1 << 5
    EDGE_TRIGGERED = 1 << 6
    PRIORITY = 1 << 7
    TIMER = 1 << 8
    NOTIFY = 1 << 9
    SIGNAL = 1 << 10
    PROCESS = 1 << 11


class ErrorCode(enum.IntEnum):
    """Why a backend operation failed; the ``code`` of a ``FailedPollOperationError``."""

    NONE = 0
    SYSTEM = 1
    NOMEM = 2
    INVALID = 3
    EXISTS = 4
    NOTFOUND = 5
    TIMEOUT = 6
    INTERRUPTED = 7
    PERMISSION = 8
    TOOBIG = 9
    AGAIN = 10
    NOSUPPORT = 11


NON_STREAM_EVENTS = Event.TIMER | Event.NOTIFY | Event.SIGNAL | Event.PROCESS
MODES = Event.ONESHOT | Event.EDGE_TRIGGERED
NO_EVENTS = Event(0)


def flag_encoder(pairs: Iterable[tuple[Event, int]]) -> Callable[[int], int]:
    """The function from ``Event`` bits to one OS's registration flags, given as
    ``(event, flag)`` pairs; bits with no flag add nothing.  It caches every answer:
    IntFlag arithmetic costs microseconds, and re-arming a one-shot is hot."""
    table = tuple(pairs)

    @functools.cache
    def encode(events: int) -> int:
        mask = 0
        for event, flag in table:
            if events & event:
                mask |= flag
        return mask

    return encode


# Raw readiness bits of one backend -> ``Event``.
DecodeTable = dict[int, Event]


def decode_table(pairs: Iterable[tuple[int, Event]]) -> DecodeTable:
    """Map every combination of the raw bits in ``pairs`` to its ``Event``.

    Built once per backend: ``wait()`` decodes each report with one lookup in a plain dict
    (an ``Event`` built from an int costs about a microsecond).  A pattern holding any other
    bit (POLLNVAL, say) is missing on purpose, so that the hot path falls back to the
    general one, which treats such reports with care.
    """
    pairs = [(bit, event) for bit, event in pairs if bit]  # absent flags are 0
    bits = 0
    for bit, _ in pairs:
        bits |= bit
    table: DecodeTable = {}
    pattern = bits
    while True:  # every subset of ``bits``, down to 0
        value = Event(0)
        for bit, event in pairs:
            if pattern & bit:
                value |= event
        table[pattern] = value
        if not pattern:
            return table
        pattern = (pattern - 1) & bits


def decode_bits(table: DecodeTable, bits: int) -> Event:
    """``table[bits]``, leaving out bits the table does not name (another OS's extras)."""
    event = table.get(bits)
    if event is None:
        event = table[bits & max(table)]  # the largest pattern is every named bit
    return event


def coerce_events(events: object, argument: str = "events") -> Event:
    """Return ``events`` (an ``Event`` or an iterable of them) as one ``Event``.

    Raises ``TypeError`` for anything that is not an ``Event`` and ``ValueError`` for an
    empty set or events no stream handle can be watched for.
    """
    if isinstance(events, Event):
        value = events
    elif isinstance(events, (int, str, bytes)) or not isinstance(events, Iterable):
        raise TypeError(
            f"{argument} must be an Event or an iterable of Event values, "
            f"not {type(events).__name__}"
        )
    else:
        value = Event(0)
        for item in events:
            if not isinstance(item, Event):
                raise TypeError(
                    f"{argument} must contain only Event values, not {type(item).__name__}"
                )
            value |= item
    if not value:
        raise ValueError(f"{argument} must not be empty")
    if value & NON_STREAM_EVENTS:
        raise ValueError(
            f"{argument} must not contain Event.TIMER, Event.NOTIFY, Event.SIGNAL or "
            "Event.PROCESS for a stream handle"
        )
    return value
