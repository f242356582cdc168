"""Shared test configuration: markers, and the fixtures for streams closed behind iopoll's back."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "slow: runs for tens of seconds, or repeats what one Python version shows; tox runs "
        "these once, in its slow env (deselect with -m 'not slow')",
    )


@pytest.fixture
def pairs() -> Iterator[Callable[[], tuple[socket.socket, socket.socket]]]:
    """A maker of non-blocking AF_UNIX socket pairs, all closed after the test."""
    made: list[socket.socket] = []

    def make() -> tuple[socket.socket, socket.socket]:
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        made.extend((a, b))
        return a, b

    yield make
    for sock in made:
        sock.close()


@pytest.fixture
def keepers() -> Iterator[list[int]]:
    """fds that keep a closed stream's file open, as a dup elsewhere in a program would."""
    kept: list[int] = []
    yield kept
    for fd in kept:
        os.close(fd)
