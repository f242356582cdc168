"""Context.add: keying by fd, duplicates, dup, several contexts (SPEC 4, 6.1)."""

from __future__ import annotations


class AddRules:
    """Context.add: keying by fd, duplicates, dup, several contexts (SPEC 4, 6.1)."""
