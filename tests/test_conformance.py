"""The conformance suite against the project's own implementations.

``iopoll`` runs on every backend available here (``POLL``, ``EPOLL``, ``SELECT`` on Linux),
``iopoll_polyfill.fallback`` on ``SELECT``.  The fixtures come from the plugin
``iopoll_conformance.plugin``, loaded through its ``pytest11`` entry point.
"""

from __future__ import annotations

from iopoll_conformance import ConformanceSuite


class TestIopoll(ConformanceSuite):
    """Every rule group on every available ``iopoll`` backend."""

    impl = "iopoll"


class TestFallback(ConformanceSuite):
    """Every rule group on the pure select() implementation."""

    impl = "iopoll_polyfill.fallback"
