"""TCP echo round trips: stock asyncio vs ``iopoll.aio`` vs uvloop.

    python -m benchmarks.bench_aio [--quick] [--duration SECONDS] [--concurrency 1 10 100]

Each column runs the same asyncio ``Protocol`` echo server (1 KiB messages) in its own
process, on its own event loop.  The load comes from one client process, the same for
every column (uvloop when installed, else stock asyncio): N connections, each sending
1 KiB and waiting for the 1 KiB echo before sending again.  Reported: round trips per
second, and the ratio to stock asyncio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

MESSAGE = b"x" * 1024
LOOPS = ("asyncio", "iopoll.aio", "uvloop")


def _wait_language() -> str:
    import iopoll._backend

    return "C" if iopoll._backend.ACCELERATED else "pure Python"


def _loop_factory(name: str) -> Any:
    if name == "asyncio":
        return asyncio.SelectorEventLoop
    if name == "iopoll.aio":
        import iopoll.aio

        return iopoll.aio.new_event_loop
    import uvloop

    return uvloop.new_event_loop


def _run(name: str, coro: Any) -> Any:
    loop = _loop_factory(name)()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


# -- server process ----------------------------------------------------------------------


class EchoProtocol(asyncio.Protocol):
    """Writes back whatever it receives."""

    cpu_at_first_connection: float | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: Any = transport
        if EchoProtocol.cpu_at_first_connection is None:
            EchoProtocol.cpu_at_first_connection = _cpu_seconds()

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


async def _serve() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(EchoProtocol, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    # Serve until the parent closes our stdin.
    await loop.run_in_executor(None, sys.stdin.read)
    server.close()
    start = EchoProtocol.cpu_at_first_connection
    print(json.dumps({"cpu": _cpu_seconds() - start if start is not None else 0.0}), flush=True)


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- client process ----------------------------------------------------------------------


class ClientProtocol(asyncio.Protocol):
    """Sends 1 KiB, waits for it to come back whole, repeats; counts round trips."""

    def __init__(self, counter: list[int]) -> None:
        self.counter = counter
        self.pending = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: Any = transport
        self._send()

    def _send(self) -> None:
        self.pending = len(MESSAGE)
        self.transport.write(MESSAGE)

    def data_received(self, data: bytes) -> None:
        self.pending -= len(data)
        if self.pending <= 0:
            self.counter[0] += 1
            self._send()


async def _client(port: int, concurrency: int, duration: float) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    counter = [0]
    transports = []
    for _ in range(concurrency):
        transport, _ = await loop.create_connection(
            lambda: ClientProtocol(counter), "127.0.0.1", port
        )
        transports.append(transport)
    await asyncio.sleep(min(0.2, duration / 4))  # warm-up
    start_count, start = counter[0], time.perf_counter()
    await asyncio.sleep(duration)
    count, elapsed = counter[0] - start_count, time.perf_counter() - start
    for transport in transports:
        transport.close()
    return {"requests": count, "seconds": elapsed, "total": counter[0]}


def _client_loop() -> str:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


# -- driver ------------------------------------------------------------------------------


def _measure(server_loop: str, concurrency: int, duration: float) -> float:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    # asyncio reads into a fresh 256 KiB buffer per recv().  Whether glibc serves that from
    # mmap (three system calls a message) or from the heap depends on its dynamic threshold,
    # i.e. on what the process happened to allocate and free before: the same server then
    # runs at one speed or at a third of it.  Fixed thresholds give every column the heap,
    # kept between messages (no brk() to grow and trim it each time).
    server_env = dict(env, MALLOC_MMAP_THRESHOLD_="1048576", MALLOC_TRIM_THRESHOLD_="8388608")
    server = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.bench_aio", "--serve", server_loop],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=server_env,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdin is not None
        port = int(server.stdout.readline())
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.bench_aio",
                "--client",
                str(port),
                str(concurrency),
                str(duration),
            ],
            check=True,
            capture_output=True,
            text=True,
            env=env,
            timeout=duration + 60,
        ).stdout
        result = json.loads(out)
        server.stdin.close()
        cpu = json.loads(server.stdout.readline())["cpu"]
        print("cpu us/rt", server_loop, concurrency, round(cpu / result["total"] * 1e6, 3), round(result["requests"] / result["seconds"]), file=sys.stderr)
        return float(result["requests"] / result["seconds"])
    finally:
        if server.stdin is not None and not server.stdin.closed:
            server.stdin.close()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _available(name: str) -> bool:
    try:
        _loop_factory(name)
    except ImportError:
        return False
    return True


def _pin_to_cpu(index: int) -> None:
    # Server and client each get a core of their own: left to the scheduler, they sometimes
    # share one and sometimes not, and the figures jump between two modes (3x apart here).
    if hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) >= 2:
            os.sched_setaffinity(0, {cpus[index]})


def main(argv: list[str] | None = None) -> None:
    """Command line entry point (also the server and client processes)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="0.5 s per cell")
    parser.add_argument("--duration", type=float, default=2.0, help="seconds per cell")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs per cell")
    parser.add_argument("--serve", choices=LOOPS, help=argparse.SUPPRESS)
    parser.add_argument("--client", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.serve:
        _pin_to_cpu(0)
        _run(args.serve, _serve())
        return
    if args.client:
        _pin_to_cpu(1)
        port, concurrency, duration = args.client
        result = _run(_client_loop(), _client(int(port), int(concurrency), float(duration)))
        print(json.dumps(result))
        return

    duration = 0.5 if args.quick else args.duration
    if args.quick:
        args.repeats = 1
    columns = [name for name in LOOPS if _available(name)]
    print(
        f"TCP echo, 1 KiB messages, best of {args.repeats} x {duration:g} s per cell, "
        f"client on {_client_loop()}, "
        f"Python {sys.version.split()[0]}, iopoll's wait() in {_wait_language()}"
    )
    header = f"{'clients':>8} " + " ".join(f"{name + ' req/s':>18}" for name in columns)
    header += " " + " ".join(f"{name + ' ratio':>18}" for name in columns[1:])
    print(header)
    for concurrency in args.concurrency:
        rates = dict.fromkeys(columns, 0.0)
        for _ in range(args.repeats):  # interleaved, so that noise hits every column alike
            for name in columns:
                rates[name] = max(rates[name], _measure(name, concurrency, duration))
        row = f"{concurrency:>8} " + " ".join(f"{rates[name]:>18,.0f}" for name in columns)
        row += " " + " ".join(f"{rates[name] / rates['asyncio']:>17.2f}x" for name in columns[1:])
        print(row, flush=True)


if __name__ == "__main__":
    main()
