"""What the loop and aio soaks send: a seeded plan per connection, the bytes it carries, and
the ledger that checks, at the end, that every byte arrived and every callback ran or was
cancelled; and ``run_traffic_target``, the run both soaks share (warm-up, baseline, report).

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
import resource
import socket
import ssl
import struct
import time
import zlib
from dataclasses import dataclass, field
from typing import Protocol

from iopoll_conformance.support import TLS_CERT, TLS_KEY

from .common import OpLog, Outcome, Progress, Resources, Violation

__all__ = [
    "ACK",
    "HEADER",
    "MODES",
    "SELECT_CONNECTIONS",
    "WARMUP_CONNECTIONS",
    "Ledger",
    "Plan",
    "Planner",
    "Traffic",
    "TrafficTarget",
    "linger_zero",
    "raise_fd_limit",
    "run_traffic_target",
    "tls_contexts",
]

# select() cannot watch fds at or above FD_SETSIZE: two fds per connection, some headroom.
SELECT_CONNECTIONS = 400
WARMUP_CONNECTIONS = 40
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


def raise_fd_limit(wanted: int) -> None:
    """Let the process open ``wanted`` fds if the hard limit allows (soft limit only up)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        top = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (top, hard))


@dataclass
class Traffic:
    """What one soak of a loop or aio target runs: its plans, how many connections it keeps
    open at once, for how long (or how many connections in all), and where it logs."""

    planner: Planner
    connections: int
    seconds: float
    total: int | None = None  # no limit: connections until the time is up
    log: OpLog = field(default_factory=OpLog)
    progress: Progress | None = None


class TrafficTarget(Protocol):
    """A loop or aio target (``LoopTarget``, ``AioTarget``): what ``run_traffic_target``
    needs of it."""

    @property
    def name(self) -> str:
        """What its summary line starts with."""
        ...

    @property
    def select_limit(self) -> bool:
        """Whether its fds must stay below ``FD_SETSIZE``."""
        ...

    def replay(self, seed: int, connections: int) -> str:
        """The command line that replays a soak of this target."""
        ...

    def soak(self, traffic: Traffic) -> Ledger:
        """Run one soak on a new loop, and return its ledger once checked."""
        ...


def run_traffic_target(
    target: TrafficTarget,
    *,
    seconds: float,
    seed: int,
    connections: int,
    total: int | None = None,
    progress: float = 5.0,
    warmup: int = WARMUP_CONNECTIONS,
) -> Outcome:
    """Soak one loop or aio target; see :mod:`.loops` and :mod:`.aio` for what is checked.

    A warm-up soak (another seed) runs first, so that what is cached on first use is in the
    fd and memory baseline; the soak then starts from that baseline and must end there.
    """
    if target.select_limit:
        connections = min(connections, SELECT_CONNECTIONS)
    raise_fd_limit(connections * 2 + 256)
    outcome = Outcome(target.name, seed, unit="connections")
    resources = Resources()
    resources.start()
    log = OpLog()
    try:
        if warmup:
            target.soak(Traffic(Planner(seed ^ 0x5EED), warmup, 30.0, total=warmup))
        resources.mark()
        planner = Planner(seed)
        started = time.monotonic()
        try:
            ledger = target.soak(
                Traffic(planner, connections, seconds, total, log, Progress(target.name, progress))
            )
            outcome.steps = len(ledger.plans)
            outcome.counts = {
                "bytes_checked": ledger.bytes_checked,
                # Every defer/delay made, and the I/O callbacks cancelled (aio has none).
                "callbacks": len(ledger.one_time | ledger.cancelled),
                "resets": sum(plan.mode == "reset" for plan in ledger.plans.values()),
                "tls": sum(plan.tls for plan in ledger.plans.values()),
            }
            del ledger  # the soak's own records are not the loop's memory
        except Violation as violation:
            outcome.record(violation, log, planner.made, target.replay(seed, connections))
        outcome.seconds = time.monotonic() - started
        del planner
        outcome.fd_delta, outcome.memory_delta = resources.deltas()
    finally:
        resources.stop()
    return outcome
