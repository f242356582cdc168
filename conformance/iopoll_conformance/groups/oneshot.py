"""ONESHOT: fires once, stays active, re-arms (SPEC 6.4)."""

from __future__ import annotations


class OneShotRules:
    """ONESHOT: fires once, stays active, re-arms (SPEC 6.4)."""
