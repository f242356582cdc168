"""``iopoll`` with an ``EVENT_PORTS`` backend on the emulated port library, for the suite.

The same ``EventPortsMechanism`` that runs on illumos and Solaris, given
``tests/event_ports_emulation.EmulatedPorts`` in place of libc.  Its ``Backend`` is an enum
of its own (iopoll's members, with ``EVENT_PORTS`` available and so ``AUTO``'s choice), so
that importing this module changes nothing in ``iopoll`` itself.  What a suite run here
shows is the mechanism's translation and re-association bookkeeping against the one-shot
association contract, on Linux's poll(): it is not a test of Solaris or illumos.
"""

from __future__ import annotations

import iopoll
from _iopoll_core.backend import BackendBase
from event_ports_emulation import EmulatedPorts
from iopoll import *  # noqa: F403  (every name of SPEC section 1)
from iopoll._event_ports import EventPortsMechanism

__all__ = [*iopoll.__all__]

EMULATION = EmulatedPorts()
EmulatedEventPorts = EventPortsMechanism.with_library(EMULATION)


# iopoll's members, in an enum of this module's (an enum with members cannot be subclassed):
# it replaces the re-exported one.
Backend = BackendBase(  # type: ignore[misc, call-arg, assignment]
    "Backend", [(member.name, member.value) for member in iopoll.Backend], module=__name__
)
Backend.__doc__ = "iopoll's backends, plus ``EVENT_PORTS`` on the emulation."

Backend._mechanisms = {
    **iopoll.Backend._mechanisms,
    "EVENT_PORTS": EmulatedEventPorts,
}


class Context(iopoll.Context):  # type: ignore[no-redef]  # replaces the re-exported one
    """``iopoll.Context`` on this module's ``Backend``."""

    __slots__ = ()
    _backend_type = Backend

    def __init__(self, backend: Backend = Backend.AUTO) -> None:  # type: ignore[override]
        super(iopoll.Context, self).__init__(backend)

    @property
    def backend(self) -> Backend:  # type: ignore[override]
        """The concrete backend in use (never ``AUTO``)."""
        return self._backend  # type: ignore[return-value]
