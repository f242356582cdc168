"""``ConformanceSuite``: every rule group in one class, so that nobody misses a new group."""

from __future__ import annotations

from .fixtures import SuiteFixtures
from .groups.add import AddRules
from .groups.backends import BackendRules
from .groups.boundaries import BoundaryRules
from .groups.buffered import BufferedRules
from .groups.closed import ClosedStreamRules
from .groups.differential import DifferentialRules
from .groups.edge import EdgeRules
from .groups.errors import ErrorRules
from .groups.events import EventRules
from .groups.extras import StrictExtraRules
from .groups.files import FileRules
from .groups.handles import HandleRules
from .groups.lifecycle import LifecycleRules
from .groups.notify import NotifyRules
from .groups.oneshot import OneShotRules
from .groups.processes import ProcessRules
from .groups.removed import RemovalCallbackRules
from .groups.signals import SignalRules
from .groups.timers import TimerRules
from .groups.wait import WaitRules
from .groups.weak import WeakHandleRules


class ConformanceSuite(
    SuiteFixtures,
    BackendRules,
    HandleRules,
    AddRules,
    WaitRules,
    LifecycleRules,
    ErrorRules,
    BoundaryRules,
    EventRules,
    OneShotRules,
    EdgeRules,
    BufferedRules,
    FileRules,
    ClosedStreamRules,
    DifferentialRules,
    TimerRules,
    NotifyRules,
    SignalRules,
    ProcessRules,
    WeakHandleRules,
    RemovalCallbackRules,
    StrictExtraRules,
):
    """Subclass this in a pytest module to run the whole suite against an implementation::

        # test_my_poll.py   (run with: python -m pytest; the installed plugin loads itself)
        from iopoll_conformance import ConformanceSuite

        class TestMyPoll(ConformanceSuite):
            impl = "mypkg.poll"          # module exposing the iopoll names
            # backend_name = "EPOLL"     # optional: one backend instead of all available
            # strict_extras = True       # optional: also what SPEC does not state

    Each rule group is a mixin in ``iopoll_conformance.groups``; this class inherits them
    all, and new groups are added here.  The strict extras group (``StrictExtraRules``)
    runs only with ``strict_extras = True`` or ``--strict-extras``.
    """

    impl: str | None = None
    backend_name: str | None = None
    strict_extras: bool = False
