"""The conformance suite against the project's own implementations.

``iopoll`` runs on every backend available here (``POLL``, ``EPOLL``, ``SELECT`` on Linux),
once with its C accelerator (when built) and once without (``pure_iopoll``);
``iopoll_polyfill.fallback`` on ``SELECT``.  The fixtures come from the plugin
``iopoll_conformance.plugin``, loaded through its ``pytest11`` entry point.
"""

from __future__ import annotations

from iopoll_conformance import ConformanceSuite


class TestIopoll(ConformanceSuite):
    """Every rule group on every available ``iopoll`` backend."""

    impl = "iopoll"


class TestIopollPure(ConformanceSuite):
    """Every rule group on ``iopoll``'s pure-Python ``wait()`` (``tests/pure_iopoll.py``)."""

    impl = "pure_iopoll"


class TestFallback(ConformanceSuite):
    """Every rule group on the pure select() implementation."""

    impl = "iopoll_polyfill.fallback"
