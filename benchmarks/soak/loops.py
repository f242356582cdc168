"""The ``iopoll.loop`` soak: hundreds of loopback TCP connections opening, streaming and
dropping through one driver's callbacks, checked byte for byte.

Clients and servers run in the same loop.  A ``repeat`` keeps up to ``connections`` clients
open until the time (or the connection count) is up; each one follows its seeded ``Plan``
(:mod:`.traffic`): connect, TLS handshake when asked, write in chunks, then close,
half-close, wait for the server's acknowledgement, or reset mid-write.  The servers read
everything (TLS ``pending()`` bytes included), count it and take its CRC-32.  Each
connection also has a ``defer`` that starts it, a ``delay`` watchdog that is cancelled when
it finishes, and a short ``delay`` that half of them cancel at once; a reset comes from a
``delay(0)`` scheduled mid-write, and some connections close their socket before cancelling
its callbacks.

At the end ``run()`` must have returned by itself, every unreset connection's bytes must
have arrived intact, every defer and delay must have run or been cancelled (none after its
cancel), and the driver must hold no callback.
"""

from __future__ import annotations

import errno
import functools
import socket
import ssl
import time
import traceback
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import iopoll
from iopoll.loop import Driver, IoPollDriver, SelectorsDriver

from .common import Violation
from .traffic import ACK, HEADER, Ledger, Plan, Traffic, linger_zero, tls_contexts

__all__ = ["LoopSoak", "LoopTarget", "loop_targets"]

# A connection that has not finished after this long is a stall (a missed wake-up).
STALL_SECONDS = 30.0
# How far past its time a soak may run (finishing what is open) before it counts as hung.
HANG_SECONDS = 60.0
_WRITES_PER_CALLBACK = 8
_READ_SIZE = 65_536


@dataclass(frozen=True)
class LoopTarget:
    """One driver: ``IoPollDriver`` on a backend, or ``SelectorsDriver``."""

    name: str
    make: Callable[[], Driver]
    select_limit: bool  # fds must stay below FD_SETSIZE

    def replay(self, seed: int, connections: int) -> str:
        driver = "selectors" if "Selectors" in self.name else "iopoll"
        backend = "" if driver == "selectors" else f" --backend {self.name.split('-')[-1]}"
        return (
            f"python -m benchmarks.soak loop --driver {driver}{backend} --seed {seed} "
            f"--connections {connections}"
        )

    def soak(self, traffic: Traffic) -> Ledger:
        """Run one soak on a new driver, and return its ledger once checked."""
        driver = self.make()
        soak = LoopSoak(driver, traffic)
        try:
            soak.run()
            soak.ledger.check(traffic.planner.payload)
        finally:
            handle = driver.get_handle()
            if hasattr(handle, "close"):
                handle.close()
        return soak.ledger


def loop_targets(driver: str = "all", backend: str = "all") -> list[LoopTarget]:
    """``IoPollDriver`` on each backend named, and ``SelectorsDriver``."""
    targets = []
    if driver in ("all", "iopoll"):
        for member in iopoll.Backend.available_backends():
            if backend in ("all", member.name):
                targets.append(
                    LoopTarget(
                        f"loop IoPollDriver-{member.name}",
                        functools.partial(IoPollDriver, member),
                        member.name == "SELECT",
                    )
                )
    if driver in ("all", "selectors"):
        targets.append(LoopTarget("loop SelectorsDriver", SelectorsDriver, False))
    return targets


class LoopSoak:
    """The listeners, clients and servers of one soak on one driver."""

    def __init__(self, driver: Driver, traffic: Traffic) -> None:
        self.driver = driver
        self.planner = traffic.planner
        self.ledger = Ledger()
        self.connections = traffic.connections
        self.deadline = time.monotonic() + traffic.seconds
        self.total = traffic.total
        self.log = traffic.log
        self.open = 0
        self.finished_sides: dict[int, int] = {}
        self.spawning = True
        self.server_tls, self.client_tls = tls_contexts()
        self.listeners: dict[bool, socket.socket] = {}
        self.listener_ids: list[str] = []
        self.guard_id = ""
        self.progress = traffic.progress

    # -- registering callbacks through the ledger ----------------------------------------------

    def on_readable(self, stream: Any, fn: Callable[[str, Any], None]) -> str:
        return self.driver.on_readable(stream, self.guarded(fn))

    def on_writable(self, stream: Any, fn: Callable[[str, Any], None]) -> str:
        return self.driver.on_writable(stream, self.guarded(fn))

    def guarded(self, fn: Callable[[str, Any], None]) -> Callable[[str, Any], None]:
        ledger = self.ledger

        def callback(callback_id: str, stream: Any) -> None:
            if callback_id in ledger.cancelled:
                ledger.errors.append(f"I/O callback {callback_id} ran after it was cancelled")
                return
            fn(callback_id, stream)

        return callback

    def defer(self, fn: Callable[[], None]) -> str:
        def callback(callback_id: str) -> None:
            self.ledger.ran_once(callback_id)
            fn()

        callback_id = self.driver.defer(callback)
        self.ledger.one_time.add(callback_id)
        return callback_id

    def delay(self, seconds: float, fn: Callable[[], None]) -> str:
        def callback(callback_id: str) -> None:
            self.ledger.ran_once(callback_id)
            fn()

        callback_id = self.driver.delay(seconds, callback)
        self.ledger.one_time.add(callback_id)
        return callback_id

    def cancel(self, callback_id: str) -> None:
        self.ledger.cancelled.add(callback_id)
        self.driver.cancel(callback_id)

    # -- the run ---------------------------------------------------------------------------------

    def run(self) -> None:
        """Listen, spawn connections until the time is up, and run the loop until every
        connection is done; the loop must then return by itself."""
        driver = self.driver
        driver.set_error_handler(self.callback_failed)
        for tls in (False, True):
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", 0))
            listener.listen(1024)
            listener.setblocking(False)
            self.listeners[tls] = listener
            accept = functools.partial(self.accept, tls=tls)
            self.listener_ids.append(self.on_readable(listener, accept))
        driver.repeat(0.002, self.spawn)
        hang = self.delay(self.deadline - time.monotonic() + HANG_SECONDS, self.hung)
        driver.unreference(hang)
        self.guard_id = hang
        try:
            driver.run()
        finally:
            for listener in self.listeners.values():
                listener.close()
        self.ledger.check_errors()
        if driver.get_identifiers() != [self.guard_id]:
            left = [cid for cid in driver.get_identifiers() if cid != self.guard_id]
            raise Violation(f"run() returned with callbacks left: {left[:5]}")
        self.cancel(self.guard_id)

    def callback_failed(self, exc: Exception) -> None:
        self.ledger.errors.append(
            "a callback raised " + "".join(traceback.format_exception(exc)).rstrip()
        )

    def hung(self) -> None:
        self.ledger.errors.append(
            f"the loop was still running {HANG_SECONDS:.0f} s after the soak's time: "
            f"{self.open} connections open"
        )
        self.driver.stop()

    def spawn(self, callback_id: str) -> None:
        """The ``repeat``: open connections up to the limit while there is time."""
        if self.progress is not None:
            self.progress.tick(
                f"connections={self.planner.made:,} open={self.open} done={len(self.ledger.done):,}"
            )
        if self.spawning and (
            time.monotonic() > self.deadline
            or (self.total is not None and self.planner.made >= self.total)
        ):
            self.spawning = False
        if not self.spawning:
            if self.open == 0:
                self.driver.cancel(callback_id)
                for listener_id in self.listener_ids:
                    self.cancel(listener_id)
            return
        while self.open < self.connections and (
            self.total is None or self.planner.made < self.total
        ):
            plan = self.planner.next()
            self.ledger.began(plan)
            self.open += 1
            self.log.step = plan.index
            self.log.add(f"connection {plan}")
            self.defer(Client(self, plan).connect)

    def side_done(self, index: int, client: bool) -> None:
        """A client or a server finished with connection ``index``.

        A reset connection is done when its client is: its server may never learn which
        connection it served (the reset can come before the header), and it keeps
        ``run()`` going until it has closed anyway.
        """
        if self.ledger.plans[index].mode == "reset":
            if client:
                self.ledger.done.add(index)
                self.open -= 1
            return
        sides = self.finished_sides.get(index, 0) + 1
        self.finished_sides[index] = sides
        if sides == 2:
            del self.finished_sides[index]
            self.ledger.done.add(index)
            self.open -= 1

    def accept(self, callback_id: str, listener: socket.socket, tls: bool) -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except BlockingIOError:
                return
            sock.setblocking(False)
            Server(self, sock, tls).start()


class Client:
    """One connection's client: connect, (TLS,) write its plan, end as the plan says."""

    def __init__(self, soak: LoopSoak, plan: Plan) -> None:
        self.soak = soak
        self.plan = plan
        self.stream: Any = None
        self.io_id = ""
        self.sent = -len(plan.header())  # negative while the header goes out
        self.retry: memoryview | None = None  # a TLS write to repeat with the same buffer
        self.ack = b""
        self.stall_id = ""
        self.reset_id = ""

    def connect(self) -> None:
        soak = self.soak
        sock = socket.socket()
        sock.setblocking(False)
        error = sock.connect_ex(soak.listeners[self.plan.tls].getsockname())
        if error not in (0, errno.EINPROGRESS):
            raise OSError(error, f"connect: {errno.errorcode.get(error)}")
        self.stream = sock
        self.stall_id = soak.delay(STALL_SECONDS, self.stalled)
        # A short timer that half the connections cancel at once: it must then never run.
        maybe = soak.delay((self.plan.index % 7) * 0.001, lambda: None)
        if self.plan.index % 2:
            soak.cancel(maybe)
        self.io_id = soak.on_writable(sock, self.connected)

    def stalled(self) -> None:
        self.soak.ledger.errors.append(f"client of {self.plan} stalled for {STALL_SECONDS} s")

    def switch(self, make: Callable[[], str]) -> None:
        """Cancel the current I/O callback and register the next one."""
        self.soak.cancel(self.io_id)
        self.io_id = make()

    def connected(self, callback_id: str, sock: socket.socket) -> None:
        error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if error:
            raise OSError(error, "connect() failed")
        if not self.plan.tls:
            self.switch(lambda: self.soak.on_writable(self.stream, self.write))
            return
        self.soak.cancel(self.io_id)  # wrapping detaches the plain socket object
        self.io_id = ""
        self.stream = self.soak.client_tls.wrap_socket(
            sock, server_hostname="localhost", do_handshake_on_connect=False
        )
        self.handshake("", self.stream)

    def handshake(self, callback_id: str, stream: Any) -> None:
        try:
            stream.do_handshake()
        except ssl.SSLWantReadError:
            self.switch(lambda: self.soak.on_readable(stream, self.handshake))
            return
        except ssl.SSLWantWriteError:
            self.switch(lambda: self.soak.on_writable(stream, self.handshake))
            return
        self.switch(lambda: self.soak.on_writable(stream, self.write))

    def next_piece(self) -> memoryview:
        plan = self.plan
        if self.sent < 0:
            return memoryview(plan.header())[len(plan.header()) + self.sent :]
        end = plan.size if plan.mode != "reset" else plan.reset_after
        piece = self.soak.planner.bytes_of(plan)[self.sent : end]
        return piece[: plan.chunk]

    def write(self, callback_id: str, stream: Any) -> None:
        plan = self.plan
        for _ in range(_WRITES_PER_CALLBACK):
            piece = self.retry if self.retry is not None else self.next_piece()
            if not len(piece):
                self.finish_writing()
                return
            try:
                sent = stream.send(piece)
            except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                if plan.tls:
                    self.retry = piece
                return
            self.retry = None
            self.sent += sent
            if plan.mode == "reset" and self.sent >= plan.reset_after and not self.reset_id:
                # Mid-write: the reset comes from a timer, with the write callback still on.
                self.reset_id = self.soak.delay(0, self.reset)
                return

    def finish_writing(self) -> None:
        plan, soak = self.plan, self.soak
        if plan.mode == "reset":
            return  # the reset's delay(0) is on its way
        if plan.mode == "close":
            self.close()
        elif plan.mode == "half":
            self.stream.shutdown(socket.SHUT_WR)
            self.switch(lambda: soak.on_readable(self.stream, self.read_ack))
        else:
            self.switch(lambda: soak.on_readable(self.stream, self.read_ack))

    def read_ack(self, callback_id: str, stream: Any) -> None:
        while True:
            try:
                data = stream.recv(ACK.size)
            except (BlockingIOError, ssl.SSLWantReadError):
                return
            if not data:
                break
            self.ack += data
            if len(self.ack) == ACK.size and self.plan.mode == "ack":
                break  # the server closes once the client has
        count, crc = ACK.unpack(self.ack) if len(self.ack) == ACK.size else (-1, -1)
        if count == self.plan.size and crc == self.plan.crc(self.soak.planner.payload):
            self.soak.ledger.received[self.plan.index].acked = True
        self.close()

    def reset(self) -> None:
        linger_zero(self.stream)
        self.close()

    def close(self) -> None:
        """Close the stream and cancel its callbacks, in either order (a stream closed
        before its callbacks are cancelled must break neither ``cancel`` nor the loop)."""
        soak = self.soak
        close_first = self.plan.index % 3 == 0
        if close_first:
            self.stream.close()
        if self.io_id:
            soak.cancel(self.io_id)
        soak.cancel(self.stall_id)
        if not close_first:
            self.stream.close()
        soak.side_done(self.plan.index, client=True)


class Server:
    """One accepted connection: (TLS,) read the header and every byte, acknowledge."""

    def __init__(self, soak: LoopSoak, sock: socket.socket, tls: bool) -> None:
        self.soak = soak
        self.stream: Any = sock
        self.tls = tls
        self.io_id = ""
        self.head = b""
        self.plan: Plan | None = None
        self.ack_out: memoryview | None = None
        self.ack_id = ""

    def start(self) -> None:
        if self.tls:
            self.stream = self.soak.server_tls.wrap_socket(
                self.stream, server_side=True, do_handshake_on_connect=False
            )
            self.io_id = self.soak.on_readable(self.stream, self.handshake)
        else:
            self.io_id = self.soak.on_readable(self.stream, self.readable)

    def handshake(self, callback_id: str, stream: Any) -> None:
        soak = self.soak
        try:
            stream.do_handshake()
        except ssl.SSLWantReadError:
            return
        except ssl.SSLWantWriteError:
            soak.cancel(self.io_id)
            self.io_id = soak.on_writable(stream, self.handshake)
            return
        except (ConnectionError, ssl.SSLError, OSError):
            self.finish(reset=True)  # a client reset during the handshake
            return
        soak.cancel(self.io_id)
        self.io_id = soak.on_readable(stream, self.readable)

    def readable(self, callback_id: str, stream: Any) -> None:
        for _ in range(_WRITES_PER_CALLBACK):
            try:
                data = stream.recv(_READ_SIZE)
            except (BlockingIOError, ssl.SSLWantReadError):
                return
            except (ConnectionError, ssl.SSLError):
                self.finish(reset=True)
                return
            if not data:
                self.finish(reset=False)
                return
            self.take(data)
        # Eight reads were not enough: the rest is read on the next wake-up (or, for TLS
        # bytes already decrypted, from pending(), which IoPollDriver's Context sees).

    def take(self, data: bytes) -> None:
        if self.plan is None:
            self.head += data
            if len(self.head) < HEADER.size:
                return
            index, _, _ = HEADER.unpack(self.head[: HEADER.size])
            self.plan = self.soak.ledger.plans[index]
            data = self.head[HEADER.size :]
        got = self.soak.ledger.received[self.plan.index]
        got.count += len(data)
        got.crc = zlib.crc32(data, got.crc)
        if self.plan.mode == "ack" and got.count == self.plan.size and self.ack_out is None:
            self.send_ack()

    def send_ack(self) -> None:
        assert self.plan is not None
        got = self.soak.ledger.received[self.plan.index]
        self.ack_out = memoryview(ACK.pack(got.count, got.crc))
        self.ack_id = self.soak.on_writable(self.stream, self.write_ack)

    def write_ack(self, callback_id: str, stream: Any) -> None:
        assert self.ack_out is not None
        try:
            sent = stream.send(self.ack_out)
        except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            return  # TLS: the same buffer is sent again next time
        except (ConnectionError, ssl.SSLError):
            self.soak.cancel(self.ack_id)
            self.ack_id = ""
            return
        self.ack_out = self.ack_out[sent:]
        if not len(self.ack_out):
            self.soak.cancel(self.ack_id)
            self.ack_id = ""
            if self.plan is not None and self.plan.mode == "half":
                self.close()

    def finish(self, reset: bool) -> None:
        plan = self.plan
        if plan is not None:
            got = self.soak.ledger.received[plan.index]
            got.eof = not reset
            got.reset = got.reset or reset
            if plan.mode == "half" and not reset and self.ack_out is None:
                self.soak.cancel(self.io_id)
                self.io_id = ""
                self.send_ack()  # closes once it is out
                return
        self.close()

    def close(self) -> None:
        soak = self.soak
        for callback_id in (self.io_id, self.ack_id):
            if callback_id:
                soak.cancel(callback_id)
        self.stream.close()
        if self.plan is not None:
            soak.side_done(self.plan.index, client=False)
        # Without a header it was a reset connection: an unreset one that never says which
        # it is never finishes, and the ledger reports it.
