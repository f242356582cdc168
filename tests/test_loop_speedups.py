"""The drivers' C dispatch (``iopoll/loop/_speedups.c``) against the pure-Python reference.

``IoPollDriver`` and ``SelectorsDriver`` run their ``defer``/``delay``/``repeat``, the run loop,
the tick, the drain, activation and the timer queue in C when the extension was built; their
parents ``PyIoPollDriver`` and ``PySelectorsDriver`` keep the Python methods.  The driver
contract runs on all four (``test_loop_drivers.py``).  Here a Hypothesis test replays one
random schedule through a pure and a C driver side by side and compares the order of every
callback, microtask and error, and the state of every id after each run; the targeted tests
below pin what a random schedule rarely reaches.

Both drivers run on a clock of their own that advances a fixed step per reading, and by the
timeout of each blocking wait (which then does not block), so that the schedule does not
depend on the machine's speed: the C code calls ``self._now()`` and ``self._poll()`` where a
subclass overrides them, exactly as often as the Python code does.
"""

from __future__ import annotations

import functools
import gc
import importlib.util
import inspect
import math
import os
import re
import socket
import sys
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from every_loop_driver import with_test_clock
from iopoll.loop import InvalidCallbackError, IoPollDriver, SelectorsDriver, UncaughtError
from iopoll.loop._abstract_driver import AbstractDriver
from iopoll.loop._iopoll_driver import ACCELERATED, PyIoPollDriver
from iopoll.loop._selectors_driver import PySelectorsDriver
from iopoll_conformance.process import within

BUILT = importlib.util.find_spec("iopoll.loop._speedups") is not None
needs_c = pytest.mark.skipif(not ACCELERATED, reason="iopoll.loop._speedups is not in use")

STEP = 0.0005  # what the test clock advances per reading, in seconds


def _with_test_clock(base: type[AbstractDriver]) -> type[AbstractDriver]:  # type: ignore[type-arg]
    """``base`` on a clock that moves ``STEP`` at each reading."""
    return with_test_clock(base, start=1000.0, step=STEP)


PAIRS = [
    pytest.param(PyIoPollDriver, IoPollDriver, id="iopoll"),
    pytest.param(PySelectorsDriver, SelectorsDriver, id="selectors"),
]

# -- the schedule's interpreter ---------------------------------------------------------------

ACTIONS = [
    "defer",
    "delay0",
    "delay1",
    "delay3",
    "delay_inf",
    "repeat0",
    "repeat2",
    "readable",
    "writable",
    "enable",
    "disable",
    "cancel",
    "reference",
    "unreference",
    "queue",
    "queue_raise",
    "raise",
    "return_value",
    "stop",
    "nothing",
]
MAX_CALLS = 120  # callbacks per run: then every id is cancelled and the loop ends
MAX_RUNS_PER_CALLBACK = 3  # a repeat or an I/O callback cancels itself after that many
WATCHDOG_RUNS = 40  # the watchdog's runs between two cancellations of everything


class Schedule:
    """Runs one list of actions on one driver and logs everything that happens.

    Each callback, when it runs, logs itself and performs the next action of the list (so
    the same list gives the same program wherever the callbacks run in the same order).
    """

    def __init__(
        self,
        driver: AbstractDriver,  # type: ignore[type-arg]
        actions: list[tuple[str, int]],
        streams: tuple[socket.socket, socket.socket],
        handler: bool,
    ) -> None:
        self.driver = driver
        self.actions = actions
        self.cursor = 0
        self.log: list[tuple[Any, ...]] = []
        self.ids: list[str] = []
        self.runs: dict[str, int] = {}
        self.calls = 0
        self.watchdog_runs = 0
        self.readable, self.writable = streams
        if handler:
            driver.set_error_handler(self.on_error)

    def on_error(self, exc: Exception) -> None:
        self.log.append(("error", type(exc).__name__, str(exc)))

    def next_action(self) -> tuple[str, int]:
        if self.cursor >= len(self.actions):
            return ("nothing", 0)
        action = self.actions[self.cursor]
        self.cursor += 1
        return action

    def callback(self, callback_id: str, *arg: Any) -> Any:
        self.log.append(("call", callback_id, len(arg)))
        self.calls += 1
        if self.calls >= MAX_CALLS:
            for known in self.ids:
                self.driver.cancel(known)
            return None
        runs = self.runs[callback_id] = self.runs.get(callback_id, 0) + 1
        if runs >= MAX_RUNS_PER_CALLBACK and self.driver.get_type(callback_id).value in (
            "repeat",
            "readable",
            "writable",
        ):
            self.driver.cancel(callback_id)
        return self.perform(*self.next_action())

    def watchdog(self, callback_id: str) -> None:
        """An unreferenced repeat: ends a run that would wait for ever (an infinite delay
        referenced again) by cancelling every callback, after a fixed number of ticks."""
        self.log.append(("watchdog", callback_id))
        self.watchdog_runs += 1
        if self.watchdog_runs % WATCHDOG_RUNS == 0:
            for known in self.ids:
                self.driver.cancel(known)

    def microtask(self, label: int) -> None:
        self.log.append(("microtask", label))

    def failing_microtask(self, label: int) -> None:
        self.log.append(("microtask", label))
        raise KeyError(label)

    def perform(self, action: str, number: int) -> Any:
        d = self.driver
        register: dict[str, Callable[[], str]] = {
            "defer": lambda: d.defer(self.callback),
            "delay0": lambda: d.delay(0, self.callback),
            "delay1": lambda: d.delay(STEP, self.callback),
            "delay3": lambda: d.delay(3 * STEP, self.callback),
            "delay_inf": lambda: d.delay(math.inf, self.callback),
            "repeat0": lambda: d.repeat(0, self.callback),
            "repeat2": lambda: d.repeat(2 * STEP, self.callback),
            "readable": lambda: d.on_readable(self.readable, self.callback),
            "writable": lambda: d.on_writable(self.writable, self.callback),
        }
        if action in register:
            callback_id = register[action]()
            self.ids.append(callback_id)
            self.log.append(("new", action, callback_id))
        elif action in ("enable", "disable", "cancel", "reference", "unreference"):
            if self.ids:
                target = self.ids[number % len(self.ids)]
                try:
                    result = getattr(d, action)(target)
                except InvalidCallbackError as exc:
                    result = f"raised {exc}"
                self.log.append((action, target, result))
        elif action == "queue":
            d.queue(self.microtask, number)
        elif action == "queue_raise":
            d.queue(self.failing_microtask, number)
        elif action == "raise":
            raise ValueError(number)
        elif action == "return_value":
            return number
        elif action == "stop":
            d.stop()
        return None

    def run(self) -> None:
        try:
            self.driver.run()
        except UncaughtError as exc:
            self.log.append(("uncaught", str(exc)))

    def state(self) -> list[tuple[Any, ...]]:
        d = self.driver
        # The lazy id map's own state first: get_identifiers() indexes what is pending.
        table: list[tuple[Any, ...]] = [("unindexed", len(d._unindexed), d._unindexed_limit)]
        table.append(("ids", tuple(d.get_identifiers())))
        for callback_id in d.get_identifiers():
            table.append(
                (
                    callback_id,
                    d.get_type(callback_id),
                    d.is_enabled(callback_id),
                    d.is_referenced(callback_id),
                )
            )
        table.append(("live", d._live, "queued", len(d._enable_queue), len(d._defers)))
        table.append(("timers", sorted((e[0], e[1]) for e in d._timers)))
        table.append(("fifo", list(d._fifo_seqs), [c.id for c in d._fifo_timers]))
        return table


def replay(
    cls: type[AbstractDriver],  # type: ignore[type-arg]
    actions: list[tuple[str, int]],
    first: int,
    handler: bool,
    runs: int,
) -> tuple[list[tuple[Any, ...]], list[list[tuple[Any, ...]]]]:
    """Register ``first`` callbacks from ``actions``, then run the loop ``runs`` times."""
    a, b = socket.socketpair()
    try:
        b.send(b"x")  # a is readable, for every readable callback of the schedule
        driver = _with_test_clock(cls)()
        try:
            schedule = Schedule(driver, actions, (a, b), handler)
            for _ in range(first):
                action, number = schedule.next_action()
                if action in ("raise", "return_value", "stop", "nothing"):
                    action = "defer"  # outside a callback: register something instead
                schedule.perform(action, number)
            driver.unreference(driver.repeat(10 * STEP, schedule.watchdog))
            states = []
            for _ in range(runs):
                schedule.run()
                states.append(schedule.state())
            return schedule.log, states
        finally:
            driver.close()
    finally:
        a.close()
        b.close()


actions_strategy = st.lists(
    st.tuples(st.sampled_from(ACTIONS), st.integers(0, 50)), min_size=1, max_size=80
)


@pytest.mark.skipif(not BUILT, reason="iopoll.loop._speedups was not built here")
@pytest.mark.parametrize("cls", [IoPollDriver, SelectorsDriver])
def test_the_c_dispatch_is_in_use_when_built(cls: type[AbstractDriver]) -> None:  # type: ignore[type-arg]
    """Built, the C dispatch runs unless ``IOPOLL_PURE_PYTHON`` asks for Python.  An install
    that the extension refuses (its slots no longer those of the classes) leaves every
    driver pure with a warning only, and every test here that needs the C code skipped."""
    wanted = os.environ.get("IOPOLL_PURE_PYTHON", "") in ("", "0")
    assert ACCELERATED is wanted
    assert inspect.isfunction(inspect.getattr_static(cls, "_tick")) is not wanted
    assert inspect.isfunction(inspect.getattr_static(cls, "defer")) is not wanted


@needs_c
@pytest.mark.parametrize(("pure", "fast"), PAIRS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    actions=actions_strategy,
    first=st.integers(1, 8),
    handler=st.booleans(),
    runs=st.integers(1, 3),
)
def test_a_random_schedule_runs_alike(
    pure: type[AbstractDriver],  # type: ignore[type-arg]
    fast: type[AbstractDriver],  # type: ignore[type-arg]
    actions: list[tuple[str, int]],
    first: int,
    handler: bool,
    runs: int,
) -> None:
    # Each replay under a watchdog: a driver that spins for ever would otherwise outlive
    # pytest-timeout, whose failure Hypothesis takes for one more example and replays.
    expected = within(10, lambda: replay(pure, actions, first, handler, runs), "the pure replay")
    got = within(10, lambda: replay(fast, actions, first, handler, runs), "the C replay")
    note(f"pure log: {expected[0]}")
    assert got[0] == expected[0]
    assert got[1] == expected[1]


# -- targeted cases -------------------------------------------------------------------------------


def both(test: Callable[[type[AbstractDriver]], Any]) -> Callable[[], None]:  # type: ignore[type-arg]
    """Run ``test(cls)`` on the pure and the C IoPollDriver; their results must be equal."""

    @needs_c
    def run_both() -> None:
        expected = test(_with_test_clock(PyIoPollDriver))
        got = test(_with_test_clock(IoPollDriver))
        assert got == expected
        assert expected is not None  # the test returned what it saw

    run_both.__name__ = test.__name__
    run_both.__doc__ = test.__doc__
    return run_both


@both
def test_timers_with_one_expiration_run_in_registration_order(cls: type) -> Any:
    """Equal expirations fall back to the sequence number, as heapq's tuples compare."""
    d = cls()
    d._now = lambda: 5.0  # every reading the same instant
    seen: list[str] = []
    for _ in range(40):
        d.delay(0.25, lambda cid: seen.append(cid))
    for _ in range(10):
        d.delay(0.0, lambda cid: seen.append(cid))
    d._now = iter(float(x) for x in range(5, 10_000)).__next__
    d.run()
    return seen


@both
def test_the_timer_heap_is_the_one_heapq_keeps(cls: type) -> Any:
    """After activation the heap list is laid out exactly as heapq.heappush lays it out."""
    import heapq
    import random

    rng = random.Random(7)
    d = cls()
    delays = [0.0, 0.001, 0.5, 2.0, math.inf]
    ids = [d.delay(rng.choice(delays), lambda cid: None) for _ in range(60)]
    for callback_id in ids[::7]:
        d.disable(callback_id)
    d._activate(d._enable_queue)
    d._enable_queue = []
    layout = [(e[0], e[1]) for e in d._timers]
    reference: list[tuple[float, int]] = []
    for entry in sorted(layout, key=lambda pair: pair[1]):  # pushed in sequence order
        heapq.heappush(reference, entry)
    assert layout == reference
    popped = [heapq.heappop(d._timers)[:2] for _ in range(len(d._timers))]
    assert popped == sorted(layout)
    return layout


def _activate_now(d: Any) -> None:
    d._activate(d._enable_queue)
    d._enable_queue = []


def _queued_by_timers(d: Any) -> list[str]:
    """The ids in the run queue after the timer phase of a tick."""
    d._enqueue_timers()
    return [c.id for c in d._queue]


def _clocked(cls: type, *, heap_timer: bool = True) -> tuple[Any, list[float]]:
    """A driver on a clock the test sets, with (``heap_timer``) one timer in the heap that
    never expires: the FIFO takes timers only while the heap holds one."""
    d = cls()
    clock = [5.0]
    d._now = lambda: clock[0]
    if heap_timer:
        d.unreference(d.delay(math.inf, lambda cid: None))
    return d, clock


@both
def test_a_lone_interval_zero_timer_goes_to_the_heap(cls: type) -> Any:
    d, _ = _clocked(cls, heap_timer=False)
    first, second = d.delay(0, lambda cid: None), d.delay(0, lambda cid: None)
    _activate_now(d)
    assert [e[2].id for e in d._timers] == [first]
    assert [c.id for c in d._fifo_timers] == [second]
    order = _queued_by_timers(d)
    assert order == [first, second]
    return order


@both
def test_interval_zero_timers_go_to_the_fifo_and_the_others_to_the_heap(cls: type) -> Any:
    """delay(0) and repeat(0) take no heap entry; a timer that ties with one runs in seq order."""
    d, clock = _clocked(cls, heap_timer=False)
    first = d.delay(1.0, lambda cid: None)  # expires at 6.0, seq 0: the heap
    clock[0] = 6.0
    second = d.delay(0, lambda cid: None)  # 6.0, seq 1: the FIFO
    third = d.repeat(0, lambda cid: None)  # 6.0, seq 2: the FIFO
    clock[0] = 5.0
    fourth = d.delay(1.0, lambda cid: None)  # 6.0, seq 3: the heap
    _activate_now(d)
    assert [e[1] for e in d._timers] == [0, 3]
    assert list(d._fifo_seqs) == [1, 2]
    assert [c.id for c in d._fifo_timers] == [second, third]
    assert d._fifo_timers[0].entry == 1 and d._fifo_timers[1].entry == 2
    clock[0] = 6.0
    order = _queued_by_timers(d)
    assert order == [first, second, third, fourth]
    assert not d._timers and not d._fifo_timers and not d._fifo_seqs
    return order


@both
def test_a_dead_fifo_head_never_holds_back_the_timers_behind_it(cls: type) -> Any:
    """A timer disabled and enabled again leaves its old FIFO entry at the head, with its
    expiration moved on: the tick must skip it, not read the new expiration off it."""
    d, clock = _clocked(cls)
    a = d.delay(0, lambda cid: None)
    b = d.delay(0, lambda cid: None)
    clock[0] = 4.0  # the clock went back: both wait in the FIFO
    _activate_now(d)
    d._enqueue_timers()
    assert not d._queue and len(d._fifo_timers) == 2
    d.disable(a)
    clock[0] = 6.0
    d.enable(a)  # a's new expiration, 6.0, is past b's 5.0
    _activate_now(d)
    assert [c.id for c in d._fifo_timers] == [a, b, a] and d._dead_timers == 1
    clock[0] = 5.5
    d._enqueue_timers()
    assert [c.id for c in d._queue] == [b]
    assert [c.id for c in d._fifo_timers] == [a] and d._dead_timers == 0
    clock[0] = 6.0
    d._enqueue_timers()
    assert [c.id for c in d._queue] == [b, a]
    return [c.id for c in d._queue]


@both
def test_a_clock_that_went_back_sends_an_interval_zero_timer_to_the_heap(cls: type) -> Any:
    """The FIFO holds its order by checking each expiration against its last one."""
    d, clock = _clocked(cls)
    later = d.delay(0, lambda cid: None)
    clock[0] = 4.0
    earlier = d.delay(0, lambda cid: None)
    _activate_now(d)
    assert [c.id for c in d._fifo_timers] == [later]
    assert d._timers[0][2].id == earlier  # before the one that never expires
    clock[0] = 5.0
    order = _queued_by_timers(d)
    assert order == [earlier, later]
    return order


@both
def test_dead_fifo_entries_are_swept_when_they_are_half_of_all(cls: type) -> Any:
    d, clock = _clocked(cls)
    ids = [d.delay(0, lambda cid: None) for _ in range(100)]
    clock[0] = 4.0
    _activate_now(d)
    for callback_id in ids[:70]:
        d.disable(callback_id)
    # The 65th disable swept (65 dead of 100); five more died since.
    assert len(d._fifo_timers) == len(d._fifo_seqs) == 35 and d._dead_timers == 5
    assert [c.id for c in d._fifo_timers][5:] == ids[70:]
    clock[0] = 5.0
    order = _queued_by_timers(d)
    assert order == ids[70:] and d._dead_timers == 0
    return order


@both
def test_ended_records_leave_the_unindexed_list_after_the_run_that_ends_them(cls: type) -> Any:
    """A burst of defers and ``delay(0)`` stays out of the id map, and its records leave
    ``_unindexed`` at the end of the run of the queue that ends them, having let go of their
    functions as they ended; a call by id indexes the ones still registered."""
    d = cls()
    functions: list[weakref.ref[Any]] = []
    seen: list[tuple[Any, ...]] = []

    class Fn:
        def __call__(self, cid: str) -> None:
            pass

    def note(cid: str) -> None:
        gone = sum(ref() is None for ref in functions)
        seen.append((cid, len(d._unindexed), len(d._callbacks), gone))

    for number in range(3000):
        fn = Fn()
        functions.append(weakref.ref(fn))
        (d.defer if number % 2 else functools.partial(d.delay, 0))(fn)
        del fn

    def look_up(cid: str) -> None:  # after the defers, before the timers
        note(cid)
        d.disable(cid)  # its own id is dead by now, but a call by id indexes the rest
        note(cid)

    d.defer(look_up)
    d.run()
    note("after")
    assert seen == [
        (seen[0][0], 3001, 0, 1500),  # nothing swept inside a run; the defers' fns gone
        (seen[0][0], 0, 1500, 1500),  # the delays, indexed
        ("after", 0, 0, 3000),
    ]
    d.close()
    return seen


@both
def test_records_that_end_behind_a_live_one_are_swept_once_the_list_doubled(cls: type) -> Any:
    """A record that lives on at the front of ``_unindexed`` holds the ended ones behind it
    only until the list reaches twice the length of its last sweep."""
    from iopoll.loop._registry import _SWEEP_UNINDEXED

    d = cls()
    d.delay(3600, lambda cid: None)  # lives on, unindexed, at the front
    lengths = []
    for _ in range(3):
        for _ in range(2 * _SWEEP_UNINDEXED - 1):
            d.defer(lambda cid: None)
        d.defer(lambda cid: d.stop())
        d.run()
        lengths.append((len(d._unindexed), d._unindexed_limit))
    d.close()
    # Run 1: swept as it starts (2,049 live: the limit is 4,098), and the 2,048 defers end
    # behind the timer.  Run 2: 4,097, under the limit.  Run 3: 6,145 are swept as it starts,
    # to the timer and the 2,048 new defers, which end behind it again.
    swept = 2 * _SWEEP_UNINDEXED + 1
    assert lengths == [(swept, 2 * swept), (2 * swept - 1, 2 * swept), (swept, 2 * swept)]
    return lengths


@both
def test_keyword_arguments_and_bad_calls(cls: type) -> Any:
    """defer/delay/repeat take their arguments by keyword too, and refuse what Python refuses."""
    d = cls()
    seen = [
        d.defer(fn=lambda cid: None),
        d.delay(fn=lambda cid: None, seconds=0.5),
        d.repeat(interval=1, fn=lambda cid: None),
    ]

    async def coroutine_function(cid: str) -> None:
        pass

    for call in (
        lambda: d.defer(42),
        lambda: d.defer(coroutine_function),
        lambda: d.delay(-1, lambda cid: None),
        lambda: d.delay(math.nan, lambda cid: None),
        lambda: d.delay("1", lambda cid: None),
        lambda: d.delay(True, lambda cid: None),
        lambda: d.delay(0.1, coroutine_function),
        lambda: d.repeat(0.1, 42),
        lambda: d.repeat(-0.5, lambda cid: None),
        lambda: d.delay(-1, lambda cid: None),
        lambda: d.delay(-(10**400), lambda cid: None),
        lambda: d.repeat(-2, lambda cid: None),
        lambda: d.repeat(1, coroutine_function),
    ):
        with pytest.raises((TypeError, ValueError)) as info:
            call()
        seen.append((info.type.__name__, re.sub(r" at 0x[0-9a-f]+", "", str(info.value))))
    for call in (
        lambda: d.defer(),
        lambda: d.delay(1.0),
        lambda: d.defer(print, fn=print),
        lambda: d.delay(1.0, print, 3),
        lambda: d.repeat(1.0, nope=print),
    ):
        with pytest.raises(TypeError):
            call()
    seen.append(d.get_identifiers())
    seen.append((d._live, len(d._defers), len(d._enable_queue)))
    return seen


@both
def test_a_delay_of_a_huge_int_or_a_fraction(cls: type) -> Any:
    """Non-float delays go through check_seconds: ints beyond a float are never."""
    from fractions import Fraction

    d = cls()
    seen: list[str] = []
    d.delay(10**400, lambda cid: seen.append("never"))
    d.delay(Fraction(1, 1000), lambda cid: seen.append("fraction"))
    d.delay(1, lambda cid: seen.append("int"))
    d.repeat(10**400, lambda cid: seen.append("never"))
    d.delay(2**1100, lambda cid: seen.append("never"))  # an int beyond a float: never
    d.delay(2**60 + 1, lambda cid: seen.append("never"))  # rounded as float() rounds it
    d.unreference(d.get_identifiers()[4])
    d.unreference(d.get_identifiers()[5])
    d.unreference(d.get_identifiers()[0])
    d.unreference(d.get_identifiers()[3])
    d.run()
    intervals = [d._callbacks[i].interval for i in d.get_identifiers()]
    return seen, [e[0] for e in d._timers], intervals


@both
def test_ids_carry_past_z(cls: type) -> Any:
    """The 27th id is "aa", the 703rd "aaa": C and Python count alike."""
    d = cls()
    ids = [d.defer(lambda cid: None) if n % 2 else d.delay(0, lambda cid: None) for n in range(800)]
    d.run()
    return ids[24:30] + ids[700:705]


@both
def test_a_re_armed_repeat_reads_its_interval_after_the_clock(cls: type) -> Any:
    """`self._now() + callback.interval`: a clock that sets the interval (and drops the one
    it replaced) is read first, and the interval it set is the one added."""
    d = cls()
    assigned: list[float] = []
    seen: list[bool] = []

    def clock() -> float:
        assigned.append(float(len(assigned)) + 0.5)  # a new float object every time
        record.interval = assigned[-1]
        return 1000.0 * len(assigned)  # each reading past every expiration before it

    def cb(cid: str) -> None:
        seen.append(record.expiration == 1000.0 * len(assigned) + assigned[-1])
        if len(seen) == 3:
            d.cancel(cid)

    cid = d.repeat(0, cb)
    record = d._get(cid)
    d._now = clock
    d.run()
    return seen


@both
def test_a_timer_heap_emptied_by_a_comparison_raises_index_error(cls: type) -> Any:
    """A clock whose readings, compared, empty the heap: heapq.heappop's IndexError, not a
    pop of an empty list."""
    d = cls()

    class Emptying(float):
        def __add__(self, other: object) -> Emptying:
            return Emptying(float(self) + float(other))  # type: ignore[arg-type]

        def __le__(self, other: object) -> bool:
            d._timers.clear()
            return True

    d._now = lambda: Emptying(1.0)
    d.delay(0.5, lambda cid: None)
    try:
        d.run()
    except IndexError as exc:
        return "IndexError", str(exc), d._timers
    return "no error"


@both
def test_the_id_prefix_moves_on_as_next_id_moves_it(cls: type) -> Any:
    """_carry() from any prefix a driver can hold, and from ones only a caller can set:
    C answers as next_id() does, or leaves it to the Python method (which raises for a
    letter it cannot move on, and passes over any other character as over a "z")."""
    seen: list[object] = []
    class Text(str):
        pass

    prefixes: list[object] = ["", "a", "y", "z", "az", "zy", "zz", "zzz", "bzz", "mzz", "A",
                              "zA", "Az", "zAz", "é", "aé", "zé", Text("az"), None, b"a"]
    for prefix in prefixes:
        d = cls()
        d._id_prefix = prefix
        try:
            seen.append((prefix, d._carry(), d._id_prefix, d.defer(lambda cid: None)))
        except (KeyError, TypeError) as exc:
            seen.append((prefix, type(exc).__name__, str(exc), d._id_prefix))
    return seen


@both
def test_errors_chain_to_the_exception_being_handled(cls: type) -> Any:
    """A handler's failure carries the callback's error as its context, as an except block
    gives it, and ends run() as UncaughtError."""
    d = cls()

    def handler(exc: Exception) -> None:
        raise RuntimeError("handler failed")

    d.set_error_handler(handler)
    d.defer(lambda cid: 1 / 0)
    with pytest.raises(UncaughtError) as info:
        d.run()
    failure = info.value.__cause__ or info.value.__context__
    assert isinstance(failure, RuntimeError)
    return type(failure.__context__).__name__, str(info.value)


@both
def test_a_callback_returning_a_value_and_a_coroutine(cls: type) -> Any:
    """Refused results go to the error handler, a coroutine closed first (no warning)."""
    d = cls()
    errors: list[str] = []
    d.set_error_handler(lambda exc: errors.append(str(exc)))

    async def later() -> None:
        pass

    d.defer(lambda cid: 5)
    d.defer(lambda cid: later())
    d.delay(0, lambda cid: "text")
    d.run()
    return errors


@both
def test_base_exceptions_go_through(cls: type) -> Any:
    """KeyboardInterrupt from a callback is not the error handler's: run() raises it, and
    the queue keeps the callbacks behind it for the next run()."""
    d = cls()
    seen: list[str] = []
    d.set_error_handler(lambda exc: seen.append("handler"))

    def interrupt(cid: str) -> None:
        raise KeyboardInterrupt

    d.defer(lambda cid: seen.append("first"))
    d.defer(interrupt)
    d.defer(lambda cid: seen.append("third"))
    with pytest.raises(KeyboardInterrupt):
        d.run()
    d.run()
    return seen


@both
def test_microtasks_between_callbacks_and_their_errors(cls: type) -> Any:
    """Microtasks run after each callback; one's error ends run() only after the rest ran."""
    d = cls()
    seen: list[Any] = []

    def fail() -> None:
        seen.append("fail")
        raise OSError("microtask")

    def first(cid: str) -> None:
        seen.append(cid)
        d.queue(seen.append, "m1")
        d.queue(fail)
        d.queue(seen.append, "m2")

    d.defer(first)
    d.defer(lambda cid: seen.append(cid))
    with pytest.raises(UncaughtError):
        d.run()
    d.run()
    d.queue(seen.append, *["not", "one"][:1])
    d.run()
    return seen


@both
def test_disable_and_enable_inside_a_tick(cls: type) -> Any:
    """A callback disabled by an earlier one in the same tick does not run; one re-enabled
    runs in a later tick; a repeat never runs twice in one tick."""
    d = cls()
    seen: list[str] = []
    ids: dict[str, str] = {}

    def first(cid: str) -> None:
        seen.append("first")
        d.disable(ids["second"])
        d.enable(ids["second"])

    def repeat(cid: str) -> None:
        seen.append("repeat")
        if seen.count("repeat") == 3:
            d.cancel(cid)

    ids["first"] = d.defer(first)
    ids["second"] = d.defer(lambda cid: seen.append("second"))
    ids["repeat"] = d.repeat(0, repeat)
    d.delay(0, lambda cid: seen.append("delay"))
    d.run()
    return seen


def _ready_streams(cls: type, count: int, close_one: bool) -> Any:
    """``count`` streams ready at once, each with a reader and a writer callback, run for
    three ticks; with ``close_one``, one stream is closed under its callbacks after the
    first tick, while a ``dup`` keeps its file open (so that epoll still reports it).
    Returns the callbacks in the order they ran."""
    d = cls()
    pairs = [socket.socketpair() for _ in range(count)]
    kept: list[int] = []
    seen: list[tuple[str, int]] = []
    try:
        for i, (a, b) in enumerate(pairs):
            b.send(b"x")
            d.on_readable(a, lambda cid, s, i=i: seen.append(("r", i)))
            d.on_writable(a, lambda cid, s, i=i: seen.append(("w", i)))
        ticks = [0]

        def tick(cid: str) -> None:
            seen.append(("tick", ticks[0]))
            ticks[0] += 1
            if ticks[0] == 1 and close_one:
                closed = pairs[count // 2][0]
                kept.append(os.dup(closed.fileno()))
                closed.close()  # its callbacks are still registered
            if ticks[0] == 3:
                d.stop()

        d.repeat(0, tick)
        d.set_error_handler(lambda exc: seen.append((type(exc).__name__, -1)))
        d.run()
        return seen
    finally:
        for a, b in pairs:
            a.close()
            b.close()
        for fd in kept:
            os.close(fd)


@both
def test_many_ready_streams_in_one_tick(cls: type) -> Any:
    """More ready watchers than the C wait() holds without a list (256): each callback
    runs once per tick, in the same order on both drivers."""
    seen = _ready_streams(cls, 300, close_one=False)
    assert len(seen) == 3 + 3 * 600  # every stream's two callbacks, each tick
    return seen


@both
def test_a_stream_closed_under_its_callbacks_among_ready_ones(cls: type) -> Any:
    """A report that needs care (its stream was closed) sends the C wait() down the
    general path, whose list the poll walks: the same callbacks run, the lost stream's
    reported to the error handler, on both drivers."""
    seen = _ready_streams(cls, 40, close_one=True)
    assert ("InvalidCallbackError", -1) in seen
    return seen


@needs_c
def test_the_watchers_of_a_tick_keep_their_reference_counts() -> None:
    """wait_each() hands each watcher over and lets go of it: no watcher gains or loses
    a reference over many ticks."""
    import iopoll

    d = IoPollDriver()
    a, b = socket.socketpair()
    try:
        b.send(b"x")
        d.on_readable(a, lambda cid, s: None)
        count = [0]

        def tick(cid: str) -> None:
            count[0] += 1
            if count[0] == 500:
                d.stop()

        first = d.defer(lambda cid: d.stop())
        d.run()  # the stream's watcher is in the Context now
        assert first not in d.get_identifiers()
        watcher = d._entries[a.fileno()].token
        assert isinstance(watcher, iopoll.Watcher)
        before = sys.getrefcount(watcher)
        d.repeat(0, tick)
        d.run()
        assert count[0] == 500
        assert sys.getrefcount(watcher) == before
    finally:
        a.close()
        b.close()


@needs_c
def test_a_subclass_clock_and_poll_are_obeyed() -> None:
    """The C dispatch reads the clock and polls through the driver's own methods when a
    subclass overrides them."""
    polls: list[float] = []

    class Driver(IoPollDriver):
        def _now(self) -> float:
            return 42.0

        def _poll(self, timeout: float) -> None:
            polls.append(timeout)
            super()._poll(timeout)

    d = Driver()
    d.delay(1.0, lambda cid: None)
    assert d._timers == [] and d._enable_queue[0].expiration == 43.0
    d.defer(lambda cid: d.stop())
    d.run()
    assert polls == [0.0]


@needs_c
def test_the_c_methods_are_on_the_public_classes_only() -> None:
    from iopoll.loop import _speedups

    names = _speedups.method_names()
    assert {"defer", "delay", "repeat", "_loop", "_tick", "_drain"} <= set(names)
    for name in names:
        assert type(vars(IoPollDriver)[name]).__name__ == "method_descriptor", name
        assert type(vars(SelectorsDriver)[name]).__name__ == "method_descriptor", name
        owner = next(c for c in PyIoPollDriver.__mro__ if name in vars(c))
        assert type(vars(owner)[name]).__name__ == "function", name
    # IoPollDriver's own hooks of the poll, and not SelectorsDriver's.
    for name in ("_wait", "_queue_ready"):
        assert type(vars(IoPollDriver)[name]).__name__ == "method_descriptor", name
        assert name not in vars(SelectorsDriver), name
        assert type(vars(PyIoPollDriver)[name]).__name__ == "function", name


@needs_c
def test_install_refuses_what_it_cannot_serve() -> None:
    from iopoll.loop import _speedups
    from iopoll.loop._suspension import LoopRunner

    with pytest.raises(TypeError, match="three classes"):
        _speedups.install(IoPollDriver)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="not a subclass"):
        _speedups.install(int, AbstractDriver, LoopRunner)
    with pytest.raises(RuntimeError, match="another AbstractDriver"):
        _speedups.install(IoPollDriver, IoPollDriver, LoopRunner)


@needs_c
def test_records_and_drivers_are_freed() -> None:
    """Nothing the C code touches stays alive after the driver is dropped (cycles included:
    a callback that refers to its driver)."""

    class Marker:
        pass

    def run_one() -> tuple[weakref.ref[IoPollDriver], weakref.ref[Marker]]:
        d = IoPollDriver()
        marker = Marker()

        def first(cid: str) -> None:
            d.delay(0, lambda cid: None)

        d.defer(first)
        d.repeat(0.001, lambda cid: d.cancel(cid))
        # Pending for ever, unreferenced: a cycle through the timer heap and the closure.
        d.unreference(d.delay(math.inf, lambda cid, kept=marker: d.stop()))
        d.run()
        assert len(d._timers) == 1
        d.close()
        return weakref.ref(d), weakref.ref(marker)

    gone, kept = run_one()
    gc.collect()
    assert gone() is None and kept() is None


@needs_c
def test_reference_counts_hold_over_many_ticks() -> None:
    """The ids, records and the callback keep the reference counts Python gives them."""
    d = IoPollDriver()

    def callback(cid: str) -> None:
        pass

    before = sys.getrefcount(callback)
    for _ in range(200):
        d.defer(callback)
        d.delay(0, callback)
    d.repeat(0, lambda cid: d.cancel(cid) if len(d.get_identifiers()) else None)
    d.run()
    assert sys.getrefcount(callback) == before
    assert d._live == 0 and not d._index() and not d._timers


@needs_c
def test_records_made_in_c_are_subclasses_of_the_python_classes() -> None:
    from iopoll.loop._callbacks import DeferCallback, DelayCallback, RepeatCallback

    d = IoPollDriver()
    made = {
        DeferCallback: d.defer(lambda cid: None),
        DelayCallback: d.delay(1, lambda cid: None),
        RepeatCallback: d.repeat(1, lambda cid: None),
    }
    for python_class, callback_id in made.items():
        kind = type(d._index()[callback_id])
        assert kind.__module__ == "iopoll.loop._speedups", kind
        assert kind.__name__ == python_class.__name__ and kind.__bases__ == (python_class,)
        assert not hasattr(d._index()[callback_id], "__dict__")
    d.close()


@pytest.mark.parametrize("kind", ["defer", "delay", "repeat"])
@pytest.mark.parametrize("cls", [PyIoPollDriver, IoPollDriver], ids=["pure", "c"])
def test_a_cycle_through_one_record_is_collected(cls: type[Any], kind: str) -> None:
    """The C records' own garbage-collector walk (``_records.c``) finds their function and
    their heap entry: a driver held only by a pending callback's closure, or by a timer in
    the heap, is collected."""

    class Owner:
        driver: Any = None

    def make() -> weakref.ref[Owner]:
        owner = Owner()
        d = owner.driver = cls()

        def fn(cid: str, owner: Owner = owner) -> None:
            pass

        if kind == "defer":
            d.defer(fn)
        else:
            (d.repeat if kind == "repeat" else d.delay)(3600, fn)
            d.defer(lambda cid: d.stop())
            d.run()  # activated: in the heap, an entry that refers back to the record
            assert d._timers
        return weakref.ref(owner)

    gone = make()
    gc.collect()
    assert gone() is None


@pytest.mark.parametrize("kind", ["delay", "repeat"])
@pytest.mark.parametrize("cls", [PyIoPollDriver, IoPollDriver], ids=["pure", "c"])
def test_an_armed_timer_of_a_driver_freed_between_full_collections_is_freed(
    cls: type[Any], kind: str
) -> None:
    """A driver dropped with a timer in its heap, freed by its last reference or a young
    collection (never seen by the full collection that tracks its records): the timer
    and its heap entry, a cycle, go at the next collection with what the callback holds.
    The C records' cycle was invisible to the collector (a C record starts untracked): 99%
    of such drivers' callbacks stayed alive for good."""

    class Held:
        pass

    def make() -> weakref.ref[Held]:
        held = Held()
        d = cls()

        def fn(cid: str, held: Held = held) -> None:
            pass

        (d.repeat if kind == "repeat" else d.delay)(3600, fn)
        d.defer(lambda cid: d.stop())
        d.run()  # activated: in the heap, an entry that refers back to the record
        assert d._timers
        d.close()
        return weakref.ref(held)

    refs = [make() for _ in range(50)]  # the drivers go with young collections, or at once
    gc.collect()
    assert sum(ref() is not None for ref in refs) == 0


@needs_c
@pytest.mark.skipif(sys.implementation.name != "cpython", reason="reads CPython's structs")
def test_the_deque_methods_are_called_directly() -> None:
    """The run queue's ``popleft``/``append``/``extend``, and ``iopoll.Context.wait`` where
    iopoll's own C accelerator is in use, are called through their C functions, read from
    CPython's method descriptors after a check of their names and flags: a change of that
    struct turns the direct calls off, and this fails."""
    import iopoll._native
    from iopoll.loop import _speedups

    wait = ("Context.wait",) if iopoll._native.ACCELERATED else ()
    assert _speedups.direct_calls() == ("deque.popleft", "deque.append", "deque.extend", *wait)


@needs_c
def test_a_context_wait_put_on_the_class_later_is_the_one_called() -> None:
    """The C poll calls ``Context.wait``'s C function only while the class still has it: a
    wait() put on the class (a tracer's, a test's) is called instead, by name, and the C
    one again once it is taken off."""
    import iopoll

    calls: list[object] = []
    original = iopoll.Context.__dict__["wait"]

    def traced(self: iopoll.Context, *args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return original(self, *args, **kwargs)

    def round_trips(d: IoPollDriver, a: socket.socket, b: socket.socket, count: int) -> int:
        seen = [0]

        def echo(cid: str, stream: object) -> None:
            b.send(b.recv(16))

        def pong(cid: str, stream: object) -> None:
            a.recv(16)
            seen[0] += 1
            if seen[0] == count:
                d.stop()
            else:
                a.send(b"x")

        ids = [d.on_readable(b, echo), d.on_readable(a, pong)]
        a.send(b"x")
        d.run()
        for callback_id in ids:
            d.cancel(callback_id)
        return seen[0]

    a, b = socket.socketpair()
    try:
        d = IoPollDriver()
        iopoll.Context.wait = traced  # type: ignore[method-assign]
        try:
            assert round_trips(d, a, b, 5) == 5
        finally:
            iopoll.Context.wait = original  # type: ignore[method-assign]
        assert len(calls) >= 10  # at least a wait per callback, all through the tracer
        del calls[:]
        assert round_trips(d, a, b, 5) == 5
        assert calls == []  # the C wait() again, called directly
    finally:
        a.close()
        b.close()


@needs_c
@pytest.mark.parametrize("run", [True, False], ids=["run", "never-run"])
def test_a_long_chain_of_records_is_freed_one_by_one(run: bool) -> None:
    """Records whose callbacks each hold the record before them are all freed, without
    overflowing the C stack: run, each lets go of its function as its id dies; never run,
    the whole chain goes with the driver.  (Each link runs through a function's defaults
    tuple, whose destructor takes CPython's trashcan, so this does not show whether the C
    records' destructor takes it too, as it does, like the generic one it replaces.)"""

    class Freed:
        count = 0

        def __del__(self) -> None:
            Freed.count += 1

    d = IoPollDriver()
    previous: Any = Freed()
    for _ in range(100_000):
        d.defer(lambda cid, held=previous: None)
        previous = d._unindexed[-1]  # the record, left out of the id map
    if run:
        d.run()
        assert Freed.count == 1  # the first record let go of it as it ran
        assert not d._index() and not d._unindexed
    else:
        d.close()
        del d
    del previous
    gc.collect()  # the driver is in cycles of its own (its Context's callbacks)
    assert Freed.count == 1


def test_the_extension_builds_every_c_file_of_the_loop() -> None:
    """pyproject.toml lists each source; the sanitizers' build takes the directory's files.
    The extension is optional, so a file left out of the list would only make it pure."""
    tomllib = pytest.importorskip("tomllib")
    root = Path(__file__).resolve().parent.parent
    with open(root / "pyproject.toml", "rb") as f:
        modules = tomllib.load(f)["tool"]["setuptools"]["ext-modules"]
    (loop,) = [m for m in modules if m["name"] == "iopoll.loop._speedups"]
    on_disk = sorted(p.relative_to(root).as_posix() for p in (root / "src/iopoll/loop").glob("*.c"))
    assert sorted(loop["sources"]) == on_disk
