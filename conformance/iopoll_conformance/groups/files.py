"""Regular files, /dev/null and pipes (SPEC 6.7)."""

from __future__ import annotations


class FileRules:
    """Regular files, /dev/null and pipes (SPEC 6.7)."""
