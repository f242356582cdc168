"""Handle and StreamPollHandle (SPEC 3)."""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ..support import Capabilities, poll_now, short_wait, socketpair


class _NoFileno:
    """An object that has no ``fileno``."""


class HandleRules:
    """Handle and StreamPollHandle (SPEC 3)."""

    @pytest.fixture
    def pipe_files(self) -> Iterator[tuple[Any, Any]]:
        """A pipe as two unbuffered file objects (reader, writer), closed afterwards."""
        read_fd, write_fd = os.pipe()
        reader = os.fdopen(read_fd, "rb", buffering=0)
        writer = os.fdopen(write_fd, "wb", buffering=0)
        yield reader, writer
        reader.close()
        writer.close()

    # -- StreamPollHandle construction --------------------------------------------------------

    def test_spec_3_handle_on_socket(self, api: ModuleType, pair: tuple[Any, Any]) -> None:
        """SPEC 3: a socket is accepted; .stream is it and .fileno() is its fd."""
        handle = api.StreamPollHandle(pair[0])
        assert isinstance(handle, api.Handle)
        assert handle.stream is pair[0]
        assert handle.fileno() == pair[0].fileno()
        assert handle.is_valid() is True

    def test_spec_3_handle_on_file(self, api: ModuleType, tmp_path: Path) -> None:
        """SPEC 3: a regular file object is accepted; .stream and .fileno() follow it."""
        with open(tmp_path / "f", "wb") as stream:
            handle = api.StreamPollHandle(stream)
            assert handle.stream is stream
            assert handle.fileno() == stream.fileno()
            assert handle.is_valid() is True

    def test_spec_3_handle_on_pipe(
        self, api: ModuleType, caps: Capabilities, ctx: Any, pipe_files: tuple[Any, Any]
    ) -> None:
        """SPEC 3: a pipe file object is accepted and watched through its fd (by a backend
        that watches pipes; a sockets-only one refuses it with NOSUPPORT, SPEC 2)."""
        reader, writer = pipe_files
        handle = api.StreamPollHandle(reader)
        assert handle.fileno() == reader.fileno()
        if caps.sockets_only:
            with pytest.raises(api.FailedHandleAddError) as error:
                ctx.add(handle, api.Event.READ, "pipe")
            assert error.value.code == api.ErrorCode.NOSUPPORT
            return
        watcher = ctx.add(handle, api.Event.READ, "pipe")
        assert poll_now(ctx) == []
        writer.write(b"x")
        assert short_wait(ctx) == [watcher]
        assert watcher.has_triggered(api.Event.READ)

    def test_spec_3_handle_on_int_fd(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 3: an int fd >= 0 is accepted: .stream is the int, .fileno() returns it."""
        fd = pair[1].fileno()
        handle = api.StreamPollHandle(fd)
        assert handle.stream == fd
        assert handle.fileno() == fd
        assert handle.is_valid() is True
        watcher = ctx.add(handle, api.Event.READ)
        pair[0].send(b"x")
        assert short_wait(ctx) == [watcher]
        watcher.remove()  # SPEC 3: an int fd's watcher is removed before closing the fd

    def test_spec_3_handle_without_fileno_is_type_error(self, api: ModuleType) -> None:
        """SPEC 3: an object without fileno() is a TypeError."""
        for bad in (_NoFileno(), "3", 3.0, None, b"3"):
            with pytest.raises(TypeError):
                api.StreamPollHandle(bad)

    def test_spec_3_negative_fd_is_value_error(self, api: ModuleType) -> None:
        """SPEC 3: a negative int fd is a ValueError."""
        for bad in (-1, -1000):
            with pytest.raises(ValueError):
                api.StreamPollHandle(bad)

    # -- is_valid() --------------------------------------------------------------------------

    def test_poll_stream_handle_closed_stream_socket(self, api: ModuleType) -> None:
        """B.61, php-src poll_stream_handle_closed_stream.phpt: is_valid() false once closed."""
        a, b = socketpair()
        handle = api.StreamPollHandle(a)
        assert handle.is_valid() is True
        a.close()
        b.close()
        assert handle.is_valid() is False
        assert handle.stream is a  # the closed stream is still there

    def test_poll_stream_handle_closed_stream_file(self, api: ModuleType, tmp_path: Path) -> None:
        """B.61, php-src poll_stream_handle_closed_stream.phpt: a closed file object too."""
        stream = open(tmp_path / "f", "wb")  # noqa: SIM115 - closed by the test itself
        handle = api.StreamPollHandle(stream)
        stream.close()
        assert handle.is_valid() is False
        assert handle.stream is stream

    def test_spec_3_closed_pipe_is_invalid(
        self, api: ModuleType, pipe_files: tuple[Any, Any]
    ) -> None:
        """SPEC 3: a closed pipe file object makes is_valid() false."""
        reader, _ = pipe_files
        handle = api.StreamPollHandle(reader)
        reader.close()
        assert handle.is_valid() is False

    # -- Handle, the abstract base -------------------------------------------------------------

    def test_spec_3_handle_is_abstract(self, api: ModuleType) -> None:
        """SPEC 3: Handle cannot be instantiated; a subclass must implement fileno()."""
        with pytest.raises(TypeError):
            api.Handle()

        class Incomplete(api.Handle):  # type: ignore[name-defined,misc]
            pass

        with pytest.raises(TypeError):
            Incomplete()

    def test_spec_3_third_party_handle(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 3: a third-party Handle subclass is added and reported like any other."""

        class SocketHandle(api.Handle):  # type: ignore[name-defined,misc]
            def __init__(self, sock: socket.socket) -> None:
                self.sock = sock

            def fileno(self) -> int:
                return self.sock.fileno()

        handle = SocketHandle(pair[1])
        watcher = ctx.add(handle, api.Event.READ, "mine")
        assert watcher.handle is handle
        assert poll_now(ctx) == []
        pair[0].send(b"x")
        assert short_wait(ctx) == [watcher]
        assert watcher.triggered_events == api.Event.READ
        assert watcher.data == "mine"

    def test_spec_4_add_wraps_plain_streams(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: add() wraps a plain stream in a StreamPollHandle whose .stream is it."""
        watcher = ctx.add(pair[1], api.Event.READ)
        assert isinstance(watcher.handle, api.StreamPollHandle)
        assert watcher.handle.stream is pair[1]

    def test_spec_4_add_keeps_given_handle(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.11: the watcher carries the very handle object given to add()."""
        handle = api.StreamPollHandle(pair[1])
        watcher = ctx.add(handle, api.Event.READ)
        assert watcher.handle is handle

    def test_spec_3_handle_does_not_dup(self, api: ModuleType) -> None:
        """SPEC 3: a handle on a stream uses the stream's own fd (no dup, nothing to close)."""
        with tempfile.TemporaryFile() as stream:
            handle = api.StreamPollHandle(stream)
            assert handle.fileno() == stream.fileno()
            stream.close()
            assert handle.is_valid() is False

    def test_spec_3_a_stream_whose_closed_is_true_is_invalid(self, api: ModuleType) -> None:
        """SPEC 3: is_valid() is false once ``.closed`` is true, even while ``fileno()``
        still answers an open fd; SPEC 4: add() of it is InvalidHandleError."""
        a, b = socketpair()

        class ClosedAlready:
            closed = True

            def fileno(self) -> int:
                return a.fileno()

        try:
            stream = ClosedAlready()
            assert api.StreamPollHandle(stream).is_valid() is False
            with api.Context() as ctx:
                with pytest.raises(api.InvalidHandleError):
                    ctx.add(stream, api.Event.READ)
                assert len(ctx) == 0
        finally:
            a.close()
            b.close()
