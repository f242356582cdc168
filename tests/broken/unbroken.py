"""The control: the same kind of wrapper as its broken siblings, breaking nothing."""

from __future__ import annotations

from typing import Any

import iopoll
from iopoll import *  # noqa: F403  (every name of SPEC section 1)


class Context(iopoll.Context):  # type: ignore[no-redef]  # replaces the re-exported one
    """``iopoll.Context`` with every call passed through."""

    def wait(self, timeout: Any = None, microseconds: Any = 0, max_events: Any = None) -> list[Any]:
        return super().wait(timeout, microseconds, max_events)
