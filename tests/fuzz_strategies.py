"""Shared Hypothesis strategies, value factories and SPEC classifiers for ``tests/test_fuzz_*.py``.

Each fuzz test throws arguments of every kind at one public surface (the Context API, the
polyfill, ``iopoll.loop``, ``iopoll.aio.IoPollSelector``) and holds what comes out to
docs/SPEC.md: only the exceptions SPEC names for the case, never ``SystemError`` or any other
type, and no registration left half-made.  This module holds what those tests share:

* the ``settings`` profiles (``FUZZ``): modest example counts by default, more with
  ``HYPOTHESIS_PROFILE=ci``; ``deadline=None`` everywhere (the machine is shared);
* ``KNOWN_BUGS``: the library bugs the fuzzers found and that are not fixed yet.  The general
  strategies leave those values out, and each has a dedicated test marked
  ``xfail(strict=True)`` (``xfail_bug``).  Once a bug is fixed, delete its entry: the values
  come back into the general strategies and the dedicated test must pass;
* ``Arg``: a generated argument that knows what SPEC lets it raise (``faults``), made fresh for
  every use (generators, one-shot iterators);
* classifiers that say, from SPEC alone, what a call may raise (``wait_faults`` ...);
* objects that misbehave: ``Scripted`` (any object with a scripted ``fileno()``) and
  ``ScriptedHandle`` (the same as a ``Handle`` subclass), ``Bogus`` callables.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import math
import os
import signal
import socket
import sys
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from _iopoll_core.errors import (
    FailedHandleAddError,
    InvalidHandleError,
)
from _iopoll_core.events import Event
from _iopoll_core.handles import Handle
from iopoll_conformance.process import alarm

__all__ = [
    "FUZZ",
    "KNOWN_BUGS",
    "Arg",
    "Bogus",
    "Scripted",
    "ScriptedHandle",
    "closed_fd_numbers",
    "xfail_bug",
]

# -- settings -------------------------------------------------------------------------------

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.filter_too_much]
settings.register_profile(
    "iopoll-fuzz",
    max_examples=25,
    stateful_step_count=100,
    deadline=None,
    suppress_health_check=_SLOW_OK,
    print_blob=True,
)
settings.register_profile(
    "iopoll-fuzz-ci",
    max_examples=300,
    stateful_step_count=200,
    deadline=None,
    suppress_health_check=_SLOW_OK,
    print_blob=True,
)
# A bug hunt by hand, ten times CI's run unless IOPOLL_FUZZ_EXAMPLES says how many (with
# PYTHONMALLOC=debug, 3,000 take about 35 minutes for the fuzz files on the C paths).
settings.register_profile(
    "iopoll-fuzz-hunt",
    max_examples=int(os.environ.get("IOPOLL_FUZZ_EXAMPLES", "3000")),
    stateful_step_count=300,
    deadline=None,
    suppress_health_check=_SLOW_OK,
    print_blob=True,
)
# HYPOTHESIS_PROFILE=ci (or the profile's own name) picks the long run, =hunt the hunt;
# anything else, or nothing, the default one.  Applied per test, so other tests' settings
# are left alone.
_PROFILE = {
    "ci": "iopoll-fuzz-ci",
    "iopoll-fuzz-ci": "iopoll-fuzz-ci",
    "hunt": "iopoll-fuzz-hunt",
    "iopoll-fuzz-hunt": "iopoll-fuzz-hunt",
}.get(os.environ.get("HYPOTHESIS_PROFILE", ""), "iopoll-fuzz")
FUZZ = settings(settings.get_profile(_PROFILE))


def scaled(fraction: float) -> settings:
    """``FUZZ`` with ``max_examples`` scaled by ``fraction`` (at least 5), for costly tests."""
    return settings(FUZZ, max_examples=max(5, int(FUZZ.max_examples * fraction)))


# -- known bugs -------------------------------------------------------------------------------

KNOWN_BUGS: dict[str, str] = {}


def bug_marks(key: str) -> tuple[pytest.MarkDecorator, ...]:
    """``(xfail(strict=True),)`` naming bug ``key`` while it is in ``KNOWN_BUGS``, else ``()``:
    the ``marks`` of a ``pytest.param``."""
    if key in KNOWN_BUGS:
        return (pytest.mark.xfail(strict=True, reason=f"bug {key}: {KNOWN_BUGS[key]}"),)
    return ()


def xfail_bug(key: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator: ``xfail(strict=True)`` naming bug ``key`` while it is in ``KNOWN_BUGS``;
    once the entry is deleted (the bug fixed), the test runs as a plain one."""

    def mark(test: Callable[..., Any]) -> Callable[..., Any]:
        for marker in bug_marks(key):
            test = marker(test)
        return test

    return mark


def open_bug(key: str | None) -> bool:
    """Whether a value tagged with ``key`` must stay out of the general strategies."""
    return key is not None and key in KNOWN_BUGS


# -- arguments that know their faults -------------------------------------------------------

Faults = frozenset[type[BaseException]]
NONE: Faults = frozenset()


@dataclass(frozen=True)
class Arg:
    """One generated argument: ``make()`` builds it afresh (iterators are used up).

    ``faults`` is what SPEC lets a call raise because of this argument (empty: valid);
    ``names`` what its message may name; ``bits`` the ``Event`` a valid events argument
    stands for; ``bug`` a ``KNOWN_BUGS`` key the value runs into.
    """

    label: str
    make: Callable[[], Any]
    faults: Faults = NONE
    names: tuple[str, ...] = ()
    bits: int = 0
    bug: str | None = None

    def __repr__(self) -> str:
        return self.label


def const(label: str, value: object, faults: Faults = NONE, **extra: Any) -> Arg:
    """An ``Arg`` for an immutable (or freely shared) value."""
    return Arg(label, lambda: value, faults, **extra)


# -- misbehaving objects ----------------------------------------------------------------------

# What a scripted fileno() does on one call: return a value, or raise an exception class.
Answer = Any


class _FilenoScript:
    """The answers of a scripted ``fileno()``: one per call, the last one repeated."""

    def __init__(self, answers: Sequence[Answer]) -> None:
        self.answers = list(answers)
        self.calls = 0

    def next(self) -> Any:
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        if isinstance(answer, type) and issubclass(answer, BaseException):
            if issubclass(answer, OSError):
                raise answer(errno.EBADF, "scripted fileno() failure")
            raise answer("scripted fileno() failure")
        return answer


class _ScriptedFileno:
    """The ``fileno()`` of ``Scripted`` and ``ScriptedHandle``: it answers from the
    ``_FilenoScript`` each of them keeps in ``_script``."""

    __slots__ = ()
    _script: _FilenoScript

    def fileno(self) -> Any:
        """The next scripted answer (an exception class is raised)."""
        return self._script.next()


class Scripted(_ScriptedFileno):
    """Any object with a ``fileno()`` that answers from a script (it may lie between calls).

    ``closed`` is the attribute ``StreamPollHandle.is_valid()`` also reads.
    """

    def __init__(self, answers: Sequence[Answer], closed: bool = False) -> None:
        self._script = _FilenoScript(answers)
        self.closed = closed

    def __repr__(self) -> str:
        return f"Scripted({self._script.answers!r}, closed={self.closed})"


class ScriptedHandle(_ScriptedFileno, Handle):
    """A third-party ``Handle`` subclass whose ``fileno()`` answers from a script."""

    __slots__ = ("_script",)

    def __init__(self, answers: Sequence[Answer]) -> None:
        self._script = _FilenoScript(answers)

    def __repr__(self) -> str:
        return f"ScriptedHandle({self._script.answers!r})"


class SocketHandle(Handle):
    """An honest third-party ``Handle``: the fd of a socket (-1 once it is closed)."""

    __slots__ = ("sock",)

    def __init__(self, sock: Any) -> None:
        self.sock = sock

    def fileno(self) -> int:
        return int(self.sock.fileno())


class Bogus:
    """Not callable, yet it has a ``__code__`` attribute that is no code object."""

    __code__ = 5

    def __repr__(self) -> str:
        return "Bogus()"


class BogusCallable(Bogus):
    """Callable, with a ``__code__`` attribute that is no code object (a proxy, say)."""

    def __call__(self, *args: object) -> None:
        return None

    def __repr__(self) -> str:
        return "BogusCallable()"


class IntSub(int):
    """An ``int`` subclass: an ``int`` for every isinstance check."""


class FloatSub(float):
    """A ``float`` subclass."""


class Junk:
    """An object of no type anyone accepts."""

    def __repr__(self) -> str:
        return "Junk()"


def closed_fd_numbers(count: int) -> list[int]:
    """``count`` fd numbers below ``FD_SETSIZE`` that are not open, and that the kernel will
    not hand out while fewer than ~1000 fds are open (it allocates the lowest free number).

    Each is opened (``dup2``) and closed once first, so that the process's fd table covers it:
    Linux ``select()`` ignores, and leaves set, numbers beyond the table (bug
    ``select-unopened-fd``), where a number inside it is ``EBADF`` as SPEC 6.9 expects.
    """
    numbers = []
    for fd in range(1000, 1024):
        try:
            os.fstat(fd)
        except OSError:
            numbers.append(fd)
            if len(numbers) == count:
                break
    if len(numbers) < count:
        raise RuntimeError("no closed fd numbers left in 1000..1023")
    with socket.socket() as sock:
        for fd in numbers:
            os.dup2(sock.fileno(), fd)
            os.close(fd)
    return numbers


# Symbolic fd answers, resolved by the test that owns the fds (see ``resolve``).
CLOSED = "<closed fd>"  # a fd number nothing has open
SPARE = "<spare fd>"  # an open fd that nothing watches
WATCHED = "<watched fd>"  # the fd of a watched stream (SPARE when none is)


def resolve(answers: Sequence[Answer], fds: dict[str, int]) -> list[Answer]:
    """``answers`` with the symbolic fds replaced by the numbers in ``fds``."""
    return [fds.get(a, a) if isinstance(a, str) else a for a in answers]


# -- wait() arguments ---------------------------------------------------------------------------

MAX_EVENTS_LIMIT = 2**31 - 1

_INT_EDGES = [0, 1, -1, 2, 999_999, 1_000_000, 2**31 - 1, 2**31, -(2**31), 2**63, 10**400]
_FLOAT_EDGES = [
    0.0,
    -0.0,
    0.5,
    1e-9,
    -1e-9,
    1.0,
    -1.0,
    1e300,
    -1e300,
    math.inf,
    -math.inf,
    math.nan,
    sys.float_info.max,
    5e-324,
    -5e-324,
    2.0**31,
    2.0**63,
]
_TIMEDELTA_EDGES = [
    timedelta(0),
    timedelta.max,
    timedelta.min,
    timedelta(microseconds=1),
    timedelta(microseconds=-1),
    timedelta(days=-1, seconds=86399),
    timedelta(seconds=1),
]
_WRONG_TYPES: list[object] = [
    "1",
    "",
    b"0",
    [],
    (),
    {},
    {0},
    1j,
    0j,
    Decimal("0"),
    Decimal("NaN"),
    Fraction(1, 2),
    Junk(),
    object,
    Event.READ,
    io.BytesIO(),
]

ints = st.one_of(st.sampled_from(_INT_EDGES), st.integers(-(2**70), 2**70), st.integers(-3, 3))
floats = st.one_of(st.sampled_from(_FLOAT_EDGES), st.floats(allow_nan=True, allow_infinity=True))
timedeltas = st.one_of(st.sampled_from(_TIMEDELTA_EDGES), st.timedeltas())
bools = st.booleans()
wrong_types = st.sampled_from(_WRONG_TYPES)

timeout_values = st.one_of(
    st.none(),
    ints,
    floats,
    timedeltas,
    bools,
    wrong_types,
    st.builds(IntSub, st.integers(-5, 5)),
    st.builds(FloatSub, st.sampled_from([0.0, 0.25, -1.0, math.nan, math.inf])),
)
microseconds_values = st.one_of(
    st.just(0), st.integers(0, 999_999), ints, floats, bools, st.none(), wrong_types
)
max_events_values = st.one_of(
    st.none(),
    st.integers(1, 8),
    st.sampled_from([MAX_EVENTS_LIMIT, MAX_EVENTS_LIMIT + 1, 0, -1, 2**70]),
    ints,
    floats,
    bools,
    wrong_types,
)

# Valid arguments only (SPEC 4), for the waits that must succeed.
valid_timeouts = st.one_of(
    st.none(),
    st.sampled_from([0, 0.0, timedelta(0), 1, 0.25, 10**400, math.inf, 1e300, 5e-324]),
    st.integers(0, 2**70),
    st.floats(min_value=0.0, allow_infinity=True),
    st.sampled_from([timedelta.max, timedelta(microseconds=1), sys.float_info.max]),
    st.timedeltas(min_value=timedelta(0)),
    st.builds(IntSub, st.integers(0, 3)),
    st.builds(FloatSub, st.sampled_from([0.0, 0.5, math.inf])),
)
# The polyfill's: whole seconds (SPEC 7).
valid_int_timeouts = st.one_of(
    st.none(),
    st.sampled_from([0, 1, 2**31, 10**400]),
    st.integers(0, 2**70),
    st.builds(IntSub, st.integers(0, 3)),
)
valid_microseconds = st.one_of(st.just(0), st.integers(0, 999_999))
valid_max_events = st.one_of(st.none(), st.integers(1, 4), st.just(MAX_EVENTS_LIMIT))


def wait_faults(
    timeout: object, microseconds: object, max_events: object, *, whole_seconds: bool = False
) -> dict[str, type[BaseException]]:
    """What SPEC 4 (and 7, ``whole_seconds``: the polyfill) says ``wait()`` raises for these
    arguments: ``{argument name: exception class}`` for each bad one; empty when valid."""
    faults: dict[str, type[BaseException]] = {}
    microseconds_ok = False
    if type(microseconds) is not int:
        faults["microseconds"] = TypeError
    elif not 0 <= microseconds <= 999_999:
        faults["microseconds"] = ValueError
    else:
        microseconds_ok = True
    if timeout is None:
        if microseconds_ok and microseconds:
            faults["microseconds"] = ValueError
    elif isinstance(timeout, bool) or (whole_seconds and not isinstance(timeout, int)):
        faults["timeout"] = TypeError
    elif isinstance(timeout, int):
        if timeout < 0:
            faults["timeout"] = ValueError
    elif isinstance(timeout, float):
        if math.isnan(timeout) or timeout < 0:
            faults["timeout"] = ValueError
    elif isinstance(timeout, timedelta):
        if timeout < timedelta(0):
            faults["timeout"] = ValueError
    else:
        faults["timeout"] = TypeError
    if max_events is not None:
        if type(max_events) is not int:
            faults["max_events"] = TypeError
        elif not 1 <= max_events <= MAX_EVENTS_LIMIT:
            faults["max_events"] = ValueError
    return faults


def is_zero_wait(timeout: object) -> bool:
    """Whether a valid ``timeout`` waits no time at all."""
    if isinstance(timeout, timedelta):
        return timeout == timedelta(0)
    return timeout == 0


# -- events arguments -------------------------------------------------------------------------

STREAM_FLAGS = [
    Event.READ,
    Event.WRITE,
    Event.ERROR,
    Event.HANGUP,
    Event.READ_HANGUP,
    Event.ONESHOT,
    Event.EDGE_TRIGGERED,
    Event.PRIORITY,
]
NON_STREAM = [Event.TIMER, Event.NOTIFY, Event.SIGNAL, Event.PROCESS]
NON_STREAM_BITS = Event.TIMER | Event.NOTIFY | Event.SIGNAL | Event.PROCESS
MEMBER_BITS = sum(member.value for member in Event)
# Items no events iterable may hold.
_JUNK_ITEMS: list[object] = [1, 0, int(Event.READ), "READ", None, True, 1.0, b"\x01", Junk()]


class _Iterable:
    """A user-defined iterable (no list, no tuple) over ``items``."""

    def __init__(self, items: Sequence[object]) -> None:
        self._items = list(items)

    def __iter__(self) -> Iterator[object]:
        return iter(self._items)


_CONTAINERS: dict[str, Callable[[list[object]], object]] = {
    "list": list,
    "tuple": tuple,
    "set": set,
    "frozenset": frozenset,
    "deque": deque,
    "dict": dict.fromkeys,
    "generator": lambda items: (item for item in items),
    "iterator": iter,
    "iterable": _Iterable,
}


def _union(items: Sequence[object]) -> int:
    bits = 0
    for item in items:
        bits |= int(item)  # type: ignore[call-overload]
    return bits


def events_faults(bits: int, *, junk: bool = False) -> Faults:
    """SPEC 4: events not an ``Event`` (or an iterable holding something else) is a
    ``TypeError``; empty, a non-stream event (SPEC 10) or bits no member has (this
    project's rule), a ``ValueError``."""
    faults: set[type[BaseException]] = set()
    if junk:
        faults.add(TypeError)
    elif not bits or bits & ~MEMBER_BITS:
        faults.add(ValueError)
    if bits & NON_STREAM_BITS:
        faults.add(ValueError)
    return frozenset(faults)


@st.composite
def events_args(draw: st.DrawFn, *, valid: bool | None = None) -> Arg:
    """Any ``events`` argument: an ``Event``, an iterable of them (of every kind of container,
    empty included), one holding non-``Event`` items, or no iterable at all.

    ``valid=True`` draws only valid ones, ``False`` only invalid ones, ``None`` both.
    """
    if valid is None:
        valid = draw(st.booleans())
    if valid:
        # Mostly READ and/or WRITE, each extra flag (a mode, ERROR, PRIORITY ...) now and then.
        members: list[Event] = draw(
            st.sampled_from(
                [[Event.READ], [Event.WRITE], [Event.READ, Event.WRITE], [Event.READ | Event.WRITE]]
            )
        )
        members = members + draw(
            st.lists(st.sampled_from(STREAM_FLAGS[2:] * 2 + [Event.READ]), max_size=2)
        )
        if draw(st.integers(0, 9)) == 0:
            members = [m for m in members if not m & (Event.READ | Event.WRITE)]
            members = members or [Event.ONESHOT]  # modes, ERROR ...: nothing to be ready for
        bits = _union(members)
        form = draw(st.sampled_from(["flag", "flag", "flag", *_CONTAINERS]))
        if form == "flag":
            value = Event(bits)
            return const(repr(value), value, bits=bits, names=("events",))
        make = _CONTAINERS[form]
        return Arg(f"{form}({members!r})", lambda: make(list(members)), bits=bits)
    kind = draw(
        st.sampled_from(["empty", "non-stream", "unknown-bits", "junk-item", "not-iterable"])
    )
    if kind == "not-iterable":
        junk = draw(st.sampled_from([*_JUNK_ITEMS, 1.5, 2**70, -1, object()]))
        return const(f"not-iterable {junk!r}", junk, frozenset({TypeError}), names=("events",))
    form = draw(st.sampled_from(["flag", *_CONTAINERS]))
    items: list[object]
    if kind == "empty":
        items = []
    elif kind == "non-stream":
        items = [
            *draw(st.lists(st.sampled_from(STREAM_FLAGS), max_size=2)),
            *draw(st.lists(st.sampled_from(NON_STREAM), min_size=1, max_size=2)),
        ]
    elif kind == "unknown-bits":  # an IntFlag keeps them: Event.READ | select.EPOLLET
        items = [
            *draw(st.lists(st.sampled_from(STREAM_FLAGS), max_size=2)),
            Event(1 << draw(st.integers(MEMBER_BITS.bit_length(), 40))),
        ]
    else:
        form = draw(st.sampled_from(list(_CONTAINERS)))
        items = [
            *draw(st.lists(st.sampled_from(STREAM_FLAGS + NON_STREAM), max_size=2)),
            draw(st.sampled_from(_JUNK_ITEMS)),
        ]
    if form == "flag":
        bits = _union([m for m in items if isinstance(m, Event)])
        value = Event(bits)
        return const(repr(value), value, events_faults(bits), bits=bits, names=("events",))
    make = _CONTAINERS[form]
    # What the container holds (a set keeps Event.READ or 1, whichever came first).
    held = list(make(list(items)))  # type: ignore[call-overload]
    bits = _union([m for m in held if isinstance(m, Event)])
    faults = events_faults(bits, junk=not all(isinstance(m, Event) for m in held))
    return Arg(f"{form}({items!r})", lambda: make(list(items)), faults, ("events",), bits)


def backend_faults(
    bits: int, backend: Any, error: type[BaseException] = FailedHandleAddError
) -> Faults:
    """SPEC 6.5 (and 2): ``EDGE_TRIGGERED`` / ``PRIORITY`` where the backend lacks them."""
    faults: set[type[BaseException]] = set()
    if bits & Event.EDGE_TRIGGERED and not backend.supports_edge_triggering():
        faults.add(error)
    if bits & Event.PRIORITY and not backend.supports_priority():
        faults.add(error)
    return frozenset(faults)


# -- handles ------------------------------------------------------------------------------------

# Recipes for ``Context.add``'s ``handle`` that are not a plain open stream: (label, value or
# fileno script, whether it is a Handle subclass, faults, bug).  The test resolves the
# symbolic fds and computes the faults that depend on its state (closed, watched).


@dataclass(frozen=True)
class HandleRecipe:
    """A bad (or odd) ``handle``: a plain value, or an object with a scripted ``fileno()``."""

    label: str
    value: Any = None  # the handle itself when ``script`` is empty
    script: tuple[Answer, ...] = ()
    as_handle: bool = False  # a Handle subclass rather than an object StreamPollHandle wraps
    closed_attr: bool = False
    faults: Faults = NONE
    # The first fileno() answer names an fd whose fate the test knows (CLOSED, SPARE, ...).
    fd_kind: str | None = None
    huge: bool = False  # an fd no OS has: the backend decides the error
    lies: bool = False  # later fileno() answers differ from the first
    bug: str | None = None

    def __repr__(self) -> str:
        return self.label

    def make(self, fds: dict[str, int]) -> Any:
        """The handle, with ``fds`` standing for the symbolic fd numbers."""
        if not self.script:
            return self.value
        answers = resolve(self.script, fds)
        if self.as_handle:
            return ScriptedHandle(answers)
        return Scripted(answers, closed=self.closed_attr)


_TYPE_ERROR = frozenset({TypeError})
_VALUE_ERROR = frozenset({ValueError})
_INVALID = frozenset({InvalidHandleError})
# A huge fd names no open file: refused by the OS (EBADF), by SELECT's FD_SETSIZE, or as a
# wrong value.
HUGE_FD_FAULTS = frozenset({ValueError, FailedHandleAddError, InvalidHandleError})

_FILENO_FAILURES: list[tuple[str, Answer, Faults]] = [
    ("raises OSError", OSError, _INVALID),
    ("raises ValueError", ValueError, _INVALID),
    ("raises io.UnsupportedOperation", io.UnsupportedOperation, _INVALID),
    # The caller's own exception (not an OS answer) may also pass through unchanged.
    ("raises RuntimeError", RuntimeError, _INVALID | {RuntimeError}),
    ("raises KeyError", KeyError, _INVALID | {KeyError}),
    ("returns '3'", "3", _INVALID),
    ("returns 3.0", 3.0, _INVALID),
    ("returns None", None, _INVALID),
    ("returns True", True, _INVALID),
    ("returns False", False, _INVALID),
    ("returns -1", -1, _INVALID),
    ("returns -2**70", -(2**70), _INVALID),
]


_NOT_HANDLES: list[object] = [None, "3", b"3", 3.0, math.nan, True, False, [], (), Junk(), 1j]


def _scripted_recipe(as_handle: bool, label: str, *script: Answer, **fields: Any) -> HandleRecipe:
    """The recipe of an object (a ``Handle`` subclass if ``as_handle``) whose ``fileno()``
    answers ``script``, labelled ``"<object|Handle> fileno() <label>"``; ``fields`` are the
    other ``HandleRecipe`` fields."""
    kind = "Handle" if as_handle else "object"
    return HandleRecipe(f"{kind} fileno() {label}", script=script, as_handle=as_handle, **fields)


def _handle_recipes() -> list[HandleRecipe]:
    recipes = [
        HandleRecipe(f"value {value!r}", value, faults=_TYPE_ERROR) for value in _NOT_HANDLES
    ]
    recipes += [
        HandleRecipe(f"int {value}", value, faults=_VALUE_ERROR) for value in [-1, -(2**70)]
    ]
    for value in [2**31, 2**63, 2**70]:
        recipes.append(
            HandleRecipe(f"int {value}", value, faults=HUGE_FD_FAULTS, huge=True, bug="huge-fd")
        )
    for as_handle in (False, True):
        for label, answer, faults in _FILENO_FAILURES:
            recipes.append(_scripted_recipe(as_handle, label, answer, faults=faults))
        for value in [2**31, 2**70]:
            recipes.append(
                _scripted_recipe(
                    as_handle,
                    f"returns {value}",
                    value,
                    faults=HUGE_FD_FAULTS,
                    huge=True,
                    bug="huge-fd",
                )
            )
        for fd_kind in (CLOSED, WATCHED):
            recipes.append(
                _scripted_recipe(as_handle, f"returns {fd_kind}", fd_kind, fd_kind=fd_kind)
            )
        # Objects that lie: the answer changes between calls.
        for first, then in [
            (SPARE, -1),
            (SPARE, OSError),
            (SPARE, RuntimeError),
            (SPARE, WATCHED),
            (SPARE, "3"),
            (SPARE, CLOSED),
            (CLOSED, SPARE),
            (WATCHED, SPARE),
            (-1, SPARE),
            (OSError, SPARE),
            (SPARE, 2**40),
        ]:
            bug = None
            if then is RuntimeError:
                bug = "close-raising-fileno"
            elif then == "3" and not as_handle:
                bug = "is-valid-non-int"
            recipes.append(
                _scripted_recipe(
                    as_handle, f"lies {first!r} then {then!r}", first, then, lies=True, bug=bug
                )
            )
    recipes.append(
        HandleRecipe("object with .closed=True", script=(SPARE,), closed_attr=True, faults=_INVALID)
    )
    recipes.append(HandleRecipe("io.BytesIO()", io.BytesIO(), faults=_INVALID))
    return recipes


HANDLE_RECIPES = _handle_recipes()


def handle_recipes(*, include_bugs: bool = False) -> st.SearchStrategy[HandleRecipe]:
    """Bad or odd ``handle`` values; those that run into an open bug only if asked."""
    chosen = [r for r in HANDLE_RECIPES if include_bugs or not open_bug(r.bug)]
    return st.sampled_from(chosen)


# -- iopoll.loop arguments ----------------------------------------------------------------------


def seconds_faults(value: object) -> Faults:
    """SPEC 9.1: a delay or interval is a real number of seconds; negative or NaN is a
    ``ValueError`` (``math.inf`` and huge ones never fire); anything else a ``TypeError``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)):
        return _TYPE_ERROR
    if isinstance(value, float) and math.isnan(value):
        return _VALUE_ERROR
    return _VALUE_ERROR if value < 0 else NONE


seconds_values = st.one_of(
    st.sampled_from([0, 0.0, -0.0, 10**6, 1e300, math.inf, 10**400, Fraction(10**7, 3)]),
    st.sampled_from([-1, -1e-300, -math.inf, math.nan, -(10**400), Fraction(-1, 3)]),
    ints,
    floats,
    bools,
    st.sampled_from(["1", None, [], 1j, Decimal("1"), Junk(), timedelta(seconds=1)]),
    st.builds(IntSub, st.integers(-2, 2)),
    st.builds(FloatSub, st.sampled_from([0.0, -1.0, math.nan])),
)


async def _async_fn(*args: object) -> None:
    return None


async def _async_gen(*args: object) -> Any:
    yield None


def _returns_coroutine(*args: object) -> Any:
    return _async_fn()


@dataclass(frozen=True)
class CallbackSpec:
    """A ``fn`` argument of the loop: what it does when called and what registration says.

    ``outcome`` is ``"none"`` (returns None), ``"value"`` (returns non-None:
    ``InvalidCallbackError`` through the error path), ``"coroutine"`` (returns a coroutine:
    the same, and the coroutine is closed) or ``"raise"`` (raises ``LookupError``).
    """

    label: str
    kind: str  # "function", "lambda", "partial", "instance", "method", "refused"
    outcome: str = "none"
    faults: Faults = NONE
    value: Any = None  # for "refused": the value itself
    bug: str | None = None

    def __repr__(self) -> str:
        return self.label


class _CallableInstance:
    def __init__(self, body: Callable[..., Any]) -> None:
        self._body = body

    def __call__(self, *args: object) -> Any:
        return self._body(*args)


class _Holder:
    def __init__(self, body: Callable[..., Any]) -> None:
        self._body = body

    def method(self, *args: object) -> Any:
        return self._body(*args)


def make_callback(spec: CallbackSpec, record: Callable[[tuple[object, ...]], None]) -> Any:
    """The callable ``spec`` describes, recording every call's arguments with ``record``."""
    if spec.kind == "refused":
        return spec.value

    def body(*args: object) -> Any:
        record(args)
        if spec.outcome == "value":
            return 1
        if spec.outcome == "coroutine":
            return _async_fn()
        if spec.outcome == "raise":
            raise LookupError(f"raised by {spec.label}")
        return None

    if spec.kind == "function":

        def function(*args: object) -> Any:
            return body(*args)

        return function
    if spec.kind == "lambda":
        return lambda *args: body(*args)
    if spec.kind == "partial":
        return functools.partial(body)
    if spec.kind == "instance":
        return _CallableInstance(body)
    return _Holder(body).method


_REFUSED: list[tuple[str, object, str | None]] = [
    ("None", None, None),
    ("1", 1, None),
    ("'fn'", "fn", None),
    ("object()", object(), None),
    ("[]", [], None),
    ("async def", _async_fn, None),
    ("async generator function", _async_gen, None),
    ("Bogus() (__code__ = 5)", Bogus(), "loop-bogus-code"),
]


good_callback_specs = st.builds(
    CallbackSpec,
    label=st.just("fn"),
    kind=st.sampled_from(["function", "lambda", "partial", "instance", "method"]),
    outcome=st.sampled_from(["none", "none", "none", "value", "coroutine", "raise"]),
).map(lambda s: CallbackSpec(f"{s.kind}->{s.outcome}", s.kind, s.outcome))


def callback_specs(*, include_bugs: bool = False) -> st.SearchStrategy[CallbackSpec]:
    """Every kind of ``fn``: callables of each form and outcome, and what is no callback."""
    good = good_callback_specs
    refused = [
        CallbackSpec(label, "refused", faults=_TYPE_ERROR, value=value, bug=bug)
        for label, value, bug in _REFUSED
        if include_bugs or not open_bug(bug)
    ]
    return st.one_of(good, st.sampled_from(refused))


# A stream argument of on_readable/on_writable: ("socket" | "int" | "object" kinds are valid
# and name the test's socket; the rest are refused) -> faults.
@dataclass(frozen=True)
class StreamRecipe:
    """A ``stream`` argument of the loop: valid forms of the test's socket, or bad ones."""

    label: str
    kind: str  # "socket", "int", "object", "closed", "value", "script"
    value: Any = None
    script: tuple[Answer, ...] = ()
    faults: Faults = NONE
    bug: str | None = None

    def __repr__(self) -> str:
        return self.label


_NOT_STREAMS: list[object] = [None, "3", 3.0, True, False, [], Junk(), b"3"]


def _stream_recipes() -> list[StreamRecipe]:
    recipes = [
        StreamRecipe("the socket", "socket"),
        StreamRecipe("its int fd", "int"),
        StreamRecipe("an object with its fileno()", "object"),
        StreamRecipe("a closed socket", "closed", faults=_VALUE_ERROR),
    ]
    recipes += [StreamRecipe(f"value {v!r}", "value", v, faults=_TYPE_ERROR) for v in _NOT_STREAMS]
    recipes += [StreamRecipe(f"int {v}", "value", v, faults=_VALUE_ERROR) for v in [-1, -(2**70)]]
    recipes += [
        StreamRecipe(f"int {v}", "value", v, faults=_VALUE_ERROR, bug="loop-huge-fd")
        for v in [2**31, 2**70]
    ]
    recipes += [
        StreamRecipe("io.BytesIO()", "value", io.BytesIO(), faults=_VALUE_ERROR),
        StreamRecipe("fileno() raises OSError", "script", script=(OSError,), faults=_VALUE_ERROR),
        StreamRecipe(
            "fileno() raises ValueError", "script", script=(ValueError,), faults=_VALUE_ERROR
        ),
        StreamRecipe(
            "fileno() raises RuntimeError",
            "script",
            script=(RuntimeError,),
            faults=frozenset({ValueError, RuntimeError}),
        ),
        StreamRecipe("fileno() returns -1", "script", script=(-1,), faults=_VALUE_ERROR),
        StreamRecipe(
            "fileno() returns 2**31",
            "script",
            script=(2**31,),
            faults=_VALUE_ERROR,
            bug="loop-huge-fd",
        ),
    ]
    recipes += [
        StreamRecipe(
            f"fileno() returns {v!r}",
            "script",
            script=(v,),
            faults=_TYPE_ERROR | _VALUE_ERROR,
            bug="loop-non-int-fileno",
        )
        for v in ["3", None, 3.0, True]
    ]
    return recipes


STREAM_RECIPES = _stream_recipes()


def stream_recipes(*, include_bugs: bool = False) -> st.SearchStrategy[StreamRecipe]:
    """Valid and bad ``stream`` arguments of ``on_readable``/``on_writable``."""
    return st.sampled_from([r for r in STREAM_RECIPES if include_bugs or not open_bug(r.bug)])


# Callback ids: the strings the driver made are drawn by the tests; these are the others.
unknown_ids = st.one_of(
    st.text(max_size=4),
    st.sampled_from(["", "a", "zz", "\x00", "a" * 1000]),
)
non_string_ids: st.SearchStrategy[Any] = st.sampled_from(
    [None, 1, 0, b"a", 1.5, True, ("a",), [], {}, Junk()]
)

_CATCHABLE = [signal.SIGUSR1, signal.SIGUSR2]
# Signals that cannot be blocked: a driver that watches signals through signal handles
# (one thread) refuses them with ValueError, one that installs a handler (another thread
# ran first) takes them; which one depends on the process, not on the argument, so the
# model leaves them to tests/test_loop_signal_handles.py.
_UNBLOCKABLE = {
    getattr(signal, name)
    for name in ("SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL")
    if hasattr(signal, name)
}
signum_values: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from(
        [0, -1, 32, 33, signal.NSIG, 2**70, -(2**70), signal.SIGKILL, signal.SIGSTOP, 2**31]
    ),
    st.integers(-(2**40), 2**40).filter(lambda n: n not in _UNBLOCKABLE),
    bools,
    st.sampled_from([1.0, "2", None, [], Junk(), float(signal.SIGUSR1)]),
    st.sampled_from(_CATCHABLE),
)


def signum_faults(value: object) -> Faults:
    """SPEC 9.1 with section 1: a signal number is an ``int``; one that cannot be caught a
    ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, int):
        return _TYPE_ERROR
    if value not in signal.valid_signals() or value in (signal.SIGKILL, signal.SIGSTOP):
        return _VALUE_ERROR
    return NONE


# -- selectors arguments ------------------------------------------------------------------------

selector_events: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from([1, 2, 3]),
    st.sampled_from([0, 4, 7, -1, 2**70, -(2**70), 2**31]),
    st.sampled_from([1.0, "1", None, [], Junk(), 1j, Fraction(1), Decimal(1)]),
    st.integers(-8, 8),
)
selector_timeouts: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.sampled_from([0, 0.0, -1, -1.5, -math.inf, math.nan, 1e300, math.inf, 10**400, 2**63]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**70), 2**70),
    st.sampled_from(["1", [], 1j, Decimal("0.01"), Fraction(1, 100), timedelta(0), Junk()]),
)


class Hang(Exception):
    """A call that should have returned at once was still blocked (``hang_guard``)."""


@contextlib.contextmanager
def hang_guard(seconds: float = 5.0) -> Iterator[None]:
    """Raise ``Hang`` in the block after ``seconds``: a wait the model says returns at once
    fails the test instead of sleeping out a timeout of 1e300 s.  pytest-timeout's own
    SIGALRM timer, if any, is put back with the time it had left (``alarm()``)."""

    def on_alarm(signum: int, frame: object) -> None:
        raise Hang(f"still blocked after {seconds} s")

    with alarm(on_alarm, seconds):
        yield


@dataclass
class Outcome:
    """What one call did: its result, or the exception it raised."""

    result: Any = None
    error: BaseException | None = None

    @property
    def raised(self) -> bool:
        return self.error is not None


def attempt(call: Callable[[], Any]) -> Outcome:
    """Run ``call``; every ``Exception`` is caught and kept (never ``KeyboardInterrupt``)."""
    try:
        return Outcome(call())
    except Exception as exc:
        return Outcome(error=exc)


def check_raised(
    outcome: Outcome, allowed: Faults, *, call: str, names: Sequence[str] = ()
) -> None:
    """``outcome`` raised one of ``allowed`` (never ``SystemError``); a ``TypeError`` or
    ``ValueError`` of an argument names one of ``names`` (SPEC 1), when given."""
    exc = outcome.error
    assert exc is not None, f"{call}: returned {outcome.result!r}, expected one of {allowed}"
    assert not isinstance(exc, SystemError), f"{call}: SystemError {exc!r}"
    if not isinstance(exc, tuple(allowed)):
        raise AssertionError(
            f"{call}: raised {type(exc).__name__}: {exc}; SPEC allows only "
            f"{sorted(c.__name__ for c in allowed)}"
        ) from exc
    if names and type(exc) in (TypeError, ValueError):
        message = str(exc)
        assert any(name in message for name in names), (
            f"{call}: the message {message!r} names none of {list(names)} (SPEC 1)"
        )


def check_fails_unchanged(
    state: Callable[[], object],
    run: Callable[[], Any],
    allowed: Faults,
    *,
    call: str,
    names: Sequence[str] = (),
    what: str,
) -> Outcome:
    """Run ``run``, a call that must fail with one of ``allowed`` (as ``check_raised``
    says), and check that ``state()`` reads the same after it as before: a failed call
    leaves nothing half-made.  ``what`` names that state in the failure message."""
    before = state()
    outcome = attempt(run)
    check_raised(outcome, allowed, call=call, names=names)
    assert state() == before, f"{call} changed {what}"
    return outcome


def check_succeeded(outcome: Outcome, *, call: str) -> Any:
    """``outcome`` returned; its result."""
    if outcome.error is not None:
        raise AssertionError(
            f"{call}: raised {type(outcome.error).__name__}: {outcome.error}, expected success"
        ) from outcome.error
    return outcome.result
