"""The KQUEUE backend's translation between kevents and Event, run on any platform.

They hold the pure functions of ``iopoll._kqueue`` to kqueue's documented behaviour
(kevent(2)) on any platform: two filters per fd, ``EV_CLEAR`` for edge-triggering (kept
from a knote's creation, so a mode change deletes first), ``EV_EOF`` for end of file with
the socket error in ``fflags``, ``EV_ERROR`` for a failed change.  The mechanism itself runs
over libkqueue in ``tests/test_kqueue_libkqueue.py``.
"""

from __future__ import annotations

import errno
import os
import socket

import pytest

from iopoll import Backend, ErrorCode, Event
from iopoll._kqueue import (
    EV_ADD,
    EV_CLEAR,
    EV_DELETE,
    EV_ENABLE,
    EV_EOF,
    EV_ERROR,
    FILE,
    FILTER_READ,
    FILTER_WRITE,
    OTHER,
    PIPE_READ_END,
    PIPE_WRITE_END,
    READ_EOF,
    SOCKET,
    KqueueMechanism,
    file_kind,
    filter_changes,
    kind_of,
    merge_kevents,
    readiness,
    report,
)

R, W = Event.READ.value, Event.WRITE.value
E, H, RH = Event.ERROR.value, Event.HANGUP.value, Event.READ_HANGUP.value
ET = Event.EDGE_TRIGGERED.value


def test_new_read_watcher_adds_the_read_filter_only() -> None:
    assert filter_changes(0, R) == [(FILTER_READ, EV_ADD | EV_ENABLE)]


def test_read_write_watcher_adds_both_filters() -> None:
    assert filter_changes(0, R | W) == [
        (FILTER_READ, EV_ADD | EV_ENABLE),
        (FILTER_WRITE, EV_ADD | EV_ENABLE),
    ]


def test_edge_triggered_sets_ev_clear_on_each_filter() -> None:
    changes = filter_changes(0, R | W | Event.EDGE_TRIGGERED)
    assert [flags & EV_CLEAR for _, flags in changes] == [EV_CLEAR, EV_CLEAR]


def test_dropping_write_deletes_the_write_filter() -> None:
    assert filter_changes(R | W, R) == [
        (FILTER_READ, EV_ADD | EV_ENABLE),
        (FILTER_WRITE, EV_DELETE),
    ]


def test_unregistering_deletes_every_filter_it_had() -> None:
    assert filter_changes(R | W, 0) == [(FILTER_READ, EV_DELETE), (FILTER_WRITE, EV_DELETE)]
    assert filter_changes(R, 0) == [(FILTER_READ, EV_DELETE)]


def test_switching_mode_deletes_the_filter_first() -> None:
    # BSD reads EV_CLEAR only when it creates a knote: a re-EV_ADD would keep the old mode.
    assert filter_changes(R, R | ET) == [
        (FILTER_READ, EV_DELETE),
        (FILTER_READ, EV_ADD | EV_ENABLE | EV_CLEAR),
    ]
    assert filter_changes(R | W | ET, R | W) == [
        (FILTER_READ, EV_DELETE),
        (FILTER_READ, EV_ADD | EV_ENABLE),
        (FILTER_WRITE, EV_DELETE),
        (FILTER_WRITE, EV_ADD | EV_ENABLE),
    ]


def test_read_hangup_alone_is_an_edge_read_filter() -> None:
    # Unread bytes must not fire it on every wait; end of file is kept level by the mechanism.
    assert filter_changes(0, RH) == [(FILTER_READ, EV_ADD | EV_ENABLE | EV_CLEAR)]
    assert filter_changes(RH, R | RH) == [
        (FILTER_READ, EV_DELETE),
        (FILTER_READ, EV_ADD | EV_ENABLE),
    ]


@pytest.mark.parametrize("events", [RH, H, E | H, Event.ONESHOT], ids=repr)
def test_a_watcher_without_read_or_write_is_an_edge_read_filter(events: int) -> None:
    # kqueue has no filter for errors and hang-ups alone: the read filter sees the end of
    # file, edge so that bytes do not fire it, and the mechanism keeps it level.
    assert filter_changes(0, events) == [(FILTER_READ, EV_ADD | EV_ENABLE | EV_CLEAR)]
    assert filter_changes(events, 0) == [(FILTER_READ, EV_DELETE)]


@pytest.mark.parametrize("events", [RH, H], ids=repr)
def test_its_switch_to_and_from_edge_makes_the_read_filter_afresh(events: int) -> None:
    # EV_CLEAR in both modes, but the level one keeps its end of file itself: a fresh
    # filter looks at the fd again (libkqueue's EV_ADD on an existing one does not).
    fresh = [(FILTER_READ, EV_DELETE), (FILTER_READ, EV_ADD | EV_ENABLE | EV_CLEAR)]
    assert filter_changes(events, events | ET) == fresh
    assert filter_changes(events | ET, events) == fresh
    assert filter_changes(events, events) == [(FILTER_READ, EV_ADD | EV_ENABLE | EV_CLEAR)]


def test_oneshot_is_left_to_the_context() -> None:
    # One-shot is emulated by the Context (disarm deletes the filters), not EV_ONESHOT.
    assert filter_changes(0, R | Event.ONESHOT) == filter_changes(0, R)


@pytest.mark.parametrize(
    ("kfilter", "flags", "fflags", "data", "kind", "expected"),
    [
        (FILTER_READ, 0, 0, 5, SOCKET, R),
        (FILTER_WRITE, 0, 0, 0, SOCKET, W),
        # The peer sends no more (half-close or close): HANGUP only once writing is over.
        (FILTER_READ, EV_EOF, 0, 0, SOCKET, READ_EOF | R | RH),
        (FILTER_READ, EV_EOF, 54, 0, SOCKET, READ_EOF | R | RH | E | H),  # ECONNRESET
        (FILTER_WRITE, EV_EOF, 0, 0, SOCKET, W | H),
        (FILTER_WRITE, EV_EOF, 54, 0, SOCKET, W | H | E),
        # A pipe: the writer gone is HANGUP, READ while bytes are left; the reader gone is
        # a broken pipe: WRITE|ERROR.
        (FILTER_READ, EV_EOF, 0, 4, OTHER, READ_EOF | R | H),
        (FILTER_READ, EV_EOF, 0, 0, OTHER, READ_EOF | H),
        (FILTER_WRITE, EV_EOF, 0, 0, OTHER, W | E),
        (FILTER_READ, EV_EOF, 0, 4, PIPE_READ_END, READ_EOF | R | H),
        (FILTER_WRITE, EV_EOF, 0, 0, PIPE_WRITE_END, W | E),
        # Each filter asked of the other end (libuv reads a write end to see its reader
        # go): the other side gone is poll's POLLERR on a write end, POLLHUP on a read end;
        # an error in fflags (libkqueue sets EIO there) is not a socket's error.
        (FILTER_READ, EV_EOF, 0, 0, PIPE_WRITE_END, READ_EOF | E),
        (FILTER_READ, EV_EOF, 5, 0, PIPE_WRITE_END, READ_EOF | E),
        (FILTER_WRITE, EV_EOF, 0, 0, PIPE_READ_END, H),
        (FILTER_READ, EV_EOF, 5, 1, PIPE_READ_END, READ_EOF | R | H),
        (FILTER_READ, 0, 0, 7, FILE, R),  # a regular file before its end
        (FILTER_READ, EV_ERROR, 9, 0, SOCKET, E),  # EBADF on a change
    ],
)
def test_readiness_of_one_kevent(
    kfilter: int, flags: int, fflags: int, data: int, kind: int, expected: int
) -> None:
    assert readiness(kfilter, flags, fflags, data, kind) == expected


def test_report_keeps_what_was_asked_and_error_and_hangup_always() -> None:
    everything = READ_EOF | R | W | RH | E | H
    assert report(everything, R) == R | E | H
    assert report(everything, R | RH) == R | RH | E | H
    assert report(everything, W | ET) == W | E | H
    assert report(READ_EOF | R | RH, W) == 0


def test_kind_of_tells_a_pipes_ends_apart() -> None:
    r, w = os.pipe()
    try:
        assert (kind_of(r), kind_of(w)) == (PIPE_READ_END, PIPE_WRITE_END)
    finally:
        os.close(r)
        os.close(w)
    a, b = socket.socketpair()
    with a, b:
        assert kind_of(a.fileno()) == SOCKET


def test_file_kind() -> None:
    import stat

    assert file_kind(stat.S_IFSOCK) == SOCKET
    assert file_kind(stat.S_IFREG) == FILE
    assert file_kind(stat.S_IFIFO) == OTHER
    assert file_kind(stat.S_IFCHR) == OTHER


def test_read_and_write_reports_of_one_fd_merge_into_one_entry() -> None:
    # php-src poll_stream_sock_rw_max_events (B.26): one entry per fd, never one per filter.
    merged = merge_kevents(
        [(5, FILTER_READ, 0, 0, 1), (6, FILTER_WRITE, 0, 0, 0), (5, FILTER_WRITE, EV_EOF, 0, 0)]
    )
    assert merged == {5: R | W | H, 6: W}
    assert list(merged) == [5, 6]


def test_kqueue_is_unavailable_on_linux() -> None:
    import sys

    if sys.platform != "linux":
        pytest.skip("Linux only")
    assert not Backend.KQUEUE.is_available()
    assert not Backend.KQUEUE.supports_edge_triggering()


def test_a_device_kqueue_cannot_watch_is_nosupport() -> None:
    """FreeBSD's kqueue refuses what devfs cannot watch (``/dev/null``) with ENODEV, which
    README's backend table promises as ``NOSUPPORT``.  libkqueue never says ENODEV (its
    epoll says EPERM there, a strict xfail), so no run here can show it: the table, pinned."""
    assert KqueueMechanism.errno_codes == {errno.ENODEV: ErrorCode.NOSUPPORT}
