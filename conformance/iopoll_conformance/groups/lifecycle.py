"""Context and Watcher lifecycle: close, len, GC, copy, pickle, fork, modify, remove (SPEC 4, 5)."""

from __future__ import annotations


class LifecycleRules:
    """Context and Watcher lifecycle: close, len, GC, copy, pickle, fork, modify, remove (SPEC 4, 5)."""
