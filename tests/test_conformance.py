"""The conformance suite against the project's own implementations.

``iopoll`` runs on every backend available here (``POLL``, ``EPOLL``, ``SELECT`` on Linux),
once with its C accelerator (when built) and once without (``pure_iopoll``, marked slow: the
pure-Python ``wait()`` is the same code on every Python version, so tox runs it on one, and
``tests/test_fast_path.py`` covers both paths on all); ``iopoll_polyfill.fallback`` on
``SELECT``.  Each class turns on the strict extras too (``strict_extras = True``): the
behaviour SPEC does not state, which a third party's default run never checks, is still
this project's own.  The fixtures come from the plugin ``iopoll_conformance.plugin``, loaded
through its ``pytest11`` entry point.
"""

from __future__ import annotations

import pytest

from iopoll_conformance import ConformanceSuite


class TestIopoll(ConformanceSuite):
    """Every rule group on every available ``iopoll`` backend."""

    impl = "iopoll"
    strict_extras = True


@pytest.mark.slow
class TestIopollPure(ConformanceSuite):
    """Every rule group on ``iopoll``'s pure-Python ``wait()`` (``tests/pure_iopoll.py``)."""

    impl = "pure_iopoll"
    strict_extras = True


class TestFallback(ConformanceSuite):
    """Every rule group on the pure select() implementation."""

    impl = "iopoll_polyfill.fallback"
    strict_extras = True
