"""Reported events: READ/WRITE, ERROR/HANGUP always, READ_HANGUP, PRIORITY, level (SPEC 6.2-6.3)."""

from __future__ import annotations

import errno
import os
import socket
import struct
import time
from typing import Any

import pytest

from ..streams import close_all, drain, fill, recv_exactly, wait_readable
from ..support import Capabilities, poll_now, reported, short_wait, socketpair, waits
from .extras import skip_unless_spec_6_2_example, skip_unless_stated, spec_6_2_examples_stated


def _reset(sock: socket.socket) -> None:
    """Close a TCP socket with a reset (RST) instead of an orderly FIN."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class EventRules:
    """Reported events: READ/WRITE, ERROR/HANGUP always, READ_HANGUP, PRIORITY, level.

    SPEC 6.2 and 6.3; php-src rules B.31 to B.38 and B.67 (B.68 is in the error rules).
    """

    # -- level-triggered READ / WRITE (6.3) ----------------------------------------------

    def test_poll_stream_sock_write(self, api: Any, ctx: Any, pair: Any) -> None:
        """B.32, php-src poll_stream_sock_write.phpt: a writable socket is WRITE on every wait."""
        a, b = pair
        ctx.add(a, api.Event.WRITE, "a")
        ctx.add(b, [api.Event.WRITE], "b")
        expected = {"a": api.Event.WRITE, "b": api.Event.WRITE}
        assert waits(ctx, 3) == [expected] * 3

    def test_poll_stream_sock_read(self, api: Any, ctx: Any, pair: Any) -> None:
        """B.33, php-src poll_stream_sock_read.phpt: data sent to one end makes the other READ."""
        a, b = pair
        watcher = ctx.add(b, api.Event.READ, "b")
        assert poll_now(ctx) == []
        a.send(b"hello")
        result = short_wait(ctx)
        assert result == [watcher]
        assert result[0] is watcher
        assert watcher.triggered_events == api.Event.READ
        assert watcher.has_triggered(api.Event.READ)
        assert not watcher.has_triggered(api.Event.WRITE)
        assert b.recv(100) == b"hello"

    def test_poll_stream_sock_rw_single_level(self, api: Any, ctx: Any, pair: Any) -> None:
        """B.32, php-src poll_stream_sock_rw_single_level.phpt: READ on every wait until drained."""
        a, b = pair
        ctx.add(b, api.Event.READ, "b")
        a.send(b"x" * 100)
        assert waits(ctx, 3) == [{"b": api.Event.READ}] * 3
        assert b.recv(10) == b"x" * 10  # partly read: still readable
        assert reported(short_wait(ctx)) == {"b": api.Event.READ}
        assert drain(b) == b"x" * 90
        assert poll_now(ctx) == []

    def test_poll_stream_tcp_read(self, api: Any, ctx: Any, tcp: Any) -> None:
        """B.33, php-src poll_stream_tcp_read.phpt: TCP data arrival is READ, payload readable."""
        client, server = tcp
        ctx.add(server, api.Event.READ, "server")
        assert poll_now(ctx) == []
        client.send(b"ping")
        assert reported(short_wait(ctx)) == {"server": api.Event.READ}
        assert recv_exactly(server, 4) == b"ping"
        assert poll_now(ctx) == []

    def test_poll_stream_tcp_rw_single_level(self, api: Any, ctx: Any, tcp: Any) -> None:
        """B.34, php-src poll_stream_tcp_rw_single_level.phpt: [READ, WRITE] on both TCP ends."""
        client, server = tcp
        rw = [api.Event.READ, api.Event.WRITE]
        ctx.add(client, rw, "client")
        ctx.add(server, rw, "server")
        assert reported(short_wait(ctx)) == {"client": api.Event.WRITE, "server": api.Event.WRITE}
        client.send(b"data")
        wait_readable(server)
        expected = {"client": api.Event.WRITE, "server": api.Event.READ | api.Event.WRITE}
        assert reported(short_wait(ctx)) == expected
        assert reported(short_wait(ctx)) == expected  # level: again, not drained
        assert recv_exactly(server, 4) == b"data"
        assert reported(short_wait(ctx)) == {"client": api.Event.WRITE, "server": api.Event.WRITE}

    def test_poll_stream_sock_rw_multi_level(
        self, api: Any, backend: Any, caps: Capabilities, ctx: Any, strict_extras_on: bool
    ) -> None:
        """B.32 and B.36, php-src poll_stream_sock_rw_multi_level.phpt: many pairs, level.

        Writers see WRITE, readers READ on every wait until drained; a reader closed after
        draining gives its writer WRITE|HANGUP (SPEC 6.2 example 2: where SPEC states it).
        """
        pairs = [socketpair() for _ in range(4)]
        try:
            for index, (writer, reader) in enumerate(pairs):
                ctx.add(writer, api.Event.WRITE, f"w{index}")
                ctx.add(reader, api.Event.READ, f"r{index}")
            writers_only = {f"w{i}": api.Event.WRITE for i in range(4)}
            assert reported(short_wait(ctx)) == writers_only
            for writer, _ in pairs:
                writer.send(b"msg")
            both = {**writers_only, **{f"r{i}": api.Event.READ for i in range(4)}}
            assert waits(ctx, 2) == [both, both]
            for _, reader in pairs:
                assert drain(reader) == b"msg"
            assert reported(short_wait(ctx)) == writers_only
            if not (spec_6_2_examples_stated(backend, caps) or strict_extras_on):
                return
            # Reader 0 closes after draining: an orderly hang-up, no error.
            pairs[0][1].close()
            expected = {**writers_only, "w0": api.Event.WRITE | api.Event.HANGUP}
            assert waits(ctx, 2) == [expected, expected]
        finally:
            close_all(*(end for p in pairs for end in p))

    def test_spec_6_3_triggered_events_kept_until_reported_again(
        self, api: Any, ctx: Any, pair: Any
    ) -> None:
        """B.31, SPEC 5: triggered_events is Event(0) first, then the last report, never cleared."""
        a, b = pair
        watcher = ctx.add(b, [api.Event.READ, api.Event.WRITE], "b")
        assert watcher.triggered_events == api.Event(0)
        assert not watcher.has_triggered(api.Event.READ)
        a.send(b"x")
        assert reported(short_wait(ctx)) == {"b": api.Event.READ | api.Event.WRITE}
        watcher.modify_events(api.Event.READ)
        drain(b)
        assert poll_now(ctx) == []
        # Not reported by that wait: the old value stays.
        assert watcher.triggered_events == api.Event.READ | api.Event.WRITE
        assert watcher.has_triggered(api.Event.READ | api.Event.WRITE)
        a.send(b"y")
        assert reported(short_wait(ctx)) == {"b": api.Event.READ}
        assert watcher.triggered_events == api.Event.READ

    # -- ERROR and HANGUP, asked or not (6.2) --------------------------------------------

    def test_poll_stream_sock_rw_close(
        self, api: Any, backend: Any, caps: Capabilities, ctx: Any, strict_extras_on: bool
    ) -> None:
        """B.35, php-src poll_stream_sock_rw_close.phpt, SPEC 6.2 example 1.

        The reader closes with unread data sent to it: the writer, watching WRITE only, sees
        WRITE|ERROR|HANGUP.  On select semantics that is a reset (SPEC 7): ERROR|HANGUP,
        ERROR possibly only on the first wait.  Once the writer is closed too, nothing.
        """
        skip_unless_spec_6_2_example(backend, caps, strict_extras_on)
        writer, reader = socketpair()
        try:
            ctx.add(writer, api.Event.WRITE, "writer")
            writer.send(b"never read")
            reader.close()
            first = reported(short_wait(ctx))
            assert first == {"writer": api.Event.WRITE | api.Event.ERROR | api.Event.HANGUP}
            later = reported(short_wait(ctx))
            if caps.select_semantics:
                assert later in (first, {"writer": api.Event.WRITE | api.Event.HANGUP})
            else:
                assert later == first  # level: the condition persists
            writer.close()
            assert short_wait(ctx) == []
        finally:
            close_all(writer, reader)

    def test_poll_stream_sock_rw_close_after_read(
        self, api: Any, backend: Any, caps: Capabilities, ctx: Any, strict_extras_on: bool
    ) -> None:
        """B.36, php-src poll_stream_sock_rw_multi_level.phpt, SPEC 6.2 example 2.

        The reader closes after reading everything: the writer sees WRITE|HANGUP, no ERROR.
        """
        skip_unless_spec_6_2_example(backend, caps, strict_extras_on)
        writer, reader = socketpair()
        try:
            ctx.add(writer, api.Event.WRITE, "writer")
            writer.send(b"read me")
            assert recv_exactly(reader, 7) == b"read me"
            reader.close()
            expected = {"writer": api.Event.WRITE | api.Event.HANGUP}
            assert waits(ctx, 2) == [expected, expected]
        finally:
            close_all(writer, reader)

    def test_spec_6_2_hangup_reported_to_read_watcher(self, api: Any, ctx: Any, pair: Any) -> None:
        """SPEC 6.2: a READ watcher whose peer closed sees READ|HANGUP (end of file is readable)."""
        a, b = pair
        ctx.add(b, api.Event.READ, "b")
        a.close()
        expected = {"b": api.Event.READ | api.Event.HANGUP}
        assert waits(ctx, 2) == [expected, expected]
        assert b.recv(10) == b""

    @pytest.mark.parametrize("asked", ["HANGUP", "ERROR", "ERROR|HANGUP"])
    def test_spec_6_2_a_watcher_of_error_or_hangup_alone_sees_the_peer_close(
        self, api: Any, caps: Capabilities, ctx: Any, pair: Any, asked: str
    ) -> None:
        """SPEC 6.2 and 6.3: a watcher that asks for HANGUP or ERROR alone (no READ, no
        WRITE) is told of its socketpair peer's close, at every wait (level).

        kqueue has no filter for a hang-up alone: a backend on it must watch something
        that sees the end of file, and keep what it saw level itself.
        """
        a, b = pair
        events = api.Event(0)
        for name in asked.split("|"):
            events |= api.Event[name]
        ctx.add(b, events, "b")
        assert short_wait(ctx) == []
        a.send(b"bytes")  # bytes are no hang-up: nothing to report
        assert short_wait(ctx) == []
        assert recv_exactly(b, 5) == b"bytes"
        if not caps.select_semantics:  # select calls a half-close a hang-up (SPEC 7)
            a.shutdown(socket.SHUT_WR)  # half-closed: no hang-up yet, and no early return
            started = time.monotonic()
            assert ctx.wait(0.2) == []
            assert time.monotonic() - started >= 0.15
        a.close()
        expected = {"b": api.Event.HANGUP}
        assert waits(ctx, 3) == [expected, expected, expected]

    def test_spec_6_3_a_hangup_watcher_back_from_edge_is_level_again(
        self, api: Any, caps: Capabilities, ctx: Any, pair: Any
    ) -> None:
        """SPEC 6.3 and 6.5: a watcher of HANGUP alone, its peer gone, switched to edge mode
        and back: level again, the hang-up reported at every wait.  (kqueue: its read filter
        is edge in both modes, and the level one keeps the end of file itself: the switch
        must not leave it with neither.)"""
        if not caps.edge_triggering:
            pytest.skip("backend does not support EDGE_TRIGGERED")
        a, b = pair
        watcher = ctx.add(b, api.Event.HANGUP, "b")
        a.close()
        expected = {"b": api.Event.HANGUP}
        assert waits(ctx, 2) == [expected, expected]
        watcher.modify_events([api.Event.HANGUP, api.Event.EDGE_TRIGGERED])
        assert len(reported(short_wait(ctx))) <= 1  # the state at the switch, at most once
        assert short_wait(ctx) == []
        watcher.modify_events(api.Event.HANGUP)
        assert waits(ctx, 3) == [expected] * 3

    def test_spec_6_2_error_hangup_reported_unasked_on_reset(
        self, api: Any, caps: Capabilities, ctx: Any, tcp: Any
    ) -> None:
        """SPEC 6.2 and 7: a TCP reset gives a READ watcher ERROR|HANGUP it did not ask for.

        Native backends add READ (a reset socket reads the error); select semantics report
        a reset as ERROR|HANGUP (SPEC 7).
        """
        client, server = tcp
        ctx.add(client, api.Event.READ, "client")
        _reset(server)
        recv_ready = short_wait(ctx)
        triggered = reported(recv_ready)["client"]
        if caps.select_semantics:
            assert triggered == api.Event.ERROR | api.Event.HANGUP
        else:
            assert triggered == api.Event.READ | api.Event.ERROR | api.Event.HANGUP
        # Level: the hang-up stays.
        assert api.Event.HANGUP in reported(short_wait(ctx))["client"]

    def test_spec_6_2_error_hangup_reported_to_write_watcher_on_reset(
        self, api: Any, caps: Capabilities, ctx: Any, tcp: Any
    ) -> None:
        """SPEC 6.2: a TCP reset gives a WRITE watcher WRITE|ERROR|HANGUP."""
        client, server = tcp
        ctx.add(client, api.Event.WRITE, "client")
        assert reported(short_wait(ctx)) == {"client": api.Event.WRITE}
        _reset(server)
        expected = api.Event.WRITE | api.Event.ERROR | api.Event.HANGUP
        assert reported(short_wait(ctx)) == {"client": expected}

    def test_spec_6_2_waiting_leaves_the_socket_error_to_the_application(
        self, api: Any, caps: Capabilities, ctx: Any, strict_extras_on: bool
    ) -> None:
        """SPEC 6.2: a refused non-blocking connect() is reported with ERROR, and waiting
        does not read the error: SO_ERROR still says ECONNREFUSED afterwards.  That is how
        the application learns the outcome of its connect(); a wait() that cleared the
        error (a read or SO_ERROR of its own) would make the connect look successful.

        Select semantics are not held to it by default: SPEC 7 lets select consume the
        socket error (ERROR may show only on the first wait after it)."""
        skip_unless_stated(
            not caps.select_semantics,
            strict_extras_on,
            "SPEC 7 lets select consume the socket error",
        )
        with socket.create_server(("127.0.0.1", 0)) as listener:
            address = listener.getsockname()  # closed at once: nothing listens there now
        with socket.socket() as sock:
            sock.setblocking(False)
            if sock.connect_ex(address) != errno.EINPROGRESS:  # some systems refuse at once
                pytest.skip("connect() to a closed loopback port did not wait here")
            ctx.add(sock, api.Event.WRITE, "connecting")
            for _ in range(2):  # level: reported while the error is pending
                triggered = reported(short_wait(ctx)).get("connecting", api.Event(0))
                assert api.Event.ERROR in triggered, triggered
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == errno.ECONNREFUSED

    def test_poll_stream_sock_write_close(self, api: Any, ctx: Any) -> None:
        """B.38, php-src poll_stream_sock_write_close.phpt: closed watched streams disappear."""
        first, second = socketpair(), socketpair()
        try:
            ctx.add(first[0], api.Event.WRITE, "one")
            ctx.add(second[0], api.Event.WRITE, "two")
            assert reported(short_wait(ctx)) == {"one": api.Event.WRITE, "two": api.Event.WRITE}
            first[0].close()
            second[0].close()
            assert short_wait(ctx) == []
            assert short_wait(ctx) == []
        finally:
            close_all(*first, *second)

    def test_spec_6_3_write_not_reported_while_buffer_full(
        self, api: Any, ctx: Any, pair: Any
    ) -> None:
        """SPEC 6.3: a full send buffer is not writable; reading on the other end makes it so."""
        a, b = pair
        ctx.add(a, api.Event.WRITE, "a")
        fill(a)
        assert poll_now(ctx) == []
        drain(b)
        assert reported(short_wait(ctx)) == {"a": api.Event.WRITE}

    # -- READ_HANGUP (6.2) ---------------------------------------------------------------

    @pytest.mark.parametrize("kind", ["unix", "tcp"])
    def test_spec_6_2_read_hangup_only_when_asked(
        self, api: Any, caps: Capabilities, ctx: Any, pair: Any, tcp: Any, kind: str
    ) -> None:
        """B.37, SPEC 6.2 and 7: the peer's shutdown(SHUT_WR) and READ_HANGUP.

        Asked and supported: READ|READ_HANGUP (no HANGUP: only one direction is closed).
        Not asked: plain READ natively.  Select semantics: READ|HANGUP, READ_HANGUP never.
        """
        local, peer = pair if kind == "unix" else tcp
        asked = caps.read_hangup or caps.select_semantics
        try:
            watcher = ctx.add(local, [api.Event.READ, api.Event.READ_HANGUP], "asked")
        except api.FailedHandleAddError as exc:  # a backend may refuse what it cannot report
            assert not asked
            assert exc.code == api.ErrorCode.NOSUPPORT
            watcher = ctx.add(local, api.Event.READ, "asked")
        assert api.Event.READ_HANGUP in watcher.watched_events or not asked
        local_dup = socket.socket(fileno=os.dup(local.fileno()))
        local_dup.setblocking(False)
        try:
            plain = ctx.add(local_dup, api.Event.READ, "plain")
            assert poll_now(ctx) == []
            peer.shutdown(socket.SHUT_WR)
            result = reported(short_wait(ctx))
            if caps.select_semantics:
                half_closed = api.Event.READ | api.Event.HANGUP
                assert result == {"asked": half_closed, "plain": half_closed}
            elif caps.read_hangup:
                assert result == {
                    "asked": api.Event.READ | api.Event.READ_HANGUP,
                    "plain": api.Event.READ,
                }
            else:
                assert result["plain"] == api.Event.READ
                assert api.Event.READ_HANGUP not in result["asked"]
            assert api.Event.READ_HANGUP not in plain.triggered_events
            # The other direction still works: the peer can read what we send.
            local.send(b"still open")
            assert recv_exactly(peer, 10) == b"still open"
        finally:
            local_dup.close()

    def test_spec_6_2_read_hangup_without_read(
        self, api: Any, caps: Capabilities, ctx: Any, pair: Any
    ) -> None:
        """SPEC 6.2: READ_HANGUP alone reports the peer's SHUT_WR as READ_HANGUP, no READ."""
        if not caps.read_hangup:
            pytest.skip("backend does not report READ_HANGUP")
        a, b = pair
        ctx.add(b, api.Event.READ_HANGUP, "b")
        assert poll_now(ctx) == []
        a.shutdown(socket.SHUT_WR)
        expected = {"b": api.Event.READ_HANGUP}
        assert waits(ctx, 2) == [expected, expected]

    @pytest.mark.parametrize("end", ["read", "write"])
    def test_spec_6_3_read_hangup_alone_on_a_pipe_whose_other_end_left_is_level(
        self, api: Any, caps: Capabilities, ctx: Any, end: str
    ) -> None:
        """SPEC 6.2 and 6.3: a READ_HANGUP watcher (without READ) on a pipe's end whose other
        end was closed is told so at every wait: HANGUP on the read end (the writer is
        gone), ERROR on the write end (the reader is gone: a write fails with EPIPE), as
        poll(2) says.  Neither goes away.  (kqueue's read filter, added edge so that bytes
        do not fire it, reports it once: the backend must keep it level itself.)"""
        if not caps.read_hangup:
            pytest.skip("backend does not report READ_HANGUP")
        if caps.sockets_only:
            pytest.skip("backend watches sockets only (SPEC 2)")
        read_fd, write_fd = os.pipe()
        reader = os.fdopen(read_fd, "rb", buffering=0)
        writer = os.fdopen(write_fd, "wb", buffering=0)
        try:
            watched, other = (reader, writer) if end == "read" else (writer, reader)
            ctx.add(watched, api.Event.READ_HANGUP, end)
            assert poll_now(ctx) == []
            other.close()
            expected = {end: api.Event.HANGUP if end == "read" else api.Event.ERROR}
            assert waits(ctx, 3) == [expected] * 3
        finally:
            close_all(reader, writer)

    @pytest.mark.parametrize("also_write", [False, True], ids=["alone", "with-write"])
    def test_spec_6_2_read_hangup_after_a_reset_ends_its_error_once_read(
        self, api: Any, caps: Capabilities, ctx: Any, tcp: Any, also_write: bool
    ) -> None:
        """SPEC 6.2: a READ_HANGUP watcher (without READ) on a reset socket: the end of file
        stays reported, level, but ERROR ends once the application has read the error, as
        the socket's state says.  (A backend that remembers the end of file for itself, as
        kqueue's must for a watcher without READ, must not remember the error with it.)"""
        if not caps.read_hangup:
            pytest.skip("backend does not report READ_HANGUP")
        client, server = tcp
        events = api.Event.READ_HANGUP | (api.Event.WRITE if also_write else api.Event(0))
        ctx.add(client, events, "client")
        _reset(server)
        first = reported(short_wait(ctx))["client"]
        assert api.Event.READ_HANGUP in first and api.Event.HANGUP in first, first
        try:
            drain(client)
        except ConnectionResetError:  # the reset's error, which the read consumes
            assert drain(client) == b""
        expected = api.Event.READ_HANGUP | api.Event.HANGUP | (events & api.Event.WRITE)
        assert waits(ctx, 2) == [{"client": expected}] * 2

    # -- PRIORITY ------------------------------------------------------------------------

    def test_poll_event_priority(self, api: Any, caps: Capabilities, ctx: Any, tcp: Any) -> None:
        """B.67, php-src poll_event_priority.phpt: urgent TCP data (MSG_OOB) is PRIORITY."""
        if not caps.priority:
            pytest.skip("backend does not support PRIORITY")
        client, server = tcp
        watcher = ctx.add(server, api.Event.PRIORITY, "server")
        assert api.Event.PRIORITY in watcher.watched_events
        assert poll_now(ctx) == []
        client.send(b"!", socket.MSG_OOB)
        result = short_wait(ctx)
        assert reported(result) == {"server": api.Event.PRIORITY}
        assert watcher.has_triggered(api.Event.PRIORITY)

    def test_spec_6_2_priority_only_when_asked(
        self, api: Any, caps: Capabilities, ctx: Any, tcp: Any
    ) -> None:
        """SPEC 6.2: urgent data is never reported as PRIORITY to a watcher that did not ask."""
        client, server = tcp
        ctx.add(server, [api.Event.READ, api.Event.WRITE], "server")
        client.send(b"!", socket.MSG_OOB)
        client.send(b"normal")
        wait_readable(server)
        for _ in range(2):
            result = reported(short_wait(ctx))
            assert api.Event.PRIORITY not in result["server"]
            assert api.Event.WRITE in result["server"]
