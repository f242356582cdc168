"""The KQUEUE backend's translation between kevents and Event, run on any platform.

kqueue itself cannot run on Linux, so these tests hold the pure functions of
``iopoll._kqueue`` to kqueue's documented behaviour (kevent(2)): two filters per fd,
``EV_CLEAR`` for edge-triggering, ``EV_EOF`` for end of file with the socket error in
``fflags``, ``EV_ERROR`` for a failed change.
"""

from __future__ import annotations

import pytest

from iopoll import Backend, Event
from iopoll._kqueue import (
    EV_ADD,
    EV_CLEAR,
    EV_DELETE,
    EV_ENABLE,
    EV_EOF,
    EV_ERROR,
    FILTER_READ,
    FILTER_WRITE,
    filter_changes,
    merge_kevents,
    readiness,
)

R, W = Event.READ.value, Event.WRITE.value


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


def test_oneshot_is_left_to_the_context() -> None:
    # One-shot is emulated by the Context (disarm deletes the filters), not EV_ONESHOT.
    assert filter_changes(0, R | Event.ONESHOT) == filter_changes(0, R)


@pytest.mark.parametrize(
    ("kfilter", "flags", "fflags", "expected"),
    [
        (FILTER_READ, 0, 0, Event.READ),
        (FILTER_WRITE, 0, 0, Event.WRITE),
        (FILTER_READ, EV_EOF, 0, Event.READ | Event.HANGUP),
        (FILTER_WRITE, EV_EOF, 0, Event.WRITE | Event.HANGUP),
        (FILTER_WRITE, EV_EOF, 54, Event.WRITE | Event.HANGUP | Event.ERROR),  # ECONNRESET
        (FILTER_READ, EV_ERROR, 9, Event.ERROR),  # EBADF on a change
    ],
)
def test_readiness_of_one_kevent(kfilter: int, flags: int, fflags: int, expected: Event) -> None:
    assert readiness(kfilter, flags, fflags) == expected.value


def test_read_and_write_reports_of_one_fd_merge_into_one_entry() -> None:
    # php-src poll_stream_sock_rw_max_events (B.26): one entry per fd, never one per filter.
    merged = merge_kevents(
        [(5, FILTER_READ, 0, 0), (6, FILTER_WRITE, 0, 0), (5, FILTER_WRITE, EV_EOF, 0)]
    )
    assert dict(merged) == {5: R | W | Event.HANGUP.value, 6: W}
    assert len(merged) == 2


def test_kqueue_is_unavailable_on_linux() -> None:
    import sys

    if sys.platform != "linux":
        pytest.skip("Linux only")
    assert not Backend.KQUEUE.is_available()
    assert not Backend.KQUEUE.supports_edge_triggering()
