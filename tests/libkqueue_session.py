"""A pytest plugin for runs on KQUEUE over libkqueue: ``-p libkqueue_session``.

It makes ``Backend.KQUEUE`` available for the whole session (``tests/libkqueue.py``'s
binding, from ``IOPOLL_TEST_LIBKQUEUE``) before collection, so that tests parametrized on
``Backend.available_backends()`` include it, and it marks the cases that fail only because
of libkqueue (a real BSD kqueue passes them) as strict xfails naming the libkqueue
behaviour.  ``tests/test_kqueue_libkqueue.py`` runs the conformance suite and the project's
backend tests with it, each in a process of its own.
"""

from __future__ import annotations

import os

import pytest

import libkqueue

_CLOSE = (
    "libkqueue cannot see close(): the knote of a closed fd lives on (on the file a dup keeps "
    "open), so a new stream on the reused fd number is reported with the old file's readiness"
)
_SO_ERROR = (
    "libkqueue reads SO_ERROR with getsockopt() to fill fflags, which clears the socket "
    "error: ERROR shows on the first wait only, and the application then reads 0"
)
_BINDING = (
    "over the test binding, kevent() runs in Python frames of tests/libkqueue.py, which "
    "PEP 475's rule takes for a signal handler's: a kqueue a handler closed comes out as the "
    "binding's EBADF, where BSD's select.kqueue (C) gives the PollError of a closed Context"
)
_DEVNULL = (
    "libkqueue's epoll refuses /dev/null with EPERM (read as PERMISSION), where a BSD kqueue "
    "takes it or refuses it as a device it cannot watch (NOSUPPORT)"
)

# Test name (with its parameters) -> why it fails over libkqueue only.
XFAILS: dict[str, str] = {
    "test_poll_stream_closed_dup_fd[KQUEUE-False]": _CLOSE,
    "test_poll_stream_closed_dup_fd[KQUEUE-True]": _CLOSE,
    "test_poll_stream_sock_rw_close[KQUEUE]": _SO_ERROR,
    "test_spec_6_2_waiting_leaves_the_socket_error_to_the_application[KQUEUE]": _SO_ERROR,
    "test_poll_stream_add_unpollable[KQUEUE-devnull]": _DEVNULL,
    "test_spec_6_7_unpollable_always_ready_read_write[KQUEUE-devnull]": _DEVNULL,
    "test_a_handler_that_changes_the_context_during_the_wait[close-None-KQUEUE]": _BINDING,
    "test_a_handler_that_changes_the_context_during_the_wait[close-8-KQUEUE]": _BINDING,
    "test_a_context_a_handler_closes_ends_the_wait_with_poll_error[KQUEUE]": _BINDING,
}

# Of those, the cases whose outcome over libkqueue varies from run to run: not strict.
# With the closed stream noticed first, its watcher's EV_DELETE reaches libkqueue after
# close(), while a dup keeps the old file's epoll registration alive; the old file's
# readiness then mostly shows on the new stream, but in one full CI run (2026-12-07) it
# did not, and the case passed.  Not traced inside libkqueue; alone it fails 20 runs of 20.
NOT_STRICT = frozenset({"test_poll_stream_closed_dup_fd[KQUEUE-True]"})

# test_speedups_differential.py's cases written for one backend, run on KQUEUE
# (IOPOLL_TEST_FAST_BACKEND=KQUEUE, with the C build over libkqueue).
if os.environ.get("IOPOLL_TEST_FAST_BACKEND") == "KQUEUE":
    XFAILS.update(
        {
            f"test_a_stream_closed_behind_a_dup_is_never_reported[{module}-{kind}-{form}]": _CLOSE
            for module in ("iopoll", "pure_iopoll")
            for kind in ("level", "oneshot")
            for form in ("wait(0)", "wait(0.0)", "wait(0,0)", "wait(0.05)", "wait(None)")
        }
    )
    XFAILS["test_closed_stream_transcripts_agree[level]"] = _CLOSE
    XFAILS["test_closed_stream_transcripts_agree[oneshot]"] = _CLOSE

_INSTALLED: list[libkqueue.Installation] = []


def pytest_configure(config: pytest.Config) -> None:
    import iopoll

    if iopoll.Backend.KQUEUE.is_available():
        return  # kqueue_over_libkqueue (the implementation module) installed it already
    path = libkqueue.library_path()
    if path is None:
        raise pytest.UsageError(libkqueue.HOW_TO_GET_IT)
    _INSTALLED.append(libkqueue.Installation(libkqueue.load(path)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        reason = XFAILS.get(item.name)
        if reason is not None:
            strict = item.name not in NOT_STRICT
            item.add_marker(pytest.mark.xfail(reason=reason, strict=strict))


def pytest_unconfigure(config: pytest.Config) -> None:
    while _INSTALLED:
        _INSTALLED.pop().undo()
