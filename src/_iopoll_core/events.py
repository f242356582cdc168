"""Event flags, error codes, and the table type backends use to decode OS readiness bits."""

from __future__ import annotations

import enum
import functools
import operator
from collections.abc import Callable, Iterable
from typing import TypeVar

__all__ = [
    "ErrorCode",
    "Event",
    "DecodeTable",
    "NON_STREAM_EVENTS",
    "coerce_events",
    "os_events",
    "registers_oneshot",
    "needs_modes",
    "decode_bits",
    "decode_prefix",
    "decode_table",
    "flag_encoder",
]


class Event(enum.IntFlag):
    """What a watcher asks for and what ``wait()`` reports.

    ``READ``, ``WRITE`` and ``PRIORITY`` are readiness; ``ERROR`` and ``HANGUP`` are always
    reported; ``READ_HANGUP`` (peer shut down its writing side) only when asked for.
    ``ONESHOT`` and ``EDGE_TRIGGERED`` are registration modes, never reported.  ``TIMER``,
    ``NOTIFY``, ``SIGNAL`` and ``PROCESS`` each go with their own handle kind alone
    (``TimerHandle``, ``NotifyHandle``, ``SignalHandle``, ``ProcessHandle``).
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
# Every member's bit, as an int: an IntFlag keeps bits no member has (Event(1 << 28), or
# Event.READ | select.EPOLLET), and ~ on an Event inverts within the members only.
_MEMBER_BITS = functools.reduce(operator.or_, (member.value for member in Event), 0)


_Answer = TypeVar("_Answer")


class _Memo(dict[int, _Answer]):
    """Each answer of a function of ``Event`` bits, computed at its first lookup."""

    __slots__ = ("_compute",)

    def __init__(self, compute: Callable[[int], _Answer]) -> None:
        super().__init__()
        self._compute = compute

    def __missing__(self, events: int) -> _Answer:
        answer = self[events] = self._compute(events)
        return answer


def memo(compute: Callable[[int], _Answer]) -> Callable[[int], _Answer]:
    """``compute``, with every answer kept, for a function whose answer is the same for an
    ``Event`` and for the ``int`` of its bits (the two are one key).

    The lookup is a dict's C ``__getitem__``: a ``functools.cache`` call costs about 50 ns
    more for an ``Event``, for which, not being an exact ``int``, it builds a key tuple, and
    add(), modify() and remove() each ask one or two of these.
    """
    return _Memo(compute).__getitem__


def flag_encoder(pairs: Iterable[tuple[Event, int]]) -> Callable[[int], int]:
    """The function from ``Event`` bits to one OS's registration flags, given as
    ``(event, flag)`` pairs; bits with no flag add nothing.  It keeps every answer:
    IntFlag arithmetic costs microseconds, and re-arming a one-shot is hot."""
    table = tuple(pairs)

    def encode(events: int) -> int:
        mask = 0
        for event, flag in table:
            if events & event:
                mask |= flag
        return mask

    return memo(encode)


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
            # Inserted from the smallest pattern up: ints hash to themselves, so the common
            # reports (READ, WRITE, both) take their home slots, and the rare high bits
            # (epoll's EPOLLRDHUP is 0x2000) the collisions.  Largest first, a READ
            # lookup probed past EPOLLIN|EPOLLRDHUP's entry every time.
            return dict(sorted(table.items()))
        pattern = (pattern - 1) & bits


# The bit patterns, 0 up to this, that ``decode_prefix`` lays out by index: every readiness
# bit epoll and poll report (IN, PRI, OUT, ERR, HUP, NVAL) is below it; EPOLLRDHUP is not.
DECODE_PREFIX = 64


def decode_prefix(table: DecodeTable) -> tuple[Event | None, ...]:
    """``table[bits]`` for each ``bits`` below ``DECODE_PREFIX``, by index (None where the
    table has no entry, so that such a report takes the general path as it does in the dict).

    iopoll's C fast path decodes with it: an index instead of an int and a hash lookup per
    report.  Every other pattern it looks up in ``table`` itself.  Made once per table (a
    mechanism class's): every Context of that mechanism shares it.
    """
    known = _prefixes.get(id(table))
    if known is not None and known[0] is table:
        return known[1]
    prefix = tuple(table.get(bits) for bits in range(DECODE_PREFIX))
    _prefixes[id(table)] = (table, prefix)  # the table is kept: its id is never reused
    return prefix


_prefixes: dict[int, tuple[DecodeTable, tuple[Event | None, ...]]] = {}


def decode_bits(table: DecodeTable, bits: int) -> Event:
    """``table[bits]``, leaving out bits the table does not name (another OS's extras)."""
    event = table.get(bits)
    if event is None:
        event = table[bits & max(table)]  # the largest pattern is every named bit
    return event


def coerce_events(events: object, kind: Event = NO_EVENTS, handle_name: str = "") -> Event:
    """Return ``events`` (an ``Event`` or an iterable of them) as one ``Event``.

    ``kind`` is the one event a handle that is not a stream reports (``Event.TIMER`` for a
    ``TimerHandle``, named ``handle_name``), or ``Event(0)`` for a stream handle.  Raises
    ``TypeError`` for anything that is not an ``Event`` and ``ValueError`` for an empty set
    or for events the handle cannot be watched for (SPEC 10's event rules).
    """
    if isinstance(events, Event):
        return _checked_events(events, kind, handle_name)
    if isinstance(events, (int, str, bytes)) or not isinstance(events, Iterable):
        raise TypeError(
            "events must be an Event or an iterable of Event values, "
            f"not {type(events).__name__}"
        )
    value = Event(0)
    for item in events:
        if not isinstance(item, Event):
            raise TypeError(f"events must contain only Event values, not {type(item).__name__}")
        value |= item
    return _checked_events(value, kind, handle_name)


# The operators of an IntFlag are Python code (about 2 us each on CPython 3.11, against 50 ns
# for an int's), and add() and modify() ask the same few questions of a handful of values:
# the answers are cached, as flag_encoder's are.  The keys are always Event members, so an
# int that compares equal to one never shares its entry.


@functools.cache
def _checked_events(value: Event, kind: Event, handle_name: str) -> Event:
    """``coerce_events``'s rules for one ``Event`` (errors are raised, never cached)."""
    if not value:
        raise ValueError("events must not be empty")
    unknown = value.value & ~_MEMBER_BITS
    if unknown:
        # Refused rather than ignored: Event.READ | select.EPOLLET would otherwise watch
        # level-triggered without a word.
        raise ValueError(
            f"events must be made of Event flags only, not {value.value:#x} "
            + (f"(the bits {unknown:#x} are no Event's)" if unknown > 0 else "(negative)")
        )
    if kind:
        # Its own event, and ONESHOT if asked; never EDGE_TRIGGERED or a stream's events.
        if value & ~Event.ONESHOT != kind:
            raise ValueError(
                f"events must be Event.{kind.name} for a {handle_name} "
                "(Event.ONESHOT may be added to it, nothing else)"
            )
    elif value & NON_STREAM_EVENTS:
        raise ValueError(
            "events must not contain Event.TIMER, Event.NOTIFY, Event.SIGNAL or "
            "Event.PROCESS for a stream handle"
        )
    return value


@functools.cache
def os_events(events: Event) -> Event:
    """What the OS is asked to watch a handle's fd for, given what its watcher asks.

    A notify, signal or process handle is an fd that becomes readable when it has something
    to say: it is watched for ``READ``.  A process exits once, so its fd is always watched
    one-shot: it is reported once per context (SPEC 10).
    """
    if not events & NON_STREAM_EVENTS:
        return events
    if events & Event.PROCESS:
        return Event.READ | Event.ONESHOT
    return Event.READ | (events & Event.ONESHOT)


@memo
def registers_oneshot(events: int) -> bool:
    """Whether a watcher of ``events`` is registered one-shot with the OS."""
    return bool(os_events(Event(events)) & Event.ONESHOT)


@functools.cache
def needs_modes(events: Event) -> Event:
    """The bits of ``events`` only some backends take: ``EDGE_TRIGGERED``, ``PRIORITY``."""
    return events & (Event.EDGE_TRIGGERED | Event.PRIORITY)
