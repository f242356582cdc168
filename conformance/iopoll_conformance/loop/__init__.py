"""The driver contract of ``iopoll.loop`` (Revolt's rules, SPEC 9.1), for any ``Driver``.

Revolt's ``DriverTest`` ported to Python: ``DriverConformance`` is a mixin holding every rule
as a pytest test; subclass it once per driver, with a ``make()`` that returns a fresh driver::

    # test_my_driver.py   (run with: pytest test_my_driver.py)
    from iopoll.loop import Driver
    from iopoll_conformance.loop import DriverConformance

    from mypkg import MyDriver


    class TestMyDriver(DriverConformance):
        def make(self) -> Driver:
            return MyDriver()

The categories: liveness, timers, life cycle, introspection, invalid ids, tick ordering, run
and stop, callback arguments, errors, signals, streams, microtasks and memory.  The signal
rules send ``SIGUSR1`` and ``SIGUSR2`` to the process; the suspension rules are not here
(they need greenlet: see ``tests/test_loop_extras.py``).

The rules live in one module per category, each a mixin built on ``DriverHarness``
(``harness``: ``make()``, ``leaks``, the ``loop`` fixture and the helpers):

=================  ==========================  ==============================================
module             mixin                       rules
=================  ==========================  ==============================================
``liveness``       ``LivenessRules``           what keeps ``run()`` going (``unreference()``)
``timers``         ``TimerRules``              ``delay()`` and ``repeat()``
``lifecycle``      ``CallbackLifecycleRules``  ``enable()``, ``disable()`` and ``cancel()``
``identifiers``    ``IdentifierRules``         introspection and invalid ids
``running``        ``RunRules``                tick ordering, ``run()`` and ``stop()``
``arguments``      ``CallbackArgumentRules``   what callbacks get, what registration refuses
``errors``         ``ErrorHandlingRules``      ``UncaughtError`` and the error handler
``signals``        ``SignalRules``             ``on_signal()`` and the process's signal state
``streams``        ``StreamRules``             ``on_readable()`` and ``on_writable()``
``microtasks``     ``MicrotaskRules``          ``queue()``
``memory``         ``MemoryRules``             no memory leak
=================  ==========================  ==============================================

``DriverConformance`` inherits them all (new rules reach every subclass); ``callbacks``
holds the callbacks the rules share, ``receive_once`` among them.
"""

from __future__ import annotations

from .arguments import CallbackArgumentRules
from .callbacks import receive_once
from .errors import ErrorHandlingRules
from .harness import DriverHarness
from .identifiers import IdentifierRules
from .lifecycle import CallbackLifecycleRules
from .liveness import LivenessRules
from .memory import MemoryRules
from .microtasks import MicrotaskRules
from .running import RunRules
from .signals import SignalRules
from .streams import StreamRules
from .timers import TimerRules

__all__ = ["DriverConformance", "receive_once"]


# pytest collects the tests of a class's bases in reverse MRO order: the mixins are listed
# last category first, so that the tests run in the categories' order (liveness first).
class DriverConformance(
    MemoryRules,
    MicrotaskRules,
    StreamRules,
    SignalRules,
    ErrorHandlingRules,
    CallbackArgumentRules,
    RunRules,
    IdentifierRules,
    CallbackLifecycleRules,
    TimerRules,
    LivenessRules,
    DriverHarness,
):
    """The contract of ``iopoll.loop.Driver``, as pytest tests; subclass it per driver.

    A subclass (named ``Test...`` so that pytest collects it) must define ``make()``:

    * ``make() -> Driver`` returns a new driver, not yet run.  Each test makes its own,
      through the ``loop`` fixture; after the test, the fixture cancels every callback left
      (which restores the signal handlers) and calls the driver's ``close()`` if it has one.
      ``make()`` must change no process-wide state (a rule the suite checks).

    It may also set:

    * ``leaks = False`` for a driver that keeps a record of every callback on purpose (as
      ``TracingDriver`` does): the memory rule is then skipped.

    ``pair()``, ``registrations()``, ``writable_once()`` and ``assert_writable_runs_once()``
    are helpers for the tests, and for tests a subclass adds.
    """
