"""Revolt-style suspensions on greenlet (the optional ``iopoll[greenlet]`` extra), and the
``LoopRunner`` that enters a driver's loop.

A greenlet other than the root one behaves like a PHP Fiber: ``suspend()`` switches back to
whoever started or last resumed it (greenlet's ``parent``, with ``LoopRunner.forward`` for
the case greenlet gets wrong), and ``resume()``/``throw()`` queue a microtask that switches
back into it, so resumption is never re-entrant.  The root greenlet ("main") runs the loop
from ``suspend()``; ``resume()`` makes the loop hand control back to it after the current
callback.  If the loop ends while main is still suspended, ``suspend()`` raises.

All of a driver's greenlet state is one ``LoopRunner``: whether the loop runs, the greenlet
that runs it, and the suspensions handed out.  Callbacks run in the loop greenlet itself, so
a tick costs no switch.  When one suspends, its greenlet keeps the stack, a successor greenlet
takes the loop over (``hand_over()``), and the suspended one, once resumed, finishes its
callback and ends (``Superseded``) instead of running ticks.

This module knows nothing of the driver's classes: the driver hands its runner the three
functions it needs (see ``LoopRunner``).
"""

from __future__ import annotations

import importlib
import threading
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any, ClassVar

from ._errors import UnsupportedFeatureError

__all__ = ["LoopRunner", "Superseded", "Suspension", "greenlet_module"]

# What a loop greenlet whose callback suspends sends to the greenlet that entered the loop,
# which then starts the successor (LoopRunner.hand_over, LoopRunner.enter).
_HAND_OVER = object()
# What deliver() sends there with an interrupt, which it leaves in LoopRunner._delivered.
_DELIVER = object()
_module: ModuleType | bool | None = False  # False: not looked for yet

Microtask = tuple[Callable[..., Any], tuple[Any, ...]]

# The runners whose loop runs in this thread, outermost first: more than one when a callback
# runs another driver's loop (LoopRunner.enter).
_entered = threading.local()


def _entered_runners() -> list[LoopRunner]:
    runners: list[LoopRunner] | None = getattr(_entered, "runners", None)
    if runners is None:
        runners = _entered.runners = []
    return runners


class _Exited:
    """What a loop greenlet returns when a callback's ``GreenletExit`` ended it.

    greenlet takes a ``GreenletExit`` that leaves a greenlet for its quiet end and hands
    the exception to the parent as the greenlet's result.  From a callback it is a
    ``BaseException`` like any other, which leaves ``run()`` (as it does without greenlet);
    wrapped, it is told apart from what a greenlet a callback started returns, whose own
    ``GreenletExit`` stays the quiet end greenlet makes it.
    """

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _raise_if_exited(result: object) -> None:
    """Raise the callback's ``GreenletExit`` that ended a loop greenlet, if ``result``,
    what switching into it returned, says so."""
    if type(result) is _Exited:
        raise result.error


def _not_another_loop(owner: Any, runner: LoopRunner) -> None:
    """Refuse a suspension of ``runner`` in ``owner`` when ``owner`` runs another driver's
    loop: its callback would switch to that loop's entering greenlet, which hands the switch
    back (``forward``), and the two would pass it to and fro for ever, at full CPU."""
    for other in _entered_runners():
        if other is not runner and other.loop is owner:
            raise RuntimeError(
                "Cannot suspend with the suspension of a driver whose loop does not run this "
                "callback: it runs in another driver's loop (use that driver's "
                "get_suspension())"
            )


def greenlet_module() -> ModuleType | None:
    """The ``greenlet`` module, imported on first use; ``None`` when it is not installed."""
    global _module
    if _module is False:
        try:
            _module = importlib.import_module("greenlet")  # no stubs: kept untyped
        except ImportError:
            _module = None
    return _module  # type: ignore[return-value]


def _root(glet: Any) -> Any:
    """The main greenlet of the thread ``glet`` belongs to: the end of its parent chain."""
    while glet.parent is not None:
        glet = glet.parent
    return glet


def _no_greenlet() -> Any:
    raise RuntimeError("greenlet is not in use")


class Superseded(BaseException):
    """Ends a loop greenlet whose callback suspended and was resumed after a successor took over."""


class _Delivered(Superseded):
    """Ends a loop greenlet that handed an exception to ``run()`` (``LoopRunner.deliver``)."""


class Suspension:
    """Suspends the greenlet it belongs to until ``resume()`` or ``throw()`` is called."""

    __slots__ = (
        "_runner",
        "_greenlet",
        "_getcurrent",
        "_main",
        "_pending",
        "_queued",
        "_value",
        "_error",
        "_dead",
    )

    def __init__(self, runner: LoopRunner, owner: Any, *, main: bool) -> None:
        self._runner = runner
        self._greenlet = weakref.ref(owner)
        self._getcurrent: Any = greenlet_module().getcurrent  # type: ignore[union-attr]
        self._main = main
        self._pending = False
        self._queued = False  # resumed; the switch back (_switch_in) queued and not yet run
        self._value: Any = None
        self._error: BaseException | None = None
        self._dead = False

    def suspend(self) -> Any:
        """Wait until resumed; return the ``resume()`` value or raise the ``throw()`` error.

        From the main greenlet this runs the event loop until the suspension is resumed.
        """
        if self._pending:
            raise RuntimeError("Must call resume() or throw() before calling suspend() again")
        owner = self._greenlet()
        if owner is None or self._getcurrent() is not owner:
            raise RuntimeError("Must not call suspend() from another greenlet")
        if self._dead:
            raise RuntimeError("Suspension is dead: the event loop ended without resuming it")
        self._pending = True
        runner = self._runner
        if self._main:
            if runner.running:
                self._pending = False
                raise RuntimeError("Cannot suspend the main greenlet while the loop runs")
            try:
                interrupt = runner.enter()
            except BaseException:
                self._pending = False
                raise
            if interrupt is None:
                self._pending = False
                self._dead = True
                raise RuntimeError(
                    "Event loop terminated without resuming the current suspension (the cause "
                    "is either a deadlock, or an incorrectly unreferenced or cancelled callback)"
                )
            if isinstance(interrupt, BaseException):
                self._pending = False
                raise interrupt
        else:
            # A loop greenlet hands the loop over to a successor; another greenlet goes back
            # to its starter, whose switch() returns None.
            try:
                if owner is runner.loop:
                    sent = runner.hand_over()
                else:
                    _not_another_loop(owner, runner)
                    sent = owner.parent.switch(None)
                while self._pending:
                    # Not a resume (that clears _pending first): a greenlet whose parent is
                    # this one ended or suspended (the note above LoopRunner.forward).
                    sent = runner.forward(sent)
            except BaseException:
                self._pending = False  # it waits no more
                raise
        error, value = self._error, self._value
        self._error = self._value = None
        if error is not None:
            raise error
        return value

    def resume(self, value: Any = None) -> None:
        """Resume the suspended greenlet with ``value`` (after the current callback)."""
        self._wake(value, None)

    def throw(self, exc: BaseException) -> None:
        """Resume the suspended greenlet by raising ``exc`` from its ``suspend()``."""
        if not isinstance(exc, BaseException):
            raise TypeError(f"exc must be an exception instance, not {type(exc).__name__}")
        self._wake(None, exc)

    def _wake(self, value: Any, error: BaseException | None) -> None:
        if not self._pending:
            if self._dead:
                return  # the loop gave up on it: ignored, as Revolt does
            raise RuntimeError("Must call suspend() before calling resume()")
        self._pending = False
        self._value, self._error = value, error
        if self._main:
            self._runner.interrupt(self)
        else:
            self._queued = True
            self._runner.queue((self._switch_in, ()))

    def _switch_in(self) -> None:
        self._queued = False
        owner = self._greenlet()
        if owner is None or owner.dead:
            return
        current = self._getcurrent()
        if owner.parent is not current:
            owner.parent = current  # come back here when it suspends or ends
        _raise_if_exited(owner.switch())

    def __repr__(self) -> str:
        state = "dead" if self._dead else "suspended" if self._pending else "idle"
        return f"<Suspension {'main' if self._main else 'greenlet'} {state}>"


class LoopRunner:
    """Enters one driver's loop (in a loop greenlet when greenlet is installed) and hands out
    that driver's suspensions.

    The driver supplies ``run_loop(fresh)`` (its loop: ticks until stopped, empty or
    interrupted), ``interrupt(value)`` (end the loop after the current callback and hand it
    ``value``, unless an interrupt is pending already) and ``queue((fn, args))`` (append a
    microtask).
    """

    __slots__ = (
        "running",
        "loop",
        "getcurrent",
        "interrupt",
        "queue",
        "_run_loop",
        "_suspensions",
        "_main",
        "_last",
        "_closed",
        "_delivered",
    )

    # What suspension() hands out (a subclass with C methods, for the accelerated drivers).
    _suspension_type: ClassVar[type[Suspension]] = Suspension

    def __init__(
        self,
        run_loop: Callable[[bool], None],
        interrupt: Callable[[object], None],
        queue: Callable[[Microtask], None],
    ) -> None:
        self.running = False  # run(), or a suspend() of the main greenlet, runs the loop
        self.loop: Any = None  # the greenlet running the loop; None until greenlet is used
        self.getcurrent: Callable[[], Any] = _no_greenlet  # greenlet.getcurrent, once in use
        self.interrupt = interrupt
        self.queue = queue
        self._run_loop = run_loop
        self._suspensions: weakref.WeakKeyDictionary[Any, Suspension] | None = None
        self._main: Suspension | None = None  # the root greenlet's suspension
        self._last: Suspension | None = None  # the one handed out last
        self._closed = False  # close() was called: no loop, every suspension dead
        self._delivered: object = None  # deliver()'s interrupt, until enter() takes it

    def run(self) -> None:
        """Run the loop until it ends (``Driver.run()``); raise what interrupted it."""
        if self.running:
            raise RuntimeError("The event loop is already running")
        if greenlet_module() is None:
            self.running = True
            try:
                self._run_loop(True)
            finally:
                self.running = False
            return
        interrupt = self.enter()
        if isinstance(interrupt, BaseException):
            raise interrupt

    def enter(self) -> object:
        """Switch into the loop greenlet (made afresh if none is pending); return its interrupt:
        ``None`` when the loop ended, the main ``Suspension`` it resumed, or an exception."""
        module: Any = greenlet_module()
        self.getcurrent = module.getcurrent
        loop = self.loop
        fresh = loop is None or loop.dead
        if fresh:
            loop = self.loop = module.greenlet(self._loop_main)
        current = module.getcurrent()
        try:
            loop.parent = current
        except ValueError:
            # A cycle (the caller runs inside the loop greenlet), or a greenlet of another
            # thread: each thread's greenlets descend from its own root.
            if _root(loop) is not _root(current):
                raise RuntimeError(
                    "Cannot run the loop in this thread: its loop greenlet waits in the "
                    "thread where a main suspension was resumed; run it there"
                ) from None
            raise RuntimeError("Cannot run the loop from inside one of its callbacks") from None
        self.running = True
        entered = _entered_runners()
        entered.append(self)
        try:
            sent = loop.switch(True) if fresh else loop.switch()
            while True:
                if sent is _HAND_OVER:
                    # The loop greenlet's callback suspended: a successor goes on with the
                    # loop, started here.  greenlet gives a new greenlet the recursion depth
                    # of the frame that first switches into it: started in the suspended
                    # callback, each successor would be deeper than the last, and a few
                    # hundred suspensions in one run() would raise RecursionError (or, with
                    # the limit raised, overflow the C stack).
                    loop = self.loop = module.greenlet(self._loop_main)
                    sent = loop.switch(False)
                elif sent is _DELIVER:
                    interrupt, self._delivered = self._delivered, None
                    return interrupt
                elif self.loop.dead:
                    # The loop ended: by itself (None), or with an exception for run().
                    interrupt, self._delivered = self._delivered, None
                    if interrupt is None and type(sent) is _Exited:
                        return sent.error  # a callback's GreenletExit
                    return interrupt
                else:
                    sent = self.forward(sent)
        finally:
            self.running = False
            entered.remove(self)

    def _loop_main(self, fresh: bool) -> _Exited | None:
        try:
            self._run_loop(fresh)
        except Superseded:
            pass  # back to whoever resumed this greenlet's suspended callback
        except greenlet_module().GreenletExit as error:  # type: ignore[union-attr]
            return _Exited(error)
        return None

    def hand_over(self) -> Any:
        """The loop greenlet's callback suspends: a successor greenlet continues the loop,
        started by the greenlet that entered it (``enter()``), at that greenlet's depth.
        Returns what switches back in: ``()`` from the resumption, or what ``forward()``
        takes."""
        return self.loop.parent.switch(_HAND_OVER)

    # Why forward() exists.
    #
    # greenlet sends what a greenlet returns, and what a suspend() in it sends, to its
    # parent, which is the greenlet that *created* it, not the one that switched into it.
    # A greenlet made outside the loop (its parent is the greenlet that runs run()) or in a
    # callback that has since suspended, and started by a later callback, therefore ends,
    # or suspends, into a greenlet that this module is keeping waiting: enter(), or a
    # suspend() not yet resumed.  Taken as theirs, that switch would end run() early with
    # the loop greenlet stranded in the callback, or return from a suspend() nothing
    # resumed.  Revolt's fibers return to whoever started or resumed them.  The callback
    # that started the greenlet is in the loop greenlet, in its switch() (callbacks run
    # there): what came is handed on to it, and the greenlet it came to waits on.

    def forward(self, sent: Any) -> Any:
        """Hand ``sent``, which a greenlet started by a callback sent to its parent (a
        greenlet waiting in ``enter()`` or ``suspend()``), to the loop greenlet, where that
        callback waits in its ``switch()``; return what next switches back in.  With no
        loop running there is no such callback: ``RuntimeError``."""
        if not self.running:
            raise RuntimeError(
                "A greenlet waiting in suspend() was switched into without resume() or "
                "throw(), and no loop runs to hand that switch to"
            )
        return self.loop.switch(sent)

    def deliver(self, interrupt: object) -> None:
        """Hand ``interrupt`` to whoever runs the loop (``run()`` or a main ``suspend()``).

        Without greenlet it can only be an exception, and is raised.  With greenlet, an
        exception ends the loop greenlet, and the next ``run()`` starts a fresh one, which
        first runs what the tick left, as a loop without greenlet does.  Left waiting, that
        greenlet would keep the driver alive for good: its frames refer to the driver, which
        refers to it, and the garbage collector does not look into a suspended greenlet's
        frames.  A resumed main ``Suspension`` is handed over with the loop greenlet kept:
        the next ``run()`` or main ``suspend()`` switches back in here and the loop goes on.
        """
        if self.loop is None:
            assert isinstance(interrupt, BaseException)
            raise interrupt
        self._delivered = interrupt
        if isinstance(interrupt, BaseException):
            raise _Delivered  # out through _loop_main; enter() takes the interrupt
        self.getcurrent().parent.switch(_DELIVER)

    def close(self, error: Callable[[Callable[..., Any], Exception], None]) -> None:
        """The driver closes: no suspension of it can be resumed any more.  End each greenlet
        still waiting in one, suspended, or resumed with its switch back not yet run, and the
        loop greenlet if it waits for the next ``run()``, with ``GreenletExit``, so that
        their ``finally`` blocks run and their frames are freed, as Revolt's fibers are
        destroyed once nothing can resume them.  An ``Exception`` that
        comes out of one (a greenlet a callback started) goes to ``error(fn, exc)``, the
        driver's error path, as it would from the switch back.

        greenlet cannot do this by itself: a suspended greenlet is freed only when nothing
        refers to it, and its own frames do (the callback's locals, ``suspend()``'s), which
        the garbage collector does not look into.  A greenlet of another thread is left.
        """
        self._closed = True
        self._last = None
        if self._main is not None:
            self._main._dead = True  # its suspend() would run the loop of a closed driver
        loop = self.loop
        if loop and not self.running:
            # Waiting in deliver() since it handed a resumed main suspension back: nothing
            # runs this loop again.
            try:
                loop.parent = self.getcurrent()
            except ValueError:
                pass  # another thread's loop: left
            else:
                loop.throw()
        suspensions = self._suspensions
        if not suspensions:
            return
        current = self.getcurrent()
        # Every one is marked dead before any is ended: a finally block that resumes another
        # is then ignored, as for any dead suspension, instead of queueing a switch that a
        # closed driver never runs.
        stranded = []
        for owner, suspension in list(suspensions.items()):
            if owner.dead or suspension._dead:
                continue
            if owner is current or not (suspension._pending or suspension._queued):
                suspension._dead = True  # not waiting: a suspend() from now on raises
                continue
            try:
                owner.parent = current  # back here once it ends
            except ValueError:
                continue  # another thread's greenlet, or an ancestor of this one: left
            suspension._pending = suspension._queued = False
            suspension._dead = True  # a suspend() in its finally block raises
            suspension._value = suspension._error = None
            stranded.append((owner, suspension))
        failure: BaseException | None = None
        for owner, suspension in stranded:
            try:
                owner.throw()
            except Exception as exc:  # a finally block of a greenlet a callback started
                error(suspension._switch_in, exc)
            except BaseException as exc:  # the others end first
                failure = failure or exc
        if failure is not None:
            raise failure

    def suspension(self) -> Suspension:
        """The suspension of the current greenlet, one per greenlet (``get_suspension()``)."""
        # The last one handed out, while its greenlet asks again: a callback that suspends
        # in a loop asks once per iteration.
        last = self._last
        if last is not None and last._greenlet() is self.getcurrent() and not last._dead:
            return last
        module: Any = greenlet_module()
        if module is None:
            raise UnsupportedFeatureError(
                "Suspensions need the greenlet package: pip install 'iopoll[greenlet]'"
            )
        self.getcurrent = module.getcurrent
        current = module.getcurrent()
        if current.parent is None:
            suspension = self._main
            if suspension is None or suspension._dead:
                suspension = self._main = self._suspension_type(self, current, main=True)
        else:
            if self._suspensions is None:
                self._suspensions = weakref.WeakKeyDictionary()
            suspension = self._suspensions.get(current)
            if suspension is None:
                suspension = self._suspension_type(self, current, main=False)
                self._suspensions[current] = suspension
        if self._closed:
            suspension._dead = True  # a closed driver's: suspend() raises
        self._last = suspension
        return suspension
