"""The ``iopoll.aio`` soak: the loop soak's traffic through asyncio streams on iopoll.

The same seeded plans as the ``iopoll.loop`` soak (:mod:`.traffic`), written with
``asyncio.start_server`` and ``asyncio.open_connection`` (TLS through ``ssl=``): up to
``connections`` clients at a time open, write in chunks (``drain()`` after each), then
``close()``, ``write_eof()`` and read the acknowledgement, read the acknowledgement, or reset
mid-write (``SO_LINGER`` 0 and ``transport.abort()``).  Each connection also schedules a
``call_soon`` that must run, a ``call_later`` watchdog that must be cancelled, and a
``call_later`` that is either cancelled or left to run.

Targets: ``iopoll.aio.run`` (a ``Loop`` on its own selector, ``AUTO``), and asyncio's
``Runner`` with ``loop_factory`` making ``Loop(IoPollSelector(backend))`` for each backend.
At the end every task must have finished, every unreset connection's bytes must have
arrived intact, and every handle must have run or been cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import ssl
import sys
import time
import traceback
import zlib
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import iopoll
import iopoll.aio

from .common import Violation
from .loops import HANG_SECONDS, STALL_SECONDS
from .traffic import ACK, HEADER, Ledger, Plan, Traffic, linger_zero, tls_contexts

__all__ = ["AioTarget", "aio_targets"]

_READ_SIZE = 65_536


@dataclass(frozen=True)
class AioTarget:
    """``iopoll.aio.run``, or a ``Runner`` on ``Loop(IoPollSelector(backend))``."""

    name: str
    backend: str  # "AUTO" for iopoll.aio.run
    select_limit: bool

    def run(self, main: Coroutine[Any, Any, None]) -> None:
        """Run ``main`` to the end on this target's loop, and close the loop."""
        if self.backend == "AUTO":
            iopoll.aio.run(main)
            return
        backend = iopoll.Backend[self.backend]

        def factory() -> asyncio.AbstractEventLoop:
            return iopoll.aio.Loop(iopoll.aio.IoPollSelector(backend))

        if sys.version_info >= (3, 11):
            with asyncio.Runner(loop_factory=factory) as runner:
                runner.run(main)
            return
        loop = factory()  # pragma: no cover (3.10: asyncio.run's own sequence)
        try:
            loop.run_until_complete(main)
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    def replay(self, seed: int, connections: int) -> str:
        return (
            f"python -m benchmarks.soak aio --backend {self.backend} --seed {seed} "
            f"--connections {connections}"
        )

    def soak(self, traffic: Traffic) -> Ledger:
        """Run one soak on a new loop, and return its ledger once checked."""
        soak = AioSoak(traffic)
        try:
            self.run(soak.main())
        except asyncio.TimeoutError:
            raise Violation(
                f"the connections were not all done {HANG_SECONDS:.0f} s after the soak's time"
            ) from None
        soak.ledger.check(traffic.planner.payload)
        return soak.ledger


def aio_targets(backend: str = "all") -> list[AioTarget]:
    """``iopoll.aio.run`` (``--backend AUTO`` or ``all``) and one ``IoPollSelector`` target
    per backend named."""
    targets = []
    if backend in ("all", "AUTO"):
        targets.append(AioTarget("aio run", "AUTO", False))
    for member in iopoll.Backend.available_backends():
        if backend in ("all", member.name):
            targets.append(
                AioTarget(f"aio IoPollSelector-{member.name}", member.name, member.name == "SELECT")
            )
    return targets


class AioSoak:
    """Servers, clients and the ledger of one asyncio soak."""

    def __init__(self, traffic: Traffic) -> None:
        self.planner = traffic.planner
        self.ledger = Ledger()
        self.connections = traffic.connections
        self.seconds = traffic.seconds
        self.total = traffic.total
        self.log = traffic.log
        self.progress = traffic.progress
        self.server_tls, self.client_tls = tls_contexts()
        self.ports: dict[bool, int] = {}
        self.finished_sides: dict[int, int] = {}
        self.handlers: set[asyncio.Task[None]] = set()
        self.rng = random.Random(self.planner.rng.random())

    async def main(self) -> None:
        """Serve, spawn clients while there is time, then wait for every task."""
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(self.loop_error)
        servers = []
        for tls in (False, True):
            server = await asyncio.start_server(
                self.serve, "127.0.0.1", 0, ssl=self.server_tls if tls else None, backlog=1024
            )
            servers.append(server)
            self.ports[tls] = server.sockets[0].getsockname()[1]
        deadline = time.monotonic() + self.seconds
        slots = asyncio.Semaphore(self.connections)
        clients: set[asyncio.Task[None]] = set()
        try:
            while time.monotonic() < deadline and (
                self.total is None or self.planner.made < self.total
            ):
                await slots.acquire()
                plan = self.planner.next()
                self.ledger.began(plan)
                self.log.step = plan.index
                self.log.add(f"connection {plan}")
                task = asyncio.create_task(self.client(plan))
                clients.add(task)
                task.add_done_callback(functools.partial(self.client_done, clients, slots))
                if self.progress is not None:
                    self.progress.tick(
                        f"connections={self.planner.made:,} open={len(clients)} "
                        f"done={len(self.ledger.done):,}"
                    )
            await asyncio.wait_for(self.finish(clients), HANG_SECONDS)
        finally:
            for server in servers:
                server.close()
                await server.wait_closed()

    @staticmethod
    def client_done(
        clients: set[asyncio.Task[None]], slots: asyncio.Semaphore, task: asyncio.Task[None]
    ) -> None:
        clients.discard(task)
        slots.release()

    async def finish(self, clients: set[asyncio.Task[None]]) -> None:
        while clients or self.handlers:
            await asyncio.gather(*clients, *self.handlers)

    def loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        # A reset connection may make asyncio's TLS transport log a failed write or read.
        if isinstance(exc, (ConnectionError, ssl.SSLError)):
            return
        self.ledger.errors.append(f"the loop's exception handler got {context}")

    # -- one-time callbacks through the ledger ----------------------------------------------------

    def soon(self, name: str) -> None:
        """A ``call_soon`` that must run."""
        self.ledger.one_time.add(name)
        asyncio.get_running_loop().call_soon(self.ledger.ran_once, name)

    def later(self, name: str, seconds: float, fn: Callable[[], None]) -> asyncio.TimerHandle:
        """A ``call_later`` whose fate (ran or cancelled) the ledger checks."""
        self.ledger.one_time.add(name)

        def callback() -> None:
            self.ledger.ran_once(name)
            fn()

        return asyncio.get_running_loop().call_later(seconds, callback)

    def cancel(self, name: str, handle: asyncio.TimerHandle) -> None:
        if name not in self.ledger.ran:
            self.ledger.cancelled.add(name)
        handle.cancel()

    def side_done(self, plan: Plan, client: bool) -> None:
        if plan.mode == "reset":
            if client:
                self.ledger.done.add(plan.index)
            return
        sides = self.finished_sides.pop(plan.index, 0) + 1
        if sides == 2:
            self.ledger.done.add(plan.index)
        else:
            self.finished_sides[plan.index] = sides

    # -- the client ------------------------------------------------------------------------------

    async def client(self, plan: Plan) -> None:
        index = plan.index
        self.soon(f"soon-{index}")
        stall = self.later(
            f"stall-{index}",
            STALL_SECONDS,
            lambda: self.ledger.errors.append(f"client of {plan} stalled for {STALL_SECONDS} s"),
        )
        maybe = self.later(f"maybe-{index}", self.rng.random() * 0.01, lambda: None)
        if self.rng.random() < 0.5:
            self.cancel(f"maybe-{index}", maybe)
        try:
            await self.talk(plan)
        except Exception:
            self.ledger.errors.append(f"client of {plan} raised {traceback.format_exc()}")
        finally:
            self.cancel(f"stall-{index}", stall)
            self.side_done(plan, client=True)

    async def talk(self, plan: Plan) -> None:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1",
            self.ports[plan.tls],
            ssl=self.client_tls if plan.tls else None,
            server_hostname="localhost" if plan.tls else None,
        )
        payload = self.planner.bytes_of(plan)
        writer.write(plan.header())
        end = plan.reset_after if plan.mode == "reset" else plan.size
        for start in range(0, end, plan.chunk):
            writer.write(payload[start : min(start + plan.chunk, end)])
            await writer.drain()
        if plan.mode == "reset":
            linger_zero(writer.get_extra_info("socket"))
            writer.transport.abort()
            return
        if plan.mode == "half":
            await writer.drain()
            writer.write_eof()
        if plan.mode in ("half", "ack"):
            ack = await reader.readexactly(ACK.size)
            count, crc = ACK.unpack(ack)
            if count == plan.size and crc == plan.crc(self.planner.payload):
                self.ledger.received[plan.index].acked = True
            if plan.mode == "half" and await reader.read() != b"":
                self.ledger.errors.append(f"{plan}: bytes after the acknowledgement")
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()

    # -- the server ------------------------------------------------------------------------------

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        try:
            await self.receive(reader, writer)
        except Exception:
            self.ledger.errors.append(f"a server raised {traceback.format_exc()}")
        finally:
            self.handlers.discard(task)

    async def receive(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        plan: Plan | None = None
        try:
            head = await reader.readexactly(HEADER.size)
            index, _, _ = HEADER.unpack(head)
            plan = self.ledger.plans[index]
            got = self.ledger.received[index]
            acked = False
            while True:
                if plan.mode == "ack" and got.count == plan.size and not acked:
                    writer.write(ACK.pack(got.count, got.crc))
                    await writer.drain()
                    acked = True
                data = await reader.read(_READ_SIZE)
                if not data:
                    break
                got.count += len(data)
                got.crc = zlib.crc32(data, got.crc)
            got.eof = True
            if plan.mode == "half":
                writer.write(ACK.pack(got.count, got.crc))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            if plan is not None:
                self.ledger.received[plan.index].reset = True
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await writer.wait_closed()
            if plan is not None:
                self.side_done(plan, client=False)
