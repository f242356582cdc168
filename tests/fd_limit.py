"""The one way tests raise the open-files limit: within the hard limit, restored afterwards."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


@contextmanager
def raised_fd_limit(wanted: int) -> Iterator[None]:
    """Let this process open ``wanted`` fds for the block; skip the test if the hard limit
    is lower.  The soft limit is only ever raised, and put back as it was on exit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is below {wanted}")
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@contextmanager
def lowered_fd_limit(limit: int) -> Iterator[None]:
    """Cap this process at ``limit`` open fds for the block, to make the OS refuse one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@contextmanager
def no_fd_left() -> Iterator[list[int]]:
    """Every fd number up to a lowered limit taken (``/dev/null`` descriptors), so that the
    next fd any call asks for is refused (EMFILE); yields the fds taken, freed on exit."""
    taken: list[int] = []
    probe = os.open(os.devnull, os.O_RDONLY)
    os.close(probe)
    try:
        with lowered_fd_limit(probe + 64):
            try:
                while True:
                    taken.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                pass
            yield taken
    finally:
        for fd in taken:
            os.close(fd)
