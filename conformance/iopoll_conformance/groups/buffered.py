"""Bytes buffered in the stream (TLS pending()) (SPEC 6.6)."""

from __future__ import annotations


class BufferedRules:
    """Bytes buffered in the stream (TLS pending()) (SPEC 6.6)."""
