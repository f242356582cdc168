"""Context.wait: timeouts, max_events, empty contexts, signals (SPEC 4)."""

from __future__ import annotations


class WaitRules:
    """Context.wait: timeouts, max_events, empty contexts, signals (SPEC 4)."""
