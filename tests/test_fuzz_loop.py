"""Fuzzing ``iopoll.loop`` (SPEC 9.1) on ``IoPollDriver`` and ``SelectorsDriver``.

``LoopMachine`` registers callbacks of every kind with valid and invalid delays, intervals,
streams, signal numbers and ``fn`` values (non-callables, ``async def``, callables that
return a value or raise), and works ids (live, cancelled, unknown, not strings) through
``enable``/``disable``/``cancel``/``reference``/``unreference`` and the getters.  A model of
the callbacks says what each call must do, and what one tick of ``run()`` runs: a bad call
raises only what SPEC names (``TypeError``, ``ValueError``, ``InvalidCallbackError``) and
leaves the ids, their state and the signal handlers as they were; ``run()`` runs exactly the
callbacks the model expects, each with its arguments, and hands their errors to the error
handler.  Values that run into an open bug (``fuzz_strategies.KNOWN_BUGS``) have their own
tests below, marked ``xfail``.
"""

from __future__ import annotations

import collections
import math
import os
import signal
import socket
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, ClassVar

import pytest
from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    rule,
    run_state_machine_as_test,
)

import fuzz_strategies as fz
from iopoll.loop import (
    CallbackType,
    Driver,
    InvalidCallbackError,
    IoPollDriver,
    SelectorsDriver,
)
from iopoll.loop._iopoll_driver import PyIoPollDriver

DRIVERS: dict[str, Any] = {
    "iopoll": IoPollDriver,
    "selectors": SelectorsDriver,
    "iopoll-pure": PyIoPollDriver,  # the reference the C dispatch is held to
}
KINDS = ["defer", "delay", "repeat", "on_readable", "on_writable", "on_signal"]
TYPES = {
    "defer": CallbackType.DEFER,
    "delay": CallbackType.DELAY,
    "repeat": CallbackType.REPEAT,
    "on_readable": CallbackType.READABLE,
    "on_writable": CallbackType.WRITABLE,
    "on_signal": CallbackType.SIGNAL,
}
ID_METHODS = [
    "enable",
    "disable",
    "cancel",
    "reference",
    "unreference",
    "get_type",
    "is_enabled",
    "is_referenced",
]
# The id methods SPEC 9.1 lets raise for an unknown id; the others ignore it.
RAISING = {"enable", "reference", "get_type", "is_enabled", "is_referenced"}
NEVER_DUE = 10**6  # added to a small positive delay: it must not fire during a test


class Wrapper:
    """An honest object with ``fileno()``."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def fileno(self) -> int:
        """The socket's fd."""
        return self.sock.fileno()


@dataclass(eq=False)
class Cb:
    """What SPEC says one registered callback is."""

    id: str
    kind: str
    spec: fz.CallbackSpec
    arg: Any = None  # the second argument of its calls (stream, signum), if any
    due: bool = False  # a timer that is due at the next tick (0 seconds)
    enabled: bool = True
    referenced: bool = True


@dataclass
class Calls:
    """Every call of a machine's callbacks, by the token given to ``make_callback``."""

    made: list[tuple[str, tuple[object, ...]]] = field(default_factory=list)

    def recorder(self, token: str) -> Any:
        """A function that records one call's arguments under ``token``."""
        return lambda args: self.made.append((token, args))


class LoopMachine(RuleBasedStateMachine):
    """Valid and invalid driver calls against a model of the callbacks."""

    driver_type: ClassVar[type[Driver]] = IoPollDriver

    def __init__(self) -> None:
        super().__init__()
        self.driver: Any = None
        self.callbacks: dict[str, Cb] = {}
        self.dead: list[str] = []  # ids that were live once
        self.microtasks: list[str] = []
        self.calls = Calls()
        self.tokens = 0
        self.errors: list[Exception] = []
        self.pairs = [socket.socketpair() for _ in range(2)]
        self.closed_sock = socket.socket()
        self.closed_sock.close()
        self.handlers = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGUSR2)}
        self.signal_sent: int | None = None
        self.tokens_of: dict[str, str] = {}  # token -> id, for registered callbacks
        self.queued_args: dict[str, tuple[object, ...]] = {}
        self.microtask_outcomes: dict[str, str] = {}

    @initialize()
    def start(self) -> None:
        """A fresh driver, with the recording error handler."""
        self.driver = self.driver_type()
        self.driver.set_error_handler(self.errors.append)

    def teardown(self) -> None:
        """Cancel every callback, close the driver; the signal handlers must be back."""
        if self.driver is not None:
            for cid in list(self.callbacks):
                self.driver.cancel(cid)
            self.driver.close()
        for pair in self.pairs:
            for sock in pair:
                sock.close()
        for signum, handler in self.handlers.items():
            assert signal.getsignal(signum) is handler, "signal handler not restored"

    # -- helpers ----------------------------------------------------------------------------------

    def token(self) -> str:
        """A new token, naming one callable made by the machine."""
        self.tokens += 1
        return f"t{self.tokens}"

    def state(self) -> tuple[Any, ...]:
        """What the driver shows of its callbacks, and the process's signal handlers."""
        d = self.driver
        ids = sorted(d.get_identifiers())
        info = tuple((i, d.get_type(i), d.is_enabled(i), d.is_referenced(i)) for i in ids)
        return info, d.get_error_handler(), tuple(signal.getsignal(s) for s in self.handlers)

    def expected_ids(self) -> list[str]:
        """The ids the model says are live."""
        return sorted(self.callbacks)

    def failing(self, call: str, run: Any, allowed: fz.Faults, names: Any = ()) -> Any:
        """Run a call that must fail with one of ``allowed``; the driver's state must not move."""
        return fz.check_fails_unchanged(
            self.state, run, allowed, call=call, names=names, what="the driver's state"
        )

    def stream_for(self, recipe: fz.StreamRecipe, sock: socket.socket) -> Any:
        """The ``stream`` argument a recipe stands for, on ``sock``."""
        if recipe.kind == "socket":
            return sock
        if recipe.kind == "int":
            return sock.fileno()
        if recipe.kind == "object":
            return Wrapper(sock)
        if recipe.kind == "closed":
            return self.closed_sock
        if recipe.kind == "script":
            return fz.Scripted(recipe.script)
        return recipe.value

    # -- registration -----------------------------------------------------------------------------

    @rule(
        kind=st.sampled_from(KINDS),
        spec=fz.callback_specs(),
        seconds=fz.seconds_values,
        stream=fz.stream_recipes(),
        which=st.integers(0, 1),
        signum=fz.signum_values,
    )
    def register(
        self,
        kind: str,
        spec: fz.CallbackSpec,
        seconds: Any,
        stream: fz.StreamRecipe,
        which: int,
        signum: Any,
    ) -> None:
        """Register a callback of any kind with any arguments: refused as SPEC says, or done."""
        token = self.token()
        fn = fz.make_callback(spec, self.calls.recorder(token))
        faults = set(spec.faults)
        names: list[str] = ["callback", "fn"]
        arg: Any = None
        due = False
        if kind in ("delay", "repeat"):
            faults |= fz.seconds_faults(seconds)
            names.append("seconds" if kind == "delay" else "interval")
            if not faults:
                if seconds > 0 and seconds < 1000:
                    seconds = seconds + NEVER_DUE  # never due while the test runs
                due = seconds == 0
            args: tuple[Any, ...] = (seconds, fn)
        elif kind in ("on_readable", "on_writable"):
            arg = self.stream_for(stream, self.pairs[which][0])
            faults |= stream.faults
            names.append("stream")
            args = (arg, fn)
        elif kind == "on_signal":
            faults |= fz.signum_faults(signum)
            names.append("signum")
            arg = signum
            args = (signum, fn)
        else:
            args = (fn,)
        call = f"{kind}{args!r}"
        if faults:
            self.failing(call, lambda: getattr(self.driver, kind)(*args), frozenset(faults), names)
            return
        outcome = fz.attempt(lambda: getattr(self.driver, kind)(*args))
        cid = fz.check_succeeded(outcome, call=call)
        assert type(cid) is str and cid not in self.callbacks and cid not in self.dead, cid
        self.callbacks[cid] = Cb(cid, kind, spec, arg, due)
        self.tokens_of[token] = cid
        assert self.driver.get_type(cid) is TYPES[kind]
        assert self.driver.is_enabled(cid) and self.driver.is_referenced(cid)

    @rule(
        kind=st.sampled_from(["defer", "delay", "repeat", "on_writable", *KINDS]),
        spec=fz.good_callback_specs,
        seconds=st.sampled_from([0, 0.0, -0.0, 0, 10**6, 1e300, math.inf, Fraction(0)]),
        stream=st.sampled_from([r for r in fz.STREAM_RECIPES if not r.faults]),
        which=st.integers(0, 1),
        signum=st.sampled_from([signal.SIGUSR1, signal.SIGUSR2]),
    )
    def register_valid(self, **arguments: Any) -> None:
        """The registrations a useful run needs most: valid ones (``register()`` with
        arguments drawn from valid values only)."""
        self.register(**arguments)

    @rule(
        spec=fz.callback_specs().filter(lambda s: s.outcome != "coroutine"),
        args=st.lists(st.integers(), max_size=2),
    )
    def queue(self, spec: fz.CallbackSpec, args: list[int]) -> None:
        """``queue(fn, *args)``: a microtask for the next run, or a TypeError for a bad fn."""
        token = self.token()
        fn = fz.make_callback(spec, self.calls.recorder(token))
        call = f"queue({spec!r}, *{args!r})"
        if spec.faults:
            self.failing(call, lambda: self.driver.queue(fn, *args), spec.faults, ("fn",))
            return
        fz.check_succeeded(fz.attempt(lambda: self.driver.queue(fn, *args)), call=call)
        self.microtasks.append(token)
        self.queued_args[token] = tuple(args)
        self.microtask_outcomes[token] = spec.outcome  # a returned value is ignored

    # -- ids --------------------------------------------------------------------------------------

    @rule(
        method=st.sampled_from(ID_METHODS),
        source=st.sampled_from(["live", "live", "live", "dead", "unknown", "not-a-string"]),
        index=st.integers(0, 100),
        unknown=fz.unknown_ids,
        other=fz.non_string_ids,
    )
    def id_call(self, method: str, source: str, index: int, unknown: str, other: Any) -> None:
        """An id method with a live, cancelled, unknown or non-string id, as SPEC 9.1 says."""
        if source == "live" and self.callbacks:
            cid: Any = sorted(self.callbacks)[index % len(self.callbacks)]
        elif source == "dead" and self.dead:
            cid = self.dead[index % len(self.dead)]
        elif source == "not-a-string":
            cid = other
        else:
            cid = unknown
            if cid in self.callbacks:
                return
        run = lambda: getattr(self.driver, method)(cid)  # noqa: E731
        call = f"{method}({cid!r})"
        live = self.callbacks.get(cid) if isinstance(cid, str) else None
        if live is None:
            # Unknown: SPEC 9.1 says which raise; a non-string may also be a TypeError.
            allowed: set[type[BaseException]] = set()
            if method in RAISING:
                allowed.add(InvalidCallbackError)
            if not isinstance(cid, str):
                allowed.add(TypeError)
            before = self.state()
            outcome = fz.attempt(run)
            if outcome.raised or method in RAISING:
                fz.check_raised(outcome, frozenset(allowed), call=call)
                if isinstance(outcome.error, InvalidCallbackError):
                    assert outcome.error.callback_id == cid
            else:
                assert outcome.result == (None if method == "cancel" else cid), call
            assert self.state() == before, f"{call} changed the driver's state"
            return
        result = fz.check_succeeded(fz.attempt(run), call=call)
        if method == "get_type":
            assert result is TYPES[live.kind]
        elif method == "is_enabled":
            assert result is live.enabled
        elif method == "is_referenced":
            assert result is live.referenced
        elif method == "cancel":
            assert result is None
            del self.callbacks[cid]
            self.dead.append(cid)
        else:
            assert result == cid, call
            if method == "enable":
                live.enabled = True
            elif method == "disable":
                live.enabled = False
            elif method == "reference":
                live.referenced = True
            else:
                live.referenced = False

    @rule(
        handler=st.one_of(
            st.just("recorder"), st.none(), st.sampled_from([1, "h", object(), fz.Junk()])
        )
    )
    def set_error_handler(self, handler: Any) -> None:
        """A non-callable is a ``TypeError`` (the old handler stays); ``None`` or a callable
        is taken and the previous one returned."""
        if handler == "recorder":
            handler = self.errors.append
        elif handler is not None:
            self.failing(
                f"set_error_handler({handler!r})",
                lambda: self.driver.set_error_handler(handler),
                frozenset({TypeError}),
                ("handler",),
            )
            return
        previous = self.driver.set_error_handler(handler)
        assert previous == self.errors.append
        assert self.driver.get_error_handler() is handler
        assert self.driver.set_error_handler(self.errors.append) is handler

    # -- running ----------------------------------------------------------------------------------

    @rule(signum=st.sampled_from([signal.SIGUSR1, signal.SIGUSR2]))
    def send_signal(self, signum: int) -> None:
        """Deliver a signal some callback (enabled or not) holds a handler for."""
        if self.signal_sent or not any(
            c.kind == "on_signal" and c.arg == signum for c in self.callbacks.values()
        ):
            return  # with no callback the default action would end the process
        os.kill(os.getpid(), signum)
        self.signal_sent = signum

    @rule()
    def run_one_tick(self) -> None:
        """``run()`` until a deferred ``stop()``: one tick, whose callbacks the model names."""
        expected: list[tuple[str, tuple[object, ...]]] = []
        by_token = {cid: token for token, cid in self.tokens_of.items()}
        for token in self.microtasks:
            expected.append((token, self.queued_args[token]))
        ran: list[Cb] = []
        for cb in self.callbacks.values():
            if not cb.enabled:
                continue
            timer_due = cb.kind in ("delay", "repeat") and cb.due
            signalled = cb.kind == "on_signal" and cb.arg == self.signal_sent
            if cb.kind in ("defer", "on_writable") or timer_due or signalled:
                ran.append(cb)
        for cb in ran:
            expected.append((by_token[cb.id], (cb.id,) if cb.arg is None else (cb.id, cb.arg)))
        stopper = self.driver.defer(lambda cid: self.driver.stop())
        del self.calls.made[:]
        del self.errors[:]
        with fz.hang_guard(10):
            outcome = fz.attempt(self.driver.run)
        fz.check_succeeded(outcome, call="run()")
        assert not self.driver.is_running()
        note(f"ran {self.calls.made!r}")
        assert collections.Counter(self.calls.made) == collections.Counter(expected), (
            f"run() made {self.calls.made!r}, the model expected {expected!r}"
        )
        # Errors go to the handler: a non-None return is an InvalidCallbackError (a
        # returned coroutine closed first), an exception itself.
        expected_errors: collections.Counter[str] = collections.Counter()
        for token in self.microtasks:
            outcome_kind = self.microtask_outcomes[token]
            if outcome_kind == "raise":
                expected_errors["LookupError"] += 1
        for cb in ran:
            if cb.spec.outcome == "raise":
                expected_errors["LookupError"] += 1
            elif cb.spec.outcome in ("value", "coroutine"):
                expected_errors["InvalidCallbackError"] += 1
        got = collections.Counter(type(e).__name__ for e in self.errors)
        assert got == expected_errors, f"errors {self.errors!r}, expected {expected_errors}"
        for error in self.errors:
            if isinstance(error, InvalidCallbackError):
                assert error.callback_id in {cb.id for cb in ran}
        self.microtasks = []
        self.signal_sent = None
        for cb in ran:
            if cb.kind in ("defer", "delay"):
                del self.callbacks[cb.id]
                self.dead.append(cb.id)
        assert stopper not in self.driver.get_identifiers()
        self.dead.append(stopper)

    @rule()
    def check_state(self) -> None:
        """The driver's ids, types, flags and error handler are the model's."""
        d = self.driver
        assert sorted(d.get_identifiers()) == self.expected_ids()
        for cid, cb in self.callbacks.items():
            assert d.get_type(cid) is TYPES[cb.kind]
            assert d.is_enabled(cid) is cb.enabled
            assert d.is_referenced(cid) is cb.referenced
        assert d.get_error_handler() == self.errors.append
        assert not d.is_running()


MACHINES = {
    name: type(f"LoopMachine_{name}", (LoopMachine,), {"driver_type": driver})
    for name, driver in DRIVERS.items()
}


@pytest.mark.parametrize("name", list(MACHINES))
def test_loop_state_machine(name: str) -> None:
    """The state machine of one driver."""
    run_state_machine_as_test(MACHINES[name], settings=fz.scaled(0.4))


# -- bugs the fuzzer found ------------------------------------------------------------------------


@fz.xfail_bug("loop-huge-fd")
@pytest.mark.parametrize("driver", list(DRIVERS))
@pytest.mark.parametrize("stream", ["int", "object"])
def test_a_huge_fd_is_refused_at_registration_or_breaks_nothing(driver: str, stream: str) -> None:
    """Bug loop-huge-fd: ``on_writable(2**31)`` must be refused (``ValueError``) or run
    without ``run()`` raising."""
    d = DRIVERS[driver]()
    errors: list[Exception] = []
    d.set_error_handler(errors.append)
    try:
        value: Any = 2**31 if stream == "int" else fz.Scripted([2**31])
        outcome = fz.attempt(lambda: d.on_writable(value, lambda cid, s: None))
        if outcome.raised:
            fz.check_raised(outcome, frozenset({ValueError}), call="on_writable(2**31)")
            return
        d.defer(lambda cid: d.stop())
        fz.check_succeeded(fz.attempt(d.run), call="run()")
    finally:
        for cid in d.get_identifiers():
            d.cancel(cid)
        d.close()


@fz.xfail_bug("loop-non-int-fileno")
@pytest.mark.parametrize("driver", list(DRIVERS))
@pytest.mark.parametrize("answer", ["3", None, 3.0, True])
def test_a_fileno_that_is_no_int_is_refused_at_registration(driver: str, answer: Any) -> None:
    """Bug loop-non-int-fileno: a stream whose ``fileno()`` is not an int is refused by
    ``on_readable`` with a ``TypeError`` or ``ValueError`` naming the stream."""
    d = DRIVERS[driver]()
    try:
        outcome = fz.attempt(lambda: d.on_readable(fz.Scripted([answer]), lambda cid, s: None))
        fz.check_raised(
            outcome, frozenset({TypeError, ValueError}), call="on_readable", names=("stream",)
        )
        assert d.get_identifiers() == []
    finally:
        d.close()


@fz.xfail_bug("loop-bogus-code")
@pytest.mark.parametrize("driver", list(DRIVERS))
@pytest.mark.parametrize("method", ["defer", "delay", "repeat", "on_writable", "queue"])
@pytest.mark.parametrize("callable_", [False, True], ids=["not-callable", "callable"])
def test_an_object_with_a_bogus_code_attribute(driver: str, method: str, callable_: bool) -> None:
    """Bug loop-bogus-code: an object whose ``__code__`` is no code object is refused with
    ``TypeError`` when it cannot be called, and taken when it can."""
    d = DRIVERS[driver]()
    a, b = socket.socketpair()
    try:
        fn: Any = fz.BogusCallable() if callable_ else fz.Bogus()
        register = {
            "defer": lambda: d.defer(fn),
            "delay": lambda: d.delay(1.0, fn),
            "repeat": lambda: d.repeat(1.0, fn),
            "on_writable": lambda: d.on_writable(a, fn),
            "queue": lambda: d.queue(fn),
        }[method]
        outcome = fz.attempt(register)
        if callable_:
            fz.check_succeeded(outcome, call=f"{method}(BogusCallable())")
        else:
            fz.check_raised(outcome, frozenset({TypeError}), call=f"{method}(Bogus())")
    finally:
        for cid in d.get_identifiers():
            d.cancel(cid)
        d.close()
        a.close()
        b.close()


def test_fraction_delays_are_numbers() -> None:
    """``numbers.Real`` values other than int and float are seconds too (SPEC 9.1)."""
    d = IoPollDriver()
    try:
        seconds: Any = Fraction(1, 3)
        cid = d.delay(seconds, lambda cid: None)
        assert d.get_type(cid) is CallbackType.DELAY
    finally:
        d.close()
