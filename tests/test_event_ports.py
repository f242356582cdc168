"""The EVENT_PORTS backend: its translation, and its re-association bookkeeping on an emulation.

Event ports exist only on illumos and Solaris, so nothing here runs them.  What runs:

* the pure translation of ``iopoll._event_ports`` (``Event`` <-> poll(2) bits with illumos
  values, ``port_event_t``'s layout, timeouts as ``timespec``) against ``<sys/port.h>``,
  ``<sys/poll.h>`` and port_getn(3C);
* the very ``EventPortsMechanism`` class, given ``tests/event_ports_emulation.EmulatedPorts``
  in place of libc: one-shot associations on Linux's ``poll()``, which drop an fd after
  reporting it.  These tests hold the mechanism's bookkeeping (re-associating level
  watchers before the next ``port_getn``, never one-shots; what removal, modification and
  a closed fd do) to that contract, call by call;
* the conformance suite over that emulation (``tests/event_ports_iopoll.py``): the groups
  that test bookkeeping in process, the whole suite in a subprocess (slow).

None of it is a test of Solaris or illumos: readiness comes from Linux's poll().
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import event_ports_iopoll as ep
import iopoll
from event_ports_emulation import EmulatedPorts
from iopoll import Backend, Event
from iopoll import _event_ports as ports
from iopoll._event_ports import (
    POLLERR,
    POLLHUP,
    POLLIN,
    POLLNVAL,
    POLLOUT,
    POLLPRI,
    PORT_SOURCE_FD,
    EventPortsMechanism,
    association_mask,
    port_event_t,
    timespec,
    timespec_for,
)
from iopoll_conformance.fixtures import SuiteFixtures
from iopoll_conformance.groups.buffered import BufferedRules
from iopoll_conformance.groups.closed import ClosedStreamRules
from iopoll_conformance.groups.oneshot import OneShotRules
from iopoll_conformance.groups.wait import WaitRules

TESTS = Path(__file__).resolve().parent
R, W = Event.READ.value, Event.WRITE.value
ONESHOT = Event.ONESHOT.value


# -- translation ------------------------------------------------------------------------------


def test_poll_bits_have_their_illumos_values() -> None:
    # illumos <sys/poll.h>; <sys/port.h>: PORT_SOURCE_FD is 4.
    assert (POLLIN, POLLPRI, POLLOUT) == (0x1, 0x2, 0x4)
    assert (POLLERR, POLLHUP, POLLNVAL) == (0x8, 0x10, 0x20)
    assert PORT_SOURCE_FD == 4
    assert ports.PORT_MAX_LIST == 8192


@pytest.mark.parametrize(
    ("events", "mask"),
    [
        (Event.READ, POLLIN),
        (Event.WRITE, POLLOUT),
        (Event.READ | Event.WRITE, POLLIN | POLLOUT),
        (Event.READ | Event.PRIORITY, POLLIN | POLLPRI),
        (Event.READ | Event.ONESHOT, POLLIN),  # one-shot is the port's nature, not a bit
        (Event.ERROR | Event.HANGUP, 0),  # always reported, never asked for
    ],
)
def test_association_mask(events: Event, mask: int) -> None:
    assert association_mask(events.value) == mask


@pytest.mark.parametrize(
    ("bits", "expected"),
    [
        (POLLIN, Event.READ),
        (POLLOUT, Event.WRITE),
        (POLLIN | POLLOUT, Event.READ | Event.WRITE),
        (POLLIN | POLLHUP, Event.READ | Event.HANGUP),
        (POLLOUT | POLLERR | POLLHUP, Event.WRITE | Event.ERROR | Event.HANGUP),
        (POLLPRI | POLLIN, Event.PRIORITY | Event.READ),
    ],
)
def test_decoding_of_reported_bits(bits: int, expected: Event) -> None:
    assert EventPortsMechanism.decode[bits] == expected


def test_pollnval_is_the_invalid_fd_bit_and_not_decoded() -> None:
    # Missing from the table on purpose: the fast path hands such a report to the Context's
    # general path, which reports ERROR once and drops the watcher.
    assert EventPortsMechanism.invalid_fd_bit == POLLNVAL
    assert POLLNVAL not in EventPortsMechanism.decode
    assert POLLIN | POLLNVAL not in EventPortsMechanism.decode


def test_capabilities() -> None:
    # SPEC 2: edge no, priority yes; READ_HANGUP only EPOLL and Linux POLL.
    assert EventPortsMechanism.supports_priority is True
    assert EventPortsMechanism.supports_edge_triggering is False
    assert EventPortsMechanism.supports_read_hangup is False
    assert EventPortsMechanism.disarms_reported_oneshots is True


@pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8, reason="LP64 layout")
def test_port_event_t_layout_is_that_of_lp64_illumos() -> None:
    assert ctypes.sizeof(port_event_t) == 24
    assert [getattr(port_event_t, name).offset for name, _ in port_event_t._fields_] == [
        0,
        4,
        6,
        8,
        16,
    ]
    assert ctypes.sizeof(timespec) == 16


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (0.0, (0, 0)),
        (1.5, (1, 500_000_000)),
        (2, (2, 0)),
        (1e-10, (0, 1)),  # rounded up: never shorter than asked
        (2.9999999999, (3, 0)),
        (2_147_483.0, (2_147_483, 0)),
    ],
)
def test_timespec_for(seconds: float, expected: tuple[int, int]) -> None:
    assert timespec_for(seconds) == expected


def test_unavailable_off_illumos() -> None:
    if sys.platform.startswith(("sunos", "illumos", "solaris")):
        pytest.skip("this is illumos or Solaris")
    assert not ports.event_ports_available()
    assert not Backend.EVENT_PORTS.is_available()
    assert Backend.EVENT_PORTS not in Backend.available_backends()
    assert not Backend.EVENT_PORTS.supports_priority()
    with pytest.raises(iopoll.BackendUnavailableError, match="EVENT_PORTS"):
        iopoll.Context(Backend.EVENT_PORTS)
    with pytest.raises(OSError) as info:
        ports.LibcPorts()
    assert info.value.errno == errno.ENOSYS


# -- bookkeeping, call by call, on the emulation ----------------------------------------------


Pair = tuple[socket.socket, socket.socket]


@pytest.fixture
def emulation() -> EmulatedPorts:
    return EmulatedPorts()


@pytest.fixture
def mechanism(emulation: EmulatedPorts) -> Iterator[EventPortsMechanism]:
    made = EventPortsMechanism.with_library(emulation)()
    yield made
    made.close()


@pytest.fixture
def pair() -> Iterator[Pair]:
    """A connected socket pair ``(a, b)``, both closed after the test."""
    a, b = socket.socketpair()
    with a, b:
        yield a, b


@contextlib.contextmanager
def socket_pairs(count: int) -> Iterator[list[Pair]]:
    """``count`` connected socket pairs, every socket closed on leaving."""
    pairs = [socket.socketpair() for _ in range(count)]
    try:
        yield pairs
    finally:
        for two in pairs:
            for sock in two:
                sock.close()


def calls_since(emulation: EmulatedPorts, mark: int) -> list[tuple[str, int | None]]:
    """The calls made since ``mark`` (a length of ``emulation.calls``), without the port."""
    return [(name, fd) for name, _, fd in emulation.calls[mark:]]


def port_of(mechanism: EventPortsMechanism) -> int:
    return mechanism._port


def reported_readable(mechanism: EventPortsMechanism, pair: Pair, events: int) -> int:
    """Register ``b`` of ``pair`` for ``events``, send it a byte from ``a``, and check that
    the next poll reports it readable; ``b``'s fd."""
    a, b = pair
    mechanism.register(b.fileno(), events)
    a.send(b"x")
    assert mechanism.poll(1.0, -1) == [(b.fileno(), POLLIN)]
    return b.fileno()


def test_with_library_changes_only_the_library(emulation: EmulatedPorts) -> None:
    cls = EventPortsMechanism.with_library(emulation)
    assert issubclass(cls, EventPortsMechanism)
    assert cls.library is emulation
    assert EventPortsMechanism.library is None
    assert cls.__module__ == EventPortsMechanism.__module__
    assert {name for name in vars(cls) if not name.startswith("__")} == {"library"}


def test_level_watcher_is_reassociated_before_the_next_getn(
    emulation: EmulatedPorts, mechanism: EventPortsMechanism, pair: Pair
) -> None:
    fd = reported_readable(mechanism, pair, R)
    # Reported: the port dropped the association; it comes back lazily.
    assert emulation.associated(port_of(mechanism)) == {}
    mark = len(emulation.calls)
    assert mechanism.poll(0.0, -1) == [(fd, POLLIN)]  # level: still ready
    assert calls_since(emulation, mark) == [("port_associate", fd), ("port_getn", None)]


def test_oneshot_is_never_reassociated_until_modified(
    emulation: EmulatedPorts, mechanism: EventPortsMechanism, pair: Pair
) -> None:
    fd = reported_readable(mechanism, pair, R | ONESHOT)
    mark = len(emulation.calls)
    assert mechanism.poll(0.0, -1) == []  # still readable, but disarmed by the port
    assert calls_since(emulation, mark) == [("port_getn", None)]
    mechanism.modify(fd, R | ONESHOT)  # re-arms: pending readiness at once
    assert mechanism.poll(0.0, -1) == [(fd, POLLIN)]
    assert mechanism.poll(0.0, -1) == []


def test_removed_after_a_report_costs_no_call(
    emulation: EmulatedPorts, mechanism: EventPortsMechanism, pair: Pair
) -> None:
    fd = reported_readable(mechanism, pair, R)
    mark = len(emulation.calls)
    assert mechanism.unregister(fd) is True
    assert mechanism.poll(0.0, -1) == []
    # Not associated (reported), so neither a dissociate nor a re-association.
    assert calls_since(emulation, mark) == [("port_getn", None)]


def test_modified_after_a_report_is_associated_once(
    emulation: EmulatedPorts, mechanism: EventPortsMechanism, pair: Pair
) -> None:
    fd = reported_readable(mechanism, pair, R)
    mark = len(emulation.calls)
    mechanism.modify(fd, R | W)
    assert sorted(mechanism.poll(0.0, -1)) == [(fd, POLLIN | POLLOUT)]
    assert calls_since(emulation, mark) == [("port_associate", fd), ("port_getn", None)]


def test_unregister_dissociates_an_associated_fd(
    emulation: EmulatedPorts, mechanism: EventPortsMechanism, pair: Pair
) -> None:
    a, b = pair
    mechanism.register(b.fileno(), R)
    mechanism.register(a.fileno(), W)
    assert emulation.associated(port_of(mechanism)) == {b.fileno(): POLLIN, a.fileno(): POLLOUT}
    mechanism.unregister(a.fileno())
    assert emulation.associated(port_of(mechanism)) == {b.fileno(): POLLIN}
    assert mechanism.poll(0.0, -1) == []


def test_unregister_after_close_is_quiet(mechanism: EventPortsMechanism, pair: Pair) -> None:
    _, b = pair
    fd = b.fileno()
    mechanism.register(fd, R)
    b.close()  # closing dissociates: the port call fails, which is no error
    assert mechanism.unregister(fd) is True


def test_disarm_dissociates_a_oneshot_reported_from_buffered_bytes(
    emulation: EmulatedPorts, mechanism: EventPortsMechanism, pair: Pair
) -> None:
    a, b = pair
    mechanism.register(b.fileno(), R | ONESHOT)
    mechanism.disarm(b.fileno())
    a.send(b"x")
    assert emulation.associated(port_of(mechanism)) == {}
    assert mechanism.poll(0.0, -1) == []


def test_a_level_fd_closed_after_its_report_is_reported_invalid_once(
    mechanism: EventPortsMechanism,
) -> None:
    read_fd, write_fd = os.pipe()
    try:
        mechanism.register(read_fd, R)
        os.write(write_fd, b"x")
        assert mechanism.poll(1.0, -1) == [(read_fd, POLLIN)]
        os.close(read_fd)  # behind the handle's back: the re-association fails (EBADFD)
        started = time.monotonic()
        assert mechanism.poll(5.0, -1) == [(read_fd, POLLNVAL)]
        assert time.monotonic() - started < 1.0  # a report in hand: the wait did not block
        mechanism.unregister(read_fd)  # what the Context does with it
        assert mechanism.poll(0.0, -1) == []
    finally:
        os.close(write_fd)


def _free_pair_of_numbers() -> int:
    """An fd number N, N % 8 == 0, with N and N + 1 both free: a set of the two iterates
    N first (CPython's set of small ints), which fixes the order of a re-association."""
    for number in range(64, 512, 8):
        free = True
        for fd in (number, number + 1):
            try:
                os.fstat(fd)
                free = False
            except OSError:
                pass
        if free:
            return number
    pytest.skip("no two free fd numbers below 512")


def test_a_removed_fd_leaves_no_pending_invalid_report_to_its_number() -> None:
    """A level fd closed behind the handle's back is found by the next re-association
    (EBADFD) and queued as POLLNVAL; a signal handler that raises while the next fd is
    re-associated leaves wait() with that report still queued.  The program then removes
    the dead watcher and a new file gets the same number and is added: it must not be
    reported POLLNVAL, for which the Context would report the new, healthy watcher as ERROR
    and drop it."""
    class Boom(Exception):
        pass

    class SignalAfterAFailedReassociation(EmulatedPorts):
        armed = False
        failed = False

        def port_associate(self, port: int, source: int, obj: int, events: int, user: int) -> int:
            done = super().port_associate(port, source, obj, events, user)
            if self.armed and done < 0:
                self.failed = True
            elif self.armed and self.failed:
                self.armed = False
                raise Boom  # where the handler's exception would surface
            return done

    library = SignalAfterAFailedReassociation()
    mechanism = EventPortsMechanism.with_library(library)()
    number = _free_pair_of_numbers()
    dead, live = number, number + 1
    a, b = socket.socketpair()
    c, d = socket.socketpair()
    os.dup2(b.fileno(), dead)
    os.dup2(d.fileno(), live)
    try:
        mechanism.register(dead, R)
        mechanism.register(live, R)
        a.send(b"x")
        c.send(b"x")
        assert sorted(mechanism.poll(1.0, -1)) == [(dead, POLLIN), (live, POLLIN)]
        os.close(dead)  # behind the handle's back
        library.armed = True
        with pytest.raises(Boom):
            mechanism.poll(0.0, -1)
        assert library.failed
        mechanism.unregister(dead)  # what remove() or the Context's retiring does
        e, f = socket.socketpair()
        with e, f:
            os.dup2(f.fileno(), dead)  # a new, healthy file on the old number
            mechanism.register(dead, R)
            assert mechanism.poll(0.0, -1) == [(live, POLLIN)]
            assert mechanism.poll(0.0, -1) == [(live, POLLIN)]
    finally:
        mechanism.close()
        for fd in (dead, live):
            try:
                os.close(fd)
            except OSError:
                pass
        for sock in (a, b, c, d):
            sock.close()


def test_eintr_is_retried_with_the_time_left(
    emulation: EmulatedPorts, mechanism: EventPortsMechanism, pair: Pair
) -> None:
    a, b = pair
    mechanism.register(b.fileno(), R)
    emulation.interrupt_next = 2
    emulation.interrupt_after = 0.05
    started = time.monotonic()
    assert mechanism.poll(0.3, -1) == []
    elapsed = time.monotonic() - started
    assert 0.28 <= elapsed < 1.0, elapsed
    emulation.interrupt_next = 1
    a.send(b"x")
    assert mechanism.poll(1.0, -1) == [(b.fileno(), POLLIN)]


def test_etime_ends_a_wait_with_nothing(mechanism: EventPortsMechanism, pair: Pair) -> None:
    _, b = pair
    mechanism.register(b.fileno(), R)
    started = time.monotonic()
    assert mechanism.poll(0.1, -1) == []
    assert time.monotonic() - started >= 0.09


def test_more_ready_than_one_getn_takes(
    emulation: EmulatedPorts, mechanism: EventPortsMechanism, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ports, "PORT_MAX_LIST", 2)
    with socket_pairs(5) as socks:
        for a, _ in socks:
            mechanism.register(a.fileno(), W)
        mark = len(emulation.calls)
        got = mechanism.poll(1.0, 5)
        assert sorted(got) == sorted((a.fileno(), POLLOUT) for a, _ in socks)
        assert calls_since(emulation, mark) == [("port_getn", None)] * 3  # 2 + 2 + 1


def test_a_failing_port_create_is_an_oserror() -> None:
    class NoPorts(EmulatedPorts):
        def port_create(self) -> int:
            ctypes.set_errno(errno.EMFILE)
            return -1

    with pytest.raises(OSError) as info:
        EventPortsMechanism.with_library(NoPorts())()
    assert info.value.errno == errno.EMFILE


def test_close_closes_the_port(emulation: EmulatedPorts) -> None:
    made = EventPortsMechanism.with_library(emulation)()
    port = port_of(made)
    os.fstat(port)
    made.close()
    with pytest.raises(OSError):
        os.fstat(port)


# -- through a Context, on the emulation -------------------------------------------------------


def test_context_level_and_oneshot() -> None:
    a, b = socket.socketpair()
    with a, b, ep.Context(ep.Backend.EVENT_PORTS) as ctx:
        assert ctx.backend is ep.Backend.EVENT_PORTS
        level = ctx.add(b, Event.READ, "level")
        once = ctx.add(a, Event.WRITE | Event.ONESHOT, "once")
        a.send(b"x")
        first = {w.data: w.triggered_events for w in ctx.wait(1)}
        assert first == {"level": Event.READ, "once": Event.WRITE}
        assert [w.data for w in ctx.wait(0)] == ["level"]
        once.modify_events(Event.WRITE | Event.ONESHOT)
        assert {w.data for w in ctx.wait(0)} == {"level", "once"}
        level.remove()
        assert ctx.wait(0) == []


def test_context_max_events_rotation_gives_every_level_watcher_its_turn() -> None:
    with socket_pairs(3) as socks, ep.Context(ep.Backend.EVENT_PORTS) as ctx:
        for index, (a, _) in enumerate(socks):
            ctx.add(a, Event.WRITE, index)
        seen = [w.data for _ in range(3) for w in ctx.wait(0, 0, 1)]
        assert sorted(seen) == [0, 1, 2]


def test_a_closed_fd_is_ebadfd_and_handled_as_closed() -> None:
    # illumos's port_associate and port_dissociate say EBADFD for an object that is no open
    # fd (the emulation does too): a closed stream is dropped quietly, an int fd closed
    # behind the Context's back is ERROR once, and add() of one is INVALID, as elsewhere.
    a, b = socket.socketpair()
    read_fd, write_fd = os.pipe()
    with a, ep.Context(ep.Backend.EVENT_PORTS) as ctx:
        ctx.add(b, Event.READ, "stream")
        raw = ctx.add(read_fd, Event.READ, "int")
        a.send(b"x")
        os.write(write_fd, b"x")
        assert {w.data for w in ctx.wait(1)} == {"stream", "int"}
        b.close()
        os.close(read_fd)
        os.close(write_fd)
        assert [(w.data, w.triggered_events) for w in ctx.wait(0)] == [("int", Event.ERROR)]
        assert ctx.wait(0) == [] and len(ctx) == 0 and not raw.is_active()
        with pytest.raises(iopoll.FailedHandleAddError) as info:
            ctx.add(read_fd, Event.READ)
        assert info.value.code is iopoll.ErrorCode.INVALID
        assert info.value.errno == errno.EBADFD


def test_a_handler_raising_after_port_getn_loses_no_level_watcher() -> None:
    # A signal handler may run, and raise, after port_getn took events and before the
    # mechanism counted them: the level fds it took must still be associated again.
    class Boom(Exception):
        pass

    class SignalAfterGetn(EmulatedPorts):
        armed = False

        def port_getn(self, *args: object) -> int:
            done = super().port_getn(*args)  # type: ignore[arg-type]
            if self.armed:
                self.armed = False
                raise Boom  # where the handler's exception would surface
            return done

    library = SignalAfterGetn()
    mechanism = EventPortsMechanism.with_library(library)()
    a, b = socket.socketpair()
    try:
        mechanism.register(b.fileno(), R)
        a.send(b"x")  # b stays readable throughout
        library.armed = True
        with pytest.raises(Boom):
            mechanism.poll(1.0, -1)
        assert mechanism.poll(1.0, -1) == [(b.fileno(), POLLIN)]
        assert mechanism.poll(1.0, -1) == [(b.fileno(), POLLIN)]
    finally:
        mechanism.close()
        a.close()
        b.close()


# -- the conformance suite over the emulation --------------------------------------------------


class TestEventPortsBookkeepingGroups(
    SuiteFixtures, WaitRules, OneShotRules, BufferedRules, ClosedStreamRules
):
    """The rule groups about bookkeeping (waits and max_events, one-shots, buffered bytes,
    closed streams) on EVENT_PORTS over the emulation, in process.  Not a Solaris test."""

    impl = "event_ports_iopoll"
    backend_name = "EVENT_PORTS"
    strict_extras = True


@pytest.mark.slow
def test_whole_conformance_suite_over_the_emulation() -> None:
    """Every rule group, strict extras included, on EVENT_PORTS over the emulation, through
    ``python -m iopoll_conformance`` in a subprocess.  Not a Solaris test."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "iopoll_conformance",
            "event_ports_iopoll",
            "--backend",
            "EVENT_PORTS",
            "--strict-extras",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=TESTS,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "PASS:" in done.stdout
    assert " 0 failed" in done.stdout
