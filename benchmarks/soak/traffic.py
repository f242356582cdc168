"""What the loop and aio soaks send: a seeded plan per connection, the bytes it carries, and
the ledger that checks, at the end, that every byte arrived and every callback ran or was
cancelled.

Each connection starts with a header (its index, how many bytes follow, how it ends), so the
server knows what to expect.  Endings:

* ``close``: the client sends everything and closes; the server must read every byte.
* ``half``: the client shuts down writing (``SHUT_WR``) and reads the server's
  acknowledgement (byte count and CRC-32 of what it read), then the server's end of file.
* ``ack``: the server acknowledges once it has every byte; the client reads that, closes.
* ``reset``: the client stops at a random point mid-write and closes with ``SO_LINGER`` 0,
  so the server sees a reset (or an end of file); its bytes are not checked.

TLS connections use ``close``, ``ack`` or ``reset`` (TLS has no half-close).
"""

from __future__ import annotations

import random
import socket
import ssl
import struct
import zlib
from dataclasses import dataclass, field

from iopoll_conformance.support import TLS_CERT, TLS_KEY

from .common import Violation

__all__ = [
    "ACK",
    "HEADER",
    "MODES",
    "Ledger",
    "Plan",
    "Planner",
    "linger_zero",
    "tls_contexts",
]

HEADER = struct.Struct("!IQB")  # index, size, mode
ACK = struct.Struct("!QI")  # bytes read, their CRC-32
MODES = ("close", "half", "ack", "reset")
_BUFFER = 1 << 20
_SIZES = (0, 1, 100, 4096, 30_000, 200_000, 1_000_000)


@dataclass(frozen=True)
class Plan:
    """One connection: what the client sends and how it ends."""

    index: int
    size: int
    mode: str
    tls: bool
    chunk: int  # bytes per write
    start: int  # where in the shared buffer its bytes start
    reset_after: int  # reset: how many bytes are written before the reset

    def header(self) -> bytes:
        return HEADER.pack(self.index, self.size, MODES.index(self.mode))

    def crc(self, payload: memoryview) -> int:
        return zlib.crc32(payload[self.start : self.start + self.size])


class Planner:
    """Makes the seeded plans, and holds the bytes every connection takes its own from."""

    def __init__(self, seed: int, tls_share: float = 0.25) -> None:
        self.rng = random.Random(seed)
        self.tls_share = tls_share
        self.payload = memoryview(random.Random(seed ^ 0xB17E).randbytes(_BUFFER * 2))
        self.made = 0

    def next(self) -> Plan:
        rng = self.rng
        index = self.made
        self.made += 1
        tls = rng.random() < self.tls_share
        size = rng.choice(_SIZES)
        if size > 1000:
            size = rng.randint(size // 2, size)
        mode = rng.choice(("close", "ack", "reset", "ack") if tls else MODES)
        return Plan(
            index=index,
            size=size,
            mode=mode,
            tls=tls,
            # Small writes, but no more than about 256 of them per connection.
            chunk=max(rng.choice((1, 512, 16_384, 65_536, 262_144)), size // 256),
            start=rng.randrange(_BUFFER),
            reset_after=rng.randint(0, size) if mode == "reset" else size,
        )

    def bytes_of(self, plan: Plan) -> memoryview:
        return self.payload[plan.start : plan.start + plan.size]


@dataclass
class Received:
    """What the server side saw on one connection."""

    count: int = 0
    crc: int = 0
    eof: bool = False
    reset: bool = False
    acked: bool = False  # the client read a matching acknowledgement


@dataclass
class Ledger:
    """Every plan, what the server received for it, and every callback's fate."""

    plans: dict[int, Plan] = field(default_factory=dict)
    received: dict[int, Received] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)  # connections both sides finished
    ran: set[str] = field(default_factory=set)  # one-time callbacks (defer, delay) that ran
    cancelled: set[str] = field(default_factory=set)  # callbacks the soak cancelled
    one_time: set[str] = field(default_factory=set)  # every defer/delay id made
    errors: list[str] = field(default_factory=list)
    bytes_checked: int = 0

    def began(self, plan: Plan) -> None:
        self.plans[plan.index] = plan
        self.received.setdefault(plan.index, Received())

    def ran_once(self, callback_id: str) -> None:
        """A defer or delay ran: never twice, never after it was cancelled."""
        if callback_id in self.cancelled:
            self.errors.append(f"callback {callback_id} ran after it was cancelled")
        if callback_id in self.ran:
            self.errors.append(f"one-time callback {callback_id} ran twice")
        self.ran.add(callback_id)

    def check_errors(self) -> None:
        """What went wrong while the loop ran (callbacks that raised, stalls, callbacks
        that ran after their cancel), first one first."""
        if self.errors:
            more = f" (and {len(self.errors) - 1} more)" if len(self.errors) > 1 else ""
            raise Violation(self.errors[0] + more)

    def check(self, payload: memoryview) -> None:
        """Every connection finished; every byte of the unreset ones arrived, intact;
        every defer and delay either ran or was cancelled."""
        self.check_errors()
        unfinished = sorted(set(self.plans) - self.done)
        if unfinished:
            raise Violation(
                f"{len(unfinished)} connections never finished, e.g. {self.plans[unfinished[0]]}"
            )
        for index, plan in self.plans.items():
            got = self.received[index]
            if plan.mode == "reset":
                continue
            if got.reset:
                raise Violation(f"connection {index} ({plan}) was reset")
            crc = plan.crc(payload)
            if got.count != plan.size or got.crc != crc:
                raise Violation(
                    f"connection {index} ({plan}): the server read {got.count} bytes "
                    f"(CRC {got.crc:#x}), the client sent {plan.size} (CRC {crc:#x})"
                )
            if plan.mode in ("half", "ack") and not got.acked:
                raise Violation(
                    f"connection {index} ({plan}): no acknowledgement reached the client"
                )
            self.bytes_checked += plan.size
        fate = self.one_time - self.ran - self.cancelled
        if fate:
            raise Violation(
                f"{len(fate)} defer/delay callbacks neither ran nor were "
                f"cancelled, e.g. {sorted(fate)[0]}"
            )


def linger_zero(sock: socket.socket) -> None:
    """Make ``close()`` send a reset (``SO_LINGER`` on, 0 seconds)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def tls_contexts() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """``(server, client)`` contexts for the test certificate (``localhost``)."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(TLS_CERT, TLS_KEY)
    # No TLS 1.3 session tickets: a client that never reads would hold them unread, and
    # closing a socket with unread bytes resets the connection (the server loses the end).
    server.num_tickets = 0
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.load_verify_locations(TLS_CERT)
    return server, client
