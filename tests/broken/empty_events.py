"""Breaks SPEC 4: ``add()`` with empty events watches ``READ`` instead of raising ``ValueError``."""

from __future__ import annotations

from typing import Any

import iopoll
from iopoll import *  # noqa: F403  (every name of SPEC section 1)


class Context(iopoll.Context):  # type: ignore[no-redef]  # replaces the re-exported one
    """``add(handle, Event(0))`` and ``add(handle, [])`` watch ``READ``."""

    def add(self, handle: Any, events: Any, data: Any = None) -> Any:
        if not isinstance(events, iopoll.Event):
            events = list(events)
        if not events:
            events = iopoll.Event.READ
        return super().add(handle, events, data)
