"""Breaks SPEC 4: a negative ``timeout`` is taken as 0 instead of raising ``ValueError``."""

from __future__ import annotations

from typing import Any

import iopoll
from iopoll import *  # noqa: F403  (every name of SPEC section 1)


class Context(iopoll.Context):  # type: ignore[no-redef]  # replaces the re-exported one
    """``wait(-1)`` polls."""

    def wait(self, timeout: Any = None, microseconds: Any = 0, max_events: Any = None) -> list[Any]:
        if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout < 0:
            timeout = 0
        return super().wait(timeout, microseconds, max_events)
