"""Breaks SPEC 4 / 6.8: ``len(ctx)`` still counts watchers whose stream was closed until
``wait()`` happens to notice."""

from __future__ import annotations

import iopoll
from iopoll import *  # noqa: F403  (every name of SPEC section 1)


class Context(iopoll.Context):  # type: ignore[no-redef]  # replaces the re-exported one
    """``len()`` counts registrations, not active watchers."""

    def __len__(self) -> int:
        return len(self._watchers)
