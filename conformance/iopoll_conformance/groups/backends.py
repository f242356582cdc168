"""Backend enum: availability, AUTO resolution, supports_*() (SPEC 2)."""

from __future__ import annotations


class BackendRules:
    """Backend enum: availability, AUTO resolution, supports_*() (SPEC 2)."""
