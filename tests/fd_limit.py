"""The one way tests raise the open-files limit: within the hard limit, restored afterwards."""

from __future__ import annotations

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
