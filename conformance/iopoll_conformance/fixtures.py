"""The fixtures the rule groups use.

They are methods of ``SuiteFixtures``, which ``ConformanceSuite`` inherits, rather than
plugin-level fixtures: the plugin is loaded into every pytest session of every project that
installs iopoll, and names like ``ctx`` or ``pair`` must not leak into those.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from .plugin import _import_implementation, implementation_name, strict_extras_enabled
from .streams import closing_all
from .support import Capabilities, socketpair, tcp_pair


class SuiteFixtures:
    """``api``, ``caps``, ``ctx``, ``pair``, ``tcp`` and ``strict_extras_on`` for the suite's
    test classes.

    ``backend`` comes from the plugin, which parametrizes it per class.
    """

    @pytest.fixture
    def api(self, request: pytest.FixtureRequest) -> ModuleType:
        """The implementation module under test."""
        return _import_implementation(implementation_name(request.config, request.cls))

    @pytest.fixture
    def strict_extras_on(self, request: pytest.FixtureRequest) -> bool:
        """Whether behaviour SPEC does not state is checked too (``--strict-extras``)."""
        return strict_extras_enabled(request.config, request.cls)

    @pytest.fixture
    def caps(self, api: ModuleType, backend: Any) -> Capabilities:
        """What the backend under test supports."""
        return Capabilities.discover(api, backend)

    @pytest.fixture
    def ctx(self, api: ModuleType, backend: Any) -> Iterator[Any]:
        """A fresh Context on the backend under test, closed afterwards."""
        context = api.Context(backend)
        yield context
        context.close()

    @pytest.fixture
    def pair(self) -> Iterator[tuple[Any, Any]]:
        """A non-blocking AF_UNIX socketpair, closed afterwards."""
        ends = socketpair()
        with closing_all(*ends):
            yield ends

    @pytest.fixture
    def tcp(self) -> Iterator[tuple[Any, Any]]:
        """A connected non-blocking loopback TCP pair (client, server), closed afterwards."""
        ends = tcp_pair()
        with closing_all(*ends):
            yield ends
