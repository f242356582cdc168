"""The conformance suite against the project's own implementations.

``iopoll`` runs on every backend available here (``POLL``, ``EPOLL``, ``SELECT`` on Linux),
once with its C accelerator (when built) and once without (``pure_iopoll``, marked slow: the
pure-Python ``wait()`` is the same code on every Python version, so tox runs it on one, and
``tests/test_fast_path.py`` covers both paths on all); ``iopoll_polyfill.fallback`` on
``SELECT``.  The fixtures come from the plugin
``iopoll_conformance.plugin``, loaded through its ``pytest11`` entry point.
"""

from __future__ import annotations

import pytest

from iopoll_conformance import ConformanceSuite


class TestIopoll(ConformanceSuite):
    """Every rule group on every available ``iopoll`` backend."""

    impl = "iopoll"


@pytest.mark.slow
class TestIopollPure(ConformanceSuite):
    """Every rule group on ``iopoll``'s pure-Python ``wait()`` (``tests/pure_iopoll.py``)."""

    impl = "pure_iopoll"


class TestFallback(ConformanceSuite):
    """Every rule group on the pure select() implementation."""

    impl = "iopoll_polyfill.fallback"
