"""``POLL``'s second copy of its poll set, the ``struct pollfd`` array the C fast path polls.

It must hold exactly what CPython's ``select.poll`` object holds, in the same order (the
order of poll()'s reports), through any sequence of register, modify and unregister, its
compaction included: the C and the Python path then report the same watchers in the same
order.
"""

from __future__ import annotations

import os
import random
import select
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator

import pytest

pytestmark = pytest.mark.skipif(not hasattr(select, "poll"), reason="no poll() here")

if hasattr(select, "poll"):
    from iopoll._poll import PollMechanism

_POLLFD = struct.Struct("ihh")


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    pairs = [socket.socketpair() for _ in range(20)]
    yield [end for pair in pairs for end in pair]
    for a, b in pairs:
        a.close()
        b.close()


def live_entries(mechanism: PollMechanism) -> list[tuple[int, int]]:
    array = mechanism.native_pollfds
    entries = [_POLLFD.unpack_from(array, i) for i in range(0, len(array), _POLLFD.size)]
    return [(fd, events) for fd, events, _ in entries if fd >= 0]


def reported_order(mechanism: PollMechanism) -> list[int]:
    # Every socket is writable: poll() reports each registered fd, in its set's order.
    return [fd for fd, _ in mechanism._poll_object.poll(0)]


@pytest.mark.parametrize("seed", range(5))
def test_the_array_follows_the_poll_object(seed: int, sockets: list[socket.socket]) -> None:
    from iopoll import Event

    rng = random.Random(seed)
    mechanism = PollMechanism()
    registered: dict[int, Event] = {}
    choices = [Event.WRITE, Event.READ | Event.WRITE, Event.WRITE | Event.PRIORITY]
    for _ in range(400):
        fd = rng.choice(sockets).fileno()
        if fd in registered and rng.random() < 0.5:
            assert mechanism.unregister(fd)
            del registered[fd]
        else:
            events = rng.choice(choices)
            (mechanism.modify if fd in registered else mechanism.register)(fd, events)
            registered[fd] = events
        entries = live_entries(mechanism)
        assert [fd for fd, _ in entries] == reported_order(mechanism)
        assert sorted(fd for fd, _ in entries) == sorted(registered)
        # The holes are counted, and never last: the last entry, unregistered, is dropped
        # with the holes before it (so that churn on one fd never reads the fd limit).
        array = mechanism.native_pollfds
        assert mechanism._holes == len(array) // _POLLFD.size - len(entries)
        assert not array or _POLLFD.unpack_from(array, len(array) - _POLLFD.size)[0] >= 0
    # Unregistering leaves holes, compacted before they outnumber the live entries.
    array_entries = len(mechanism.native_pollfds) // _POLLFD.size
    assert array_entries <= 2 * len(registered) + 17


# Run in a process of its own: the scenario needs the poll set to be most of the process's
# open fds, which a test session holding its own fds cannot promise.
_HOLES_SCENARIO = """
import importlib, os, resource, socket, sys

import iopoll

make = importlib.import_module(sys.argv[1]).Context
limit = 300
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
held = {}
with make(iopoll.Backend.POLL) as ctx:
    while len(os.listdir("/dev/fd")) < limit - 20:
        sock = socket.socket()
        held[sock.fileno()] = (sock, ctx.add(sock, iopoll.Event.WRITE, sock.fileno()))
    assert len(held) > 200, len(held)
    fds = list(held)
    for i in range(200):  # each round: one hole, and one new entry at the end
        fd = fds[i % len(fds)]
        sock, watcher = held.pop(fd)
        watcher.remove()
        sock.close()
        sock = socket.socket()
        held[sock.fileno()] = (sock, ctx.add(sock, iopoll.Event.WRITE, sock.fileno()))
        fds[i % len(fds)] = sock.fileno()
        entries = len(ctx._usable.native_pollfds) // 8
        assert entries <= limit, (i, entries)
    assert len(ctx.wait(0)) == len(held)  # every socket is writable
print("ok")
"""


@pytest.mark.skipif(not os.path.isdir("/dev/fd"), reason="counts open fds in /dev/fd")
@pytest.mark.parametrize("module", ["iopoll", "pure_iopoll"])
def test_holes_never_take_the_array_past_the_open_files_limit(module: str) -> None:
    """poll(2) refuses more entries than RLIMIT_NOFILE (EINVAL), holes included.  With the
    limit at 300, a nearly full poll set and churn (remove, close, open, add) once left holes
    enough to push the C path's array past it: every wait() failed, while CPython's poll
    object, which has no holes, went on.  The array now drops its holes before it would."""
    tests = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", _HOLES_SCENARIO, module],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
