"""The ``Backend`` enum's behaviour, and ``Mechanism``: the interface one OS backend implements."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import ClassVar, TypeVar

from .events import DecodeTable, ErrorCode

__all__ = ["BackendBase", "Mechanism", "RESOLUTION_ORDER"]

# Which concrete backend AUTO means: the first available of these.
RESOLUTION_ORDER = ("EVENT_PORTS", "KQUEUE", "EPOLL", "POLL", "WSAPOLL", "SELECT")


class Mechanism:
    """One OS readiness mechanism, as the ``Context`` sees it.

    A subclass only talks to the OS and translates between its flags and ``Event`` bits;
    every piece of bookkeeping (watchers, one-shot state, leftovers, closed streams) lives in
    the ``Context``.  Methods raise ``OSError`` when a system call fails, or ``Refusal``
    when the backend declines without one.
    """

    # Capabilities, read by ``Backend.supports_*()`` and by the Context's validation.
    supports_edge_triggering: ClassVar[bool] = False
    supports_priority: ClassVar[bool] = False
    supports_read_hangup: ClassVar[bool] = False
    # True when ``poll`` stops at ``max_events`` itself; otherwise the Context cuts.
    honours_max_events: ClassVar[bool] = False
    # True when the OS disarms a one-shot fd as it reports it (EPOLLONESHOT); otherwise
    # the Context calls ``disarm`` after reporting it.
    disarms_reported_oneshots: ClassVar[bool] = False
    # Raw bit that means "this fd is not open" (POLLNVAL): reported once as ERROR, then the
    # Context drops the registration.
    invalid_fd_bit: ClassVar[int] = 0
    # Longest timeout, in seconds, one ``poll`` call accepts; the Context loops for longer.
    max_timeout: ClassVar[float] = 2_147_483.0
    # errno values this backend gives a meaning other than the generic mapping.
    errno_codes: ClassVar[dict[int, ErrorCode]] = {}
    # Raw readiness bits -> Event.
    decode: ClassVar[DecodeTable]

    def register(self, fd: int, events: int) -> None:
        """Start watching ``fd`` for ``events`` (``Event`` bits, modes included)."""
        raise NotImplementedError

    def modify(self, fd: int, events: int) -> None:
        """Change what ``fd`` is watched for; also re-arms an fd that ``disarm`` dropped."""
        raise NotImplementedError

    def unregister(self, fd: int) -> bool:
        """Stop watching ``fd``.

        Returns False when the OS might still hold a registration for it (epoll, once the
        fd was closed while a ``dup`` keeps the file open); the Context then rebuilds.
        """
        raise NotImplementedError

    def disarm(self, fd: int) -> None:
        """Stop reporting a one-shot ``fd`` until ``modify`` re-arms it."""
        raise NotImplementedError

    # Wait up to ``timeout`` seconds (-1: forever) for at most ``max_events`` fds (-1: the
    # backend's default batch) and return ``(fd, raw bits)`` pairs.  An attribute, not a
    # method, so that epoll can hand the Context its C function with no Python frame between.
    poll: Callable[[float, int], list[tuple[int, int]]]

    def close(self) -> None:
        """Release the OS object."""


_Member = TypeVar("_Member", bound="BackendBase")


class BackendBase(enum.Enum):
    """Behaviour shared by the ``Backend`` enums of ``iopoll`` and of the polyfill.

    Each implementation defines its members and a ``_mechanisms`` table, name -> Mechanism
    class, holding only the backends it can run here.
    """

    _mechanisms: ClassVar[dict[str, type[Mechanism]]]

    @classmethod
    def _mechanism_table(cls) -> dict[str, type[Mechanism]]:
        return getattr(cls, "_mechanisms", {})

    @classmethod
    def available_backends(cls: type[_Member]) -> list[_Member]:
        """The concrete backends usable here, in declaration order (never ``AUTO``)."""
        table = cls._mechanism_table()
        return [member for member in cls if member.name in table]

    def is_available(self) -> bool:
        """Whether ``Context(self)`` can work here; ``AUTO`` always can."""
        return self.name == "AUTO" or self.name in self._mechanism_table()

    def resolve(self: _Member) -> _Member:
        """The concrete backend this member stands for (``AUTO`` picks one)."""
        if self.name != "AUTO":
            return self
        table = self._mechanism_table()
        cls = type(self)
        for name in RESOLUTION_ORDER:
            if name in table:
                return cls[name]
        return self  # unreachable: every implementation has SELECT

    def _mechanism_class(self) -> type[Mechanism] | None:
        """The ``Mechanism`` class behind this backend, or None if it is unavailable."""
        return self._mechanism_table().get(self.resolve().name)

    def supports_edge_triggering(self) -> bool:
        """Whether ``Event.EDGE_TRIGGERED`` is accepted (``EPOLL``, ``KQUEUE``)."""
        mechanism = self._mechanism_class()
        return mechanism is not None and mechanism.supports_edge_triggering

    def supports_priority(self) -> bool:
        """Whether ``Event.PRIORITY`` (out-of-band data) is accepted."""
        mechanism = self._mechanism_class()
        return mechanism is not None and mechanism.supports_priority

    def supports_read_hangup(self) -> bool:
        """Whether ``Event.READ_HANGUP`` is ever reported (``EPOLL``, Linux ``POLL``)."""
        mechanism = self._mechanism_class()
        return mechanism is not None and mechanism.supports_read_hangup

    def supports_signal_handles(self) -> bool:
        """Whether signal handles exist: not in this version, on any backend."""
        return False

    def supports_process_handles(self) -> bool:
        """Whether process handles exist: not in this version, on any backend."""
        return False
