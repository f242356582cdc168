"""Regular files, /dev/null and pipes (SPEC 6.7)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from ..streams import close_all, nonblocking_pipe
from ..support import Capabilities, poll_now, reported, short_wait, waits
from .extras import skip_unless_stated

# Why a pipe case is skipped by default on select semantics.
_SOCKETS_ONLY = "SPEC 7 states select's hang-up mapping for sockets only"
# Why every pipe case is skipped on a sockets-only backend (test_spec_2_sockets_only_pipe
# holds it to the refusal instead).
_NO_PIPES = "SPEC 2: this backend watches sockets only (a pipe is refused with NOSUPPORT)"


@contextmanager
def _unpollable(kind: str) -> Iterator[Any]:
    """An open regular file (with some content) or ``/dev/null``."""
    if kind == "devnull":
        with open(os.devnull, "r+b", buffering=0) as null:
            yield null
        return
    with tempfile.TemporaryFile() as stream:
        stream.write(b"file content")
        stream.seek(0)
        yield stream


@contextmanager
def _pipe() -> Iterator[tuple[Any, Any]]:
    read_end, write_end = nonblocking_pipe()
    try:
        yield read_end, write_end
    finally:
        close_all(read_end, write_end)


def _skip_on_sockets_only(caps: Capabilities) -> None:
    if caps.sockets_only:
        pytest.skip(_NO_PIPES)


def _device_watcher(api: Any, ctx: Any, stream: Any, events: Any, kind: str) -> Any | None:
    """Add ``/dev/null`` where the backend may refuse devices (KQUEUE: where SPEC 6.7 is
    silent, a device the OS's kqueue cannot watch is refused with NOSUPPORT, as FreeBSD's
    ENODEV for ``/dev/null``).  Returns the watcher, or None after checking the refusal.
    A device accepted there is reported as the OS's kqueue says: only what was asked."""
    try:
        watcher = ctx.add(stream, events, kind)
    except api.FailedHandleAddError as error:
        assert error.value.code == api.ErrorCode.NOSUPPORT
        assert len(ctx) == 0
        return None
    triggered = reported(poll_now(ctx)).get(kind, api.Event(0))
    assert triggered & ~(watcher.watched_events | api.Event.ERROR) == api.Event(0)
    return watcher


def _fill_pipe(write_end: Any) -> None:
    while True:
        try:
            if write_end.write(b"x" * 65536) is None:
                return
        except BlockingIOError:
            return


class FileRules:
    """Regular files, /dev/null and pipes (SPEC 6.7)."""

    @pytest.mark.parametrize("kind", ["file", "devnull"])
    def test_poll_stream_add_unpollable(
        self, api: Any, caps: Capabilities, ctx: Any, pair: Any, kind: str
    ) -> None:
        """B.17, php-src poll_stream_add_unpollable.phpt, SPEC 6.7.

        POLL and SELECT accept regular files and /dev/null and report them always ready;
        EPOLL (and WSAPOLL, sockets only: SPEC 2) refuses them with NOSUPPORT, and a socket
        added afterwards still works.  KQUEUE (SPEC 6.7 is silent): a file not read to its
        end is READ; /dev/null may be refused with NOSUPPORT (see ``_device_watcher``).
        """
        a, b = pair
        with _unpollable(kind) as stream:
            if kind == "devnull" and caps.devices_may_be_refused:
                device = _device_watcher(api, ctx, stream, api.Event.READ, kind)
                if device is not None:
                    device.remove()
                watcher = ctx.add(b, api.Event.READ, "socket")
                a.send(b"x")
                assert short_wait(ctx) == [watcher]
                assert watcher.triggered_events == api.Event.READ
                return
            if not caps.regular_files:
                for _ in range(2):  # refused every time: nothing was half-registered
                    with pytest.raises(api.FailedHandleAddError) as error:
                        ctx.add(stream, api.Event.READ, kind)
                    assert error.value.code == api.ErrorCode.NOSUPPORT
                    assert isinstance(error.value, api.FailedPollOperationError)
                assert len(ctx) == 0
                watcher = ctx.add(b, api.Event.READ, "socket")
                assert poll_now(ctx) == []
                a.send(b"x")
                assert short_wait(ctx) == [watcher]
                assert watcher.triggered_events == api.Event.READ
                return
            ctx.add(stream, api.Event.READ, kind)
            expected = {kind: api.Event.READ}
            assert waits(ctx, 3) == [expected] * 3
            ctx.add(b, api.Event.READ, "socket")
            a.send(b"x")
            assert reported(short_wait(ctx)) == {**expected, "socket": api.Event.READ}

    @pytest.mark.parametrize("kind", ["file", "devnull"])
    def test_spec_6_7_unpollable_always_ready_read_write(
        self, api: Any, caps: Capabilities, ctx: Any, kind: str
    ) -> None:
        """SPEC 6.7: a regular file or /dev/null is ready for READ and WRITE on every wait.

        KQUEUE (SPEC 6.7 is silent): a file is READ only while its offset is before end of
        file, WRITE always; /dev/null may be refused (``_device_watcher``).
        """
        if not caps.regular_files:
            pytest.skip("backend refuses regular files")
        with _unpollable(kind) as stream:
            if kind == "devnull" and caps.devices_may_be_refused:
                _device_watcher(api, ctx, stream, [api.Event.READ, api.Event.WRITE], kind)
                return
            watcher = ctx.add(stream, [api.Event.READ, api.Event.WRITE], kind)
            both = {kind: api.Event.READ | api.Event.WRITE}
            assert reported(poll_now(ctx)) == both
            assert waits(ctx, 2) == [both] * 2
            watcher.modify_events(api.Event.WRITE)
            assert reported(poll_now(ctx)) == {kind: api.Event.WRITE}
            stream.read()
            watcher.modify_events(api.Event.READ)
            if caps.files_ready_at_eof:
                # Reading to the end changes nothing: end of file is readable too.
                assert reported(poll_now(ctx)) == {kind: api.Event.READ}
            else:
                # KQUEUE: at end of file not READ; WRITE is still always ready.
                assert poll_now(ctx) == []
                watcher.modify_events([api.Event.READ, api.Event.WRITE])
                assert reported(poll_now(ctx)) == {kind: api.Event.WRITE}

    def test_spec_6_7_unpollable_oneshot(self, api: Any, caps: Capabilities, ctx: Any) -> None:
        """SPEC 6.4 and 6.7: a one-shot on an always-ready file fires once per arming."""
        if not caps.regular_files:
            pytest.skip("backend refuses regular files")
        with _unpollable("file") as stream:
            watcher = ctx.add(stream, [api.Event.READ, api.Event.ONESHOT], "file")
            assert reported(poll_now(ctx)) == {"file": api.Event.READ}
            assert short_wait(ctx) == []
            watcher.modify_events([api.Event.READ, api.Event.ONESHOT])
            assert reported(poll_now(ctx)) == {"file": api.Event.READ}
            assert poll_now(ctx) == []

    def test_spec_2_sockets_only_pipe(self, api: Any, caps: Capabilities, ctx: Any) -> None:
        """SPEC 2: a sockets-only backend (WSAPOLL) refuses both ends of a pipe with
        NOSUPPORT, and nothing is half-registered."""
        if not caps.sockets_only:
            pytest.skip("the backend watches pipes (the other cases of this group)")
        with _pipe() as (read_end, write_end):
            for end in (read_end, write_end, read_end.fileno()):
                with pytest.raises(api.FailedHandleAddError) as error:
                    ctx.add(end, api.Event.READ, "pipe")
                assert error.value.code == api.ErrorCode.NOSUPPORT
            assert len(ctx) == 0
            write_end.write(b"x")
            assert poll_now(ctx) == []

    def test_spec_6_7_pipe_read_end(self, api: Any, caps: Capabilities, ctx: Any) -> None:
        """SPEC 6.3 and 6.7: a pipe's read end is READ while it holds data, level."""
        _skip_on_sockets_only(caps)
        with _pipe() as (read_end, write_end):
            ctx.add(read_end, api.Event.READ, "r")
            assert poll_now(ctx) == []
            write_end.write(b"data")
            assert waits(ctx, 2) == [{"r": api.Event.READ}] * 2
            assert read_end.read(100) == b"data"
            assert poll_now(ctx) == []

    def test_spec_6_7_pipe_read_end_eof_is_hangup(
        self, api: Any, caps: Capabilities, ctx: Any, strict_extras_on: bool
    ) -> None:
        """SPEC 6.7: the write end closed, an empty read end is HANGUP (no READ), every wait.

        On select semantics that is this project's choice (it follows poll()): SPEC 7
        gives select's hang-up mapping for sockets only.
        """
        _skip_on_sockets_only(caps)
        skip_unless_stated(not caps.select_semantics, strict_extras_on, _SOCKETS_ONLY)
        with _pipe() as (read_end, write_end):
            watcher = ctx.add(read_end, api.Event.READ, "r")
            write_end.write(b"last")
            write_end.close()
            # Bytes still there: READ (possibly with HANGUP already).
            first = reported(short_wait(ctx))
            assert api.Event.READ in first["r"]
            assert first["r"] & ~(api.Event.READ | api.Event.HANGUP) == api.Event(0)
            assert read_end.read(100) == b"last"
            expected = {"r": api.Event.HANGUP}
            assert waits(ctx, 2) == [expected] * 2
            assert read_end.read(100) == b""
            assert watcher.is_active()

    def test_spec_6_7_pipe_write_end(self, api: Any, caps: Capabilities, ctx: Any) -> None:
        """SPEC 6.3 and 6.7: a pipe's write end is WRITE until full, again once read."""
        _skip_on_sockets_only(caps)
        with _pipe() as (read_end, write_end):
            ctx.add(write_end, api.Event.WRITE, "w")
            assert waits(ctx, 2) == [{"w": api.Event.WRITE}] * 2
            _fill_pipe(write_end)
            assert poll_now(ctx) == []
            while read_end.read(65536):
                pass
            assert reported(short_wait(ctx)) == {"w": api.Event.WRITE}

    def test_spec_6_7_pipe_write_end_reader_closed(
        self, api: Any, caps: Capabilities, ctx: Any, strict_extras_on: bool
    ) -> None:
        """SPEC 6.2 and 6.7: the read end closed, the write end is broken: WRITE|ERROR natively.

        select() has no error report of its own: there the break shows as WRITE with
        ERROR or HANGUP (this project's choice: SPEC 7 gives select's hang-up mapping for
        sockets only).  Either way, asked for WRITE only.
        """
        _skip_on_sockets_only(caps)
        skip_unless_stated(not caps.select_semantics, strict_extras_on, _SOCKETS_ONLY)
        with _pipe() as (read_end, write_end):
            ctx.add(write_end, api.Event.WRITE, "w")
            read_end.close()
            for _ in range(2):
                triggered = reported(short_wait(ctx))["w"]
                if caps.select_semantics:
                    assert api.Event.WRITE in triggered
                    assert triggered & (api.Event.ERROR | api.Event.HANGUP)
                    assert api.Event.READ not in triggered
                else:
                    assert triggered == api.Event.WRITE | api.Event.ERROR
            with pytest.raises(BrokenPipeError):
                write_end.write(b"x")

    def test_spec_6_7_pipe_write_end_reader_closed_with_bytes_left(
        self, api: Any, caps: Capabilities, ctx: Any, strict_extras_on: bool
    ) -> None:
        """SPEC 6.2 and 6.7: bytes the reader never read do not hide the break of a write
        end: ERROR (select(): ERROR or HANGUP, as above) for a watcher of READ, WRITE or
        both, with WRITE where asked.  (A READ watcher of a broken write end is READ as
        well on kqueue, whose read filter sees the end of file: not asserted either way.)"""
        _skip_on_sockets_only(caps)
        skip_unless_stated(not caps.select_semantics, strict_extras_on, _SOCKETS_ONLY)
        asked = {
            "r": api.Event.READ,
            "w": api.Event.WRITE,
            "rw": api.Event.READ | api.Event.WRITE,
        }
        pipes = [nonblocking_pipe() for _ in asked]
        try:
            for (read_end, write_end), (label, events) in zip(pipes, asked.items(), strict=True):
                write_end.write(b"unread")
                ctx.add(write_end, events, label)
                read_end.close()
            for _ in range(2):
                found = reported(short_wait(ctx))
                assert set(found) == set(asked)
                for label, triggered in found.items():
                    wants_write = api.Event.WRITE in asked[label]
                    assert (api.Event.WRITE in triggered) == wants_write, label
                    if caps.select_semantics:
                        assert triggered & (api.Event.ERROR | api.Event.HANGUP), label
                    else:
                        assert api.Event.ERROR in triggered, label
        finally:
            for read_end, write_end in pipes:
                close_all(read_end, write_end)

    def test_spec_6_7_pipe_write_end_not_readable(
        self, api: Any, caps: Capabilities, ctx: Any
    ) -> None:
        """SPEC 6.2: a READ watcher on a healthy pipe write end is never reported."""
        _skip_on_sockets_only(caps)
        with _pipe() as (read_end, write_end):
            ctx.add(write_end, api.Event.READ, "w")
            ctx.add(read_end, api.Event.READ, "r")
            write_end.write(b"x")
            assert waits(ctx, 2) == [{"r": api.Event.READ}] * 2
