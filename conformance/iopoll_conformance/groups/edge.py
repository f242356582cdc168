"""EDGE_TRIGGERED: transitions once, or NOSUPPORT (SPEC 6.5)."""

from __future__ import annotations


class EdgeRules:
    """EDGE_TRIGGERED: transitions once, or NOSUPPORT (SPEC 6.5)."""
