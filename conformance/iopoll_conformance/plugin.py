"""The pytest plugin: options, fixtures and the per-group summary.

Registered as the ``pytest11`` entry point ``iopoll_conformance``; where plugin autoload is
off, enable it with ``-p iopoll_conformance.plugin``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from .support import Capabilities, socketpair, tcp_pair


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("iopoll_conformance")
    group.addoption(
        "--iopoll-impl",
        default=None,
        help="module implementing the iopoll API to test (default: iopoll)",
    )
    group.addoption(
        "--iopoll-backend",
        default=None,
        help="test only this backend (a Backend member name); default: every available one",
    )


def implementation_name(config: pytest.Config, cls: type | None) -> str:
    """The module under test: the class's ``impl``, else ``--iopoll-impl``, else iopoll."""
    name = getattr(cls, "impl", None) or config.getoption("--iopoll-impl") or "iopoll"
    return str(name)


def _is_suite_class(cls: type | None) -> bool:
    """Whether ``cls`` inherits a rule group of this suite (ConformanceSuite or one mixin)."""
    return cls is not None and any(
        base.__module__.startswith("iopoll_conformance.groups.") for base in cls.__mro__
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Only the suite's own classes: the plugin is auto-loaded into every pytest session,
    # and other projects' tests may have a "backend" of their own.
    if "backend" not in metafunc.fixturenames or not _is_suite_class(metafunc.cls):
        return
    api = importlib.import_module(implementation_name(metafunc.config, metafunc.cls))
    chosen = metafunc.config.getoption("--iopoll-backend") or getattr(metafunc.cls, "backend_name", None)
    if chosen:
        backends = [api.Backend[chosen]]
    else:
        backends = list(api.Backend.available_backends())
    metafunc.parametrize("backend", backends, ids=[b.name for b in backends], scope="class")


@pytest.fixture
def api(request: pytest.FixtureRequest) -> ModuleType:
    """The implementation module under test."""
    return importlib.import_module(implementation_name(request.config, request.cls))


@pytest.fixture
def caps(api: ModuleType, backend: Any) -> Capabilities:
    """What the backend under test supports."""
    return Capabilities.discover(api, backend)


@pytest.fixture
def ctx(api: ModuleType, backend: Any) -> Iterator[Any]:
    """A fresh Context on the backend under test, closed afterwards."""
    context = api.Context(backend)
    yield context
    context.close()


@pytest.fixture
def pair() -> Iterator[tuple[Any, Any]]:
    """A non-blocking AF_UNIX socketpair, closed afterwards."""
    a, b = socketpair()
    yield a, b
    a.close()
    b.close()


@pytest.fixture
def tcp() -> Iterator[tuple[Any, Any]]:
    """A connected non-blocking loopback TCP pair (client, server), closed afterwards."""
    client, server = tcp_pair()
    yield client, server
    client.close()
    server.close()
