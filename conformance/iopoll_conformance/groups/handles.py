"""Handle and StreamPollHandle (SPEC 3)."""

from __future__ import annotations


class HandleRules:
    """Handle and StreamPollHandle (SPEC 3)."""
