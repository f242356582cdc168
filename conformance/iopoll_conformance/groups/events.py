"""Reported events: READ/WRITE, ERROR/HANGUP always, READ_HANGUP, PRIORITY, level-triggering (SPEC 6.2, 6.3)."""

from __future__ import annotations


class EventRules:
    """Reported events: READ/WRITE, ERROR/HANGUP always, READ_HANGUP, PRIORITY, level-triggering (SPEC 6.2, 6.3)."""
