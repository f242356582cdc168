"""Bad input: exception class and message for every bad-input row of SPEC; nothing half-registered."""

from __future__ import annotations


class ErrorRules:
    """Bad input: exception class and message for every bad-input row of SPEC; nothing half-registered."""
