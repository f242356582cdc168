"""``on_readable()`` and ``on_writable()``: readiness, several callbacks per fd, refused
connects, hang-ups, and streams closed while watched.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import pytest

from iopoll.loop import Driver, InvalidCallbackError

from .callbacks import receive_once
from .harness import DriverHarness


class StreamRules(DriverHarness):
    """``on_readable()`` and ``on_writable()``: readiness, several callbacks per fd, refused
    connects, hang-ups, and streams closed while watched.
    """

    def test_on_writable_fires(self, loop: Driver) -> None:
        _, writer = self.pair()
        self.assert_writable_runs_once(loop, writer)

    def test_disabled_writable_is_silent_until_enabled(self, loop: Driver) -> None:
        _, writer = self.pair()
        got: list[str] = []
        callback_id = loop.disable(self.writable_once(loop, writer, got))

        def enable(cid: str) -> None:
            got.append("enable")
            loop.enable(callback_id)

        loop.delay(0.02, enable)
        loop.run()
        assert got == ["enable", callback_id]

    def test_several_callbacks_per_fd_toggled_independently(self, loop: Driver) -> None:
        reader, writer = self.pair()
        writer.send(b"x")
        counts = {"r1": 0, "r2": 0, "w1": 0, "w2": 0}

        def count(name: str) -> Callable[[str, Any], None]:
            return lambda cid, s: counts.__setitem__(name, counts[name] + 1)

        r1 = loop.on_readable(reader, count("r1"))
        r2 = loop.on_readable(reader, count("r2"))
        w1 = loop.on_writable(reader, count("w1"))
        w2 = loop.on_writable(reader, count("w2"))
        loop.delay(0, lambda cid: loop.stop())
        loop.run()
        assert counts == {"r1": 1, "r2": 1, "w1": 1, "w2": 1}
        loop.disable(r1)
        loop.disable(w2)
        loop.delay(0, lambda cid: loop.stop())
        loop.run()
        assert counts == {"r1": 1, "r2": 2, "w1": 2, "w2": 1}
        loop.disable(r2)
        loop.disable(w1)
        loop.enable(r1)
        loop.delay(0, lambda cid: loop.stop())
        loop.run()
        assert counts == {"r1": 2, "r2": 2, "w1": 2, "w2": 1}
        reader.recv(10)
        for callback_id in (r1, r2, w1, w2):
            loop.cancel(callback_id)

    def test_refused_connect_reports_writable_once(self, loop: Driver) -> None:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        listener.close()  # nothing listens there now
        client = socket.socket()
        self._sockets.append(client)
        client.setblocking(False)
        try:
            client.connect(("127.0.0.1", port))
        except (BlockingIOError, ConnectionRefusedError):
            pass
        got: list[int] = []

        def fn(cid: str, sock: Any) -> None:
            got.append(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
            loop.cancel(cid)

        loop.on_writable(client, fn)
        loop.run()
        assert len(got) == 1

    def test_hangup_wakes_readers_and_writers(self, loop: Driver) -> None:
        reader, writer = self.pair()
        writer.send(b"unread")
        got: list[str] = []
        self.writable_once(loop, writer, got)
        reader.close()  # the writer's peer is gone: error and hang-up on the writer
        self._sockets.remove(reader)
        loop.run()
        assert len(got) == 1

    def test_cancel_after_stream_is_closed(self, loop: Driver) -> None:
        reader, writer = self.pair()
        callback_id = loop.on_readable(reader, lambda cid, s: None)
        loop.delay(0, lambda cid: loop.stop())
        loop.run()  # the callback is active in the backend now
        reader.close()
        loop.cancel(callback_id)
        assert callback_id not in loop.get_identifiers()
        self.assert_writable_runs_once(loop, writer)

    def test_stream_closed_and_fd_reused(self, loop: Driver) -> None:
        reader, _writer = self.pair()
        stale = loop.on_readable(reader, lambda cid, s: None)
        loop.delay(0, lambda cid: loop.stop())
        loop.run()
        reader.close()
        new_reader, new_writer = self.pair()
        got = receive_once(loop, new_reader)
        new_writer.send(b"new")
        loop.unreference(stale)
        # A driver may report the stale callback, whose stream was closed before it was
        # cancelled, to the error handler (SPEC 9.1: IoPollDriver does); nothing else.
        errors: list[Exception] = []
        loop.set_error_handler(errors.append)
        loop.run()
        assert got == [b"new"]
        assert all(
            isinstance(error, InvalidCallbackError) and error.callback_id == stale
            for error in errors
        ), errors
        loop.cancel(stale)

    def test_a_watched_stream_closed_never_keeps_run_sleeping(self, loop: Driver) -> None:
        # SPEC 9.1: a stream closed before its callback was cancelled never leaves run()
        # sleeping for ever on a callback that can no longer fire; a driver that says so
        # says it once, to the error handler, naming the id.
        reader, _writer = self.pair()
        errors: list[Exception] = []
        loop.set_error_handler(errors.append)
        callback_id = loop.on_readable(reader, lambda cid, s: None)
        loop.delay(0, lambda cid: reader.close())
        barked = self.watchdog(loop, 5.0)
        loop.run()
        assert barked == []
        assert len(errors) <= 1, errors
        assert all(
            isinstance(error, InvalidCallbackError) and error.callback_id == callback_id
            for error in errors
        ), errors

    def test_a_stream_closed_before_its_first_tick_is_not_called_for_the_fd_reused(
        self, loop: Driver
    ) -> None:
        # fn(id, stream) gets the object that was registered (SPEC 9.1): a new stream that
        # took the closed one's fd number is not it.
        old_reader, old_writer = socket.socketpair()
        number = old_reader.fileno()
        called: list[Any] = []
        errors: list[Exception] = []
        loop.set_error_handler(errors.append)

        def on_readable(cid: str, stream: Any) -> None:
            called.append(stream)
            loop.cancel(cid)

        loop.on_readable(old_reader, on_readable)
        old_reader.close()
        old_writer.close()
        a, b = self.pair()
        if number not in (a.fileno(), b.fileno()):
            pytest.skip("the fd number was not reused")
        (b if a.fileno() == number else a).send(b"for the new stream")
        self.watchdog(loop, 1.0)  # ends a run() the stale callback keeps going
        loop.run()
        assert called == []
        assert len(errors) <= 1, errors
