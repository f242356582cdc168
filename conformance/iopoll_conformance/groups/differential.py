"""Hypothesis stateful test against the select fallback as reference."""

from __future__ import annotations


class DifferentialRules:
    """Hypothesis stateful test against the select fallback as reference."""
