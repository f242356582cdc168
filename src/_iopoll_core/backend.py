"""``BackendBase``: the behaviour of the ``Backend`` enums of ``iopoll`` and of the polyfill."""

from __future__ import annotations

import enum
from typing import ClassVar, TypeVar

from .mechanism import Mechanism

__all__ = ["BackendBase", "RESOLUTION_ORDER"]

# Which concrete backend AUTO means: the first available of these.
RESOLUTION_ORDER = ("EVENT_PORTS", "KQUEUE", "EPOLL", "POLL", "WSAPOLL", "SELECT")


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
        """Whether a ``SignalHandle`` can be added (Linux ``EPOLL`` and ``POLL``, ``KQUEUE``
        where the platform gives it a source)."""
        mechanism = self._mechanism_class()
        return mechanism is not None and mechanism.supports_signal_handles

    def supports_process_handles(self) -> bool:
        """Whether a ``ProcessHandle`` can be added (where pidfds exist: Linux ``EPOLL``
        and ``POLL``, and ``KQUEUE`` over them)."""
        mechanism = self._mechanism_class()
        return mechanism is not None and mechanism.supports_process_handles
