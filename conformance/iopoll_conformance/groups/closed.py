"""Closed streams, dup'd and reused fds, fds closed behind the handle's back (SPEC 6.8, 6.9)."""

from __future__ import annotations


class ClosedStreamRules:
    """Closed streams, dup'd and reused fds, fds closed behind the handle's back (SPEC 6.8, 6.9)."""
