"""iopoll's ``Backend`` enum and ``Context``: the shared engine on the native mechanisms."""

from __future__ import annotations

import os
import select
import sys
import warnings
from collections.abc import Callable

from _iopoll_core.backend import BackendBase
from _iopoll_core.context import Context as _EngineContext
from _iopoll_core.mechanism import Mechanism
from _iopoll_core.select_mechanism import SelectMechanism
from _iopoll_core.watcher import Watcher as _EngineWatcher

__all__ = [
    "ACCELERATED",
    "Backend",
    "Context",
    "Watcher",
    "install_accelerator",
    "pure_python_requested",
]


class Backend(BackendBase):
    """The OS mechanisms a ``Context`` can use; ``AUTO`` picks the best one here."""

    # The members of SPEC section 1, in its order, here and in the other implementation's
    # Backend: an enum with members cannot be subclassed, and type checkers need them
    # written out.  tests/test_public_names.py holds both to SPEC.
    AUTO = "auto"
    POLL = "poll"
    EPOLL = "epoll"
    KQUEUE = "kqueue"
    EVENT_PORTS = "event_ports"
    WSAPOLL = "wsapoll"
    SELECT = "select"


def _native_mechanisms() -> dict[str, type[Mechanism]]:
    table: dict[str, type[Mechanism]] = {}
    # Event ports: illumos and Solaris libc, through ctypes (src/iopoll/_event_ports.py).
    if sys.platform.startswith(("sunos", "illumos", "solaris")):
        from ._event_ports import EventPortsMechanism, event_ports_available

        if event_ports_available():
            table["EVENT_PORTS"] = EventPortsMechanism
    if hasattr(select, "poll") and sys.platform != "win32":
        from ._poll import PollMechanism

        table["POLL"] = PollMechanism
    if hasattr(select, "epoll"):
        from ._epoll import EpollMechanism

        table["EPOLL"] = EpollMechanism
    if hasattr(select, "kqueue"):
        from ._kqueue import KqueueMechanism

        table["KQUEUE"] = KqueueMechanism
    # WSAPoll on Windows; on POSIX only with the testing switch IOPOLL_WSAPOLL_LIBC, which
    # runs the same mechanism on libc poll() (src/iopoll/_wsapoll.py).
    if sys.platform == "win32" or os.environ.get("IOPOLL_WSAPOLL_LIBC", "") not in ("", "0"):
        from ._wsapoll import wsapoll_mechanism

        table["WSAPOLL"] = wsapoll_mechanism()
    table["SELECT"] = SelectMechanism
    return table


Backend._mechanisms = _native_mechanisms()


class Watcher(_EngineWatcher):
    """A handle registered in a ``Context``, with what it watches and the user's data.

    Only ``Context.add`` makes watchers.  A watcher holds its context weakly, so a context
    that is garbage collected leaves its watchers inactive.
    """

    __slots__ = ()


class Context(_EngineContext):
    """Watches handles and reports which are ready, on a native backend.

    ``Context(backend=Backend.AUTO)``: ``AUTO`` picks the first available of
    ``EVENT_PORTS``, ``KQUEUE``, ``EPOLL``, ``POLL``/``WSAPOLL``, then ``SELECT``.
    """

    __slots__ = ()
    _backend_type = Backend
    _watcher_type = Watcher

    def __init__(self, backend: Backend = Backend.AUTO) -> None:
        super().__init__(backend)

    @property
    def backend(self) -> Backend:
        """The concrete backend in use (never ``AUTO``)."""
        return self._backend  # type: ignore[return-value]


def pure_python_requested() -> bool:
    """Whether ``IOPOLL_PURE_PYTHON`` (anything but empty or ``0``) turns the C code off."""
    return os.environ.get("IOPOLL_PURE_PYTHON", "") not in ("", "0")


def install_accelerator(what: str, install: Callable[[], object]) -> bool:
    """Run ``install()``, which imports a C accelerator and puts it on its classes; return
    whether the C code is now in use.

    Not with ``IOPOLL_PURE_PYTHON`` set, nor when the extension was not built (it is
    optional: the import fails).  When the classes' slots are not what the C code reads (a
    CPython whose descriptors changed, or a mismatched build), warn that ``what`` could not
    be installed and run the reference.
    """
    if pure_python_requested():
        return False
    try:
        install()
    except ImportError:  # built without a C compiler
        return False
    except (TypeError, AttributeError, RuntimeError) as exc:
        warnings.warn(
            f"{what} could not be installed ({exc}); running pure Python",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    return True


def _install_speedups() -> None:
    """The C ``wait()`` fast path on ``Context``, the C ``data`` getter on ``Watcher``.  The
    pure-Python code stays the reference, and the polyfill always runs it."""
    from . import _speedups

    _speedups.install(Context, Watcher)


ACCELERATED = install_accelerator("iopoll: the C accelerator", _install_speedups)
