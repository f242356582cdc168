"""iopoll's ``Backend`` enum and ``Context``: the shared engine on the native mechanisms."""

from __future__ import annotations

import select
import sys

from _iopoll_core.backend import BackendBase, Mechanism
from _iopoll_core.context import Context as _EngineContext
from _iopoll_core.select_mechanism import SelectMechanism

__all__ = ["Backend", "Context"]


class Backend(BackendBase):
    """The OS mechanisms a ``Context`` can use; ``AUTO`` picks the best one here."""

    AUTO = "auto"
    POLL = "poll"
    EPOLL = "epoll"
    KQUEUE = "kqueue"
    EVENT_PORTS = "event_ports"
    WSAPOLL = "wsapoll"
    SELECT = "select"


def _native_mechanisms() -> dict[str, type[Mechanism]]:
    table: dict[str, type[Mechanism]] = {}
    if hasattr(select, "poll") and sys.platform != "win32":
        from ._poll import PollMechanism

        table["POLL"] = PollMechanism
    if hasattr(select, "epoll"):
        from ._epoll import EpollMechanism

        table["EPOLL"] = EpollMechanism
    if hasattr(select, "kqueue"):
        from ._kqueue import KqueueMechanism

        table["KQUEUE"] = KqueueMechanism
    table["SELECT"] = SelectMechanism
    return table


Backend._mechanisms = _native_mechanisms()


class Context(_EngineContext):
    """Watches handles and reports which are ready, on a native backend.

    ``Context(backend=Backend.AUTO)``: ``AUTO`` picks the first available of
    ``EVENT_PORTS``, ``KQUEUE``, ``EPOLL``, ``POLL``/``WSAPOLL``, then ``SELECT``.
    """

    __slots__ = ()
    _backend_type = Backend

    def __init__(self, backend: Backend = Backend.AUTO) -> None:
        super().__init__(backend)

    @property
    def backend(self) -> Backend:
        """The concrete backend in use (never ``AUTO``)."""
        return self._backend  # type: ignore[return-value]
