"""Shared test configuration: markers only."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "slow: runs for tens of seconds, or repeats what one Python version shows; tox runs "
        "these on py311 only (deselect with -m 'not slow')",
    )
