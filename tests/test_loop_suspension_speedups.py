"""The suspension round trip in C (``iopoll/loop/_suspend.c``) against the Python reference.

An accelerated driver (``IoPollDriver``, ``SelectorsDriver``) makes a ``NativeLoopRunner``,
which hands out ``NativeSuspension`` objects: ``suspend()``, ``resume()``, ``_switch_in()``,
``suspension()``, ``hand_over()`` and ``_loop_main()`` are C there, and Python on the pure
drivers' ``LoopRunner`` and ``Suspension``.  The behaviour tests (``test_loop_suspensions.py``'s
``TestSuspension``) run on both; here a Hypothesis test replays random schedules of
suspensions through a pure and a C driver side by side and compares everything they log,
and the targeted tests pin the errors, the arguments and the references.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iopoll.loop import IoPollDriver, SelectorsDriver, Suspension, UncaughtError
from iopoll.loop._iopoll_driver import ACCELERATED, PyIoPollDriver
from iopoll.loop._native_dispatch import NativeLoopRunner, NativeSuspension
from iopoll.loop._selectors_driver import PySelectorsDriver
from iopoll.loop._suspension import LoopRunner
from iopoll_conformance.process import within

greenlet = pytest.importorskip("greenlet")

needs_c = pytest.mark.skipif(not ACCELERATED, reason="iopoll.loop._speedups is not in use")

PAIRS = [
    pytest.param(PyIoPollDriver, IoPollDriver, id="iopoll"),
    pytest.param(PySelectorsDriver, SelectorsDriver, id="selectors"),
]
BOTH = [
    pytest.param(PyIoPollDriver, id="pure"),
    pytest.param(IoPollDriver, id="c"),
]

C_METHODS = {
    NativeSuspension: ("suspend", "resume", "_switch_in"),
    NativeLoopRunner: ("suspension", "hand_over", "_loop_main"),
}


@needs_c
def test_accelerated_drivers_hand_out_native_suspensions() -> None:
    for cls in (IoPollDriver, SelectorsDriver):
        d = cls()
        assert type(vars(cls)["get_suspension"]).__name__ == "method_descriptor"
        assert type(d._runner) is NativeLoopRunner
        assert type(d.get_suspension()) is NativeSuspension
    for native, names in C_METHODS.items():
        for name in names:
            assert type(vars(native)[name]).__name__ == "method_descriptor", name
            assert type(vars(native.__mro__[1])[name]).__name__ == "function", name
    for pure in (PyIoPollDriver, PySelectorsDriver):
        d = pure()
        assert type(d._runner) is LoopRunner
        assert type(d.get_suspension()) is Suspension


# -- one random schedule, replayed through both ---------------------------------------------

# A task suspends some times; each suspension is woken by a resume or a throw, from a
# defer, a zero delay or a microtask.  It runs in a callback, a microtask or a greenlet of
# its own, or (the last task only) in the main greenlet.
WAKE = st.tuples(st.sampled_from(["resume", "throw"]), st.sampled_from(["defer", "delay", "queue"]))
TASK = st.tuples(st.sampled_from(["callback", "microtask", "greenlet"]), st.lists(WAKE, max_size=4))
SCHEDULE = st.tuples(st.lists(TASK, min_size=1, max_size=5), st.lists(WAKE, max_size=3))


def _replay(cls: type, schedule: tuple[list[Any], list[Any]]) -> list[object]:
    tasks, main_wakes = schedule
    d = cls()
    log: list[object] = []

    def waker(where: str, fn: Callable[[], None]) -> None:
        if where == "defer":
            d.defer(lambda cid: fn())
        elif where == "delay":
            d.delay(0, lambda cid: fn())
        else:
            d.queue(fn)

    def run_task(name: str, wakes: list[tuple[str, str]]) -> None:
        suspension = d.get_suspension()
        assert d.get_suspension() is suspension
        for i, (how, where) in enumerate(wakes):
            label = f"{name}.{i}"
            if how == "resume":
                waker(where, lambda label=label: suspension.resume(label))
            else:
                waker(where, lambda label=label: suspension.throw(KeyError(label)))
            try:
                log.append(("resumed", suspension.suspend()))
            except KeyError as exc:
                log.append(("thrown", exc.args[0]))
            except RuntimeError as exc:  # main, when the loop ends first (a microtask waker)
                log.append(("ended", str(exc)))
                break
            log.append(repr(suspension))
        log.append(("done", name))

    for n, (kind, wakes) in enumerate(tasks):
        name = f"t{n}"
        if kind == "callback":
            d.defer(lambda cid, name=name, wakes=wakes: run_task(name, wakes))
        elif kind == "microtask":
            d.queue(run_task, name, wakes)
        else:
            task = greenlet.greenlet(lambda name=name, wakes=wakes: run_task(name, wakes))
            d.defer(lambda cid, task=task: _discard(task.switch()))
    d.defer(lambda cid: log.append("tick"))
    if main_wakes:
        run_task("main", main_wakes)  # runs the loop from the main greenlet's suspend()
    try:
        d.run()
    except UncaughtError as exc:
        log.append(("uncaught", repr(exc.__cause__)))
    return log


def _discard(*results: object) -> None:
    """Callbacks must return None: swallow what a greenlet's switch returned."""


@pytest.mark.parametrize(("pure", "native"), PAIRS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedule=SCHEDULE)
def test_random_schedules_run_alike(pure: type, native: type, schedule: Any) -> None:
    # within(): a driver that spins fails the example instead of hanging the run.
    expected = within(10, lambda: _replay(pure, schedule), "the pure replay")
    assert within(10, lambda: _replay(native, schedule), "the C replay") == expected


# -- the errors, the arguments and the references, on both -----------------------------------


def _in_callback(d: Any, fn: Callable[[], None]) -> None:
    d.defer(lambda cid: fn())
    d.run()


@pytest.mark.parametrize("cls", BOTH)
def test_errors_read_alike(cls: type) -> None:
    d = cls()
    errors: list[str] = []

    def catch(fn: Callable[[], object]) -> None:
        try:
            fn()
        except (RuntimeError, TypeError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")

    def body() -> None:
        suspension = d.get_suspension()
        catch(suspension.resume)  # before suspend()
        catch(lambda: suspension.throw("not an exception"))  # type: ignore[arg-type]
        other = greenlet.greenlet(lambda: catch(suspension.suspend))
        other.switch()  # from another greenlet
        suspension._pending = True
        catch(suspension.suspend)  # twice
        suspension._pending = False
        suspension._dead = True
        catch(suspension.suspend)
        suspension.resume("ignored")  # on a dead suspension: nothing happens

    _in_callback(d, body)
    assert errors == [
        "RuntimeError: Must call suspend() before calling resume()",
        "TypeError: exc must be an exception instance, not str",
        "RuntimeError: Must not call suspend() from another greenlet",
        "RuntimeError: Must call resume() or throw() before calling suspend() again",
        "RuntimeError: Suspension is dead: the event loop ended without resuming it",
    ]


@pytest.mark.parametrize("cls", BOTH)
def test_resume_arguments(cls: type) -> None:
    d = cls()
    log: list[object] = []

    def body() -> None:
        suspension = d.get_suspension()
        d.defer(lambda cid: suspension.resume(value="by keyword"))
        log.append(suspension.suspend())
        d.defer(lambda cid: suspension.resume())
        log.append(suspension.suspend())
        for bad in (lambda: suspension.resume(1, 2), lambda: suspension.resume(other=1)):
            with pytest.raises(TypeError):
                bad()

    _in_callback(d, body)
    assert log == ["by keyword", None]


@pytest.mark.parametrize("cls", BOTH)
def test_a_deferred_bound_resume_passes_the_id(cls: type) -> None:
    d = cls()
    log: list[object] = []

    def body() -> None:
        suspension = d.get_suspension()
        callback_id = d.defer(suspension.resume)
        log.append(suspension.suspend() == callback_id)

    _in_callback(d, body)
    assert log == [True]


@pytest.mark.parametrize("cls", BOTH)
def test_no_reference_is_leaked_or_lost(cls: type) -> None:
    d = cls()
    value, error = object(), KeyError("thrown")
    before = sys.getrefcount(value), sys.getrefcount(error)

    def body() -> None:
        suspension = d.get_suspension()
        for _ in range(200):  # the suspension outlives the loop: it may keep nothing
            d.defer(lambda cid: suspension.throw(error))
            with pytest.raises(KeyError):
                suspension.suspend()
            error.__traceback__ = None
            d.defer(lambda cid: suspension.resume(value))
            assert suspension.suspend() is value

    _in_callback(d, body)
    gc.collect()
    assert (sys.getrefcount(value), sys.getrefcount(error)) == before
