"""iopoll where Windows' standard library lacks what POSIX has, tried on this machine.

Windows CPython has no ``select.epoll``, ``select.poll``, ``select.kqueue``, ``fcntl`` or
``termios``.  Each test here runs a child interpreter whose prelude takes them away before
anything else is imported (the attributes deleted from ``select``, the modules blocked
through ``sys.modules[name] = None``), then imports ``iopoll``, ``iopoll_polyfill``,
``iopoll.aio`` and ``iopoll.loop`` and uses the ``SELECT`` backend and the polyfill there.
It is not Windows (sockets are still POSIX fds, ``sys.platform`` is still ``linux``): it
proves only that nothing imports or calls what is missing.  Also here: the C code includes
no POSIX header outside a conditional, and compiles without warnings with the POSIX
platform macros undefined, so that MSVC can build it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Run first in the child: Windows' view of the standard library, as far as iopoll cares.
PRELUDE = textwrap.dedent(
    """
    import sys
    import select
    for _name in ("epoll", "poll", "kqueue", "kevent", "devpoll"):
        if hasattr(select, _name):
            delattr(select, _name)
    for _name in ("fcntl", "termios"):
        sys.modules[_name] = None  # import fails with ImportError
    del _name
    """
)


# On Windows itself the prelude changes nothing and AUTO is WSAPOLL: these tests are for
# POSIX machines standing in for it; the real thing runs the rest of the suite there.
stand_in = pytest.mark.skipif(sys.platform == "win32", reason="this is Windows: no stand-in")


def run_child(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``PRELUDE`` then ``code`` in a fresh interpreter; fail the test if it fails."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("IOPOLL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "tests"), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done


@stand_in
def test_imports_and_backends_without_posix_modules() -> None:
    done = run_child(
        """
        import iopoll, iopoll_polyfill, iopoll.aio, iopoll.loop, iopoll_conformance
        assert "fcntl" not in sys.modules or sys.modules["fcntl"] is None
        assert iopoll.Backend.available_backends() == [iopoll.Backend.SELECT]
        assert iopoll.Backend.AUTO.resolve() is iopoll.Backend.SELECT
        assert iopoll_polyfill.IMPLEMENTATION == "select"
        for name in ("POLL", "EPOLL", "KQUEUE", "EVENT_PORTS"):
            assert not iopoll.Backend[name].is_available(), name
        print("ok")
        """
    )
    assert done.stdout.strip() == "ok"


@stand_in
def test_socketpair_round_trip_on_select_and_the_polyfill() -> None:
    run_child(
        """
        import socket
        import iopoll, iopoll_polyfill

        for api, wait in ((iopoll, (1,)), (iopoll_polyfill, (1, 0))):
            a, b = socket.socketpair()
            a.setblocking(False)
            b.setblocking(False)
            with a, b, api.Context() as ctx:
                assert ctx.backend.name == "SELECT"
                reader = ctx.add(b, api.Event.READ, "b")
                writer = ctx.add(a, api.Event.WRITE | api.Event.ONESHOT, "a")
                assert [w.data for w in ctx.wait(*wait)] == ["a"]
                a.send(b"ping")
                assert [w.data for w in ctx.wait(*wait)] == ["b"]
                assert b.recv(10) == b"ping"
                writer.modify_events(api.Event.WRITE)
                b.send(b"pong")
                a.close()
                got = {w.data: w.triggered_events for w in ctx.wait(*wait)}
                assert got["b"] & api.Event.HANGUP, got
                reader.remove()
        """
    )


@stand_in
def test_loop_and_asyncio_on_select_without_posix_modules() -> None:
    run_child(
        """
        import asyncio, socket
        import iopoll.aio
        from iopoll import loop

        a, b = socket.socketpair()
        got = []

        def on_data(callback_id, stream):
            got.append(stream.recv(10))
            loop.cancel(callback_id)

        loop.on_readable(b, on_data)
        loop.delay(0.01, lambda callback_id: a.send(b"ping") and None)
        loop.run()
        assert got == [b"ping"], got

        async def echo():
            reader, writer = await asyncio.open_connection(sock=a)
            peer_reader, peer_writer = await asyncio.open_connection(sock=b)
            writer.write(b"hello")
            peer_writer.write(await peer_reader.readexactly(5))
            assert await reader.readexactly(5) == b"hello"
            writer.close()
            peer_writer.close()
            return asyncio.get_running_loop()._selector.backend.name

        assert iopoll.aio.run(echo()) == "SELECT"
        """
    )


@stand_in
@pytest.mark.slow  # pure Python on every version; its other tests here run everywhere
def test_conformance_cases_on_select_without_posix_modules() -> None:
    """A few rule groups on the native SELECT backend and the polyfill, in the child."""
    done = run_child(
        """
        import pytest
        sys.exit(pytest.main(sys.argv[1:]))
        """,
        "tests/test_conformance.py",
        "-q",
        "-p",
        "no:cacheprovider",
        "-m",
        "not slow",
        "-k",
        "(TestIopoll or TestFallback) and (oneshot or max_events or closed_dup)",
        timeout=300,
    )
    assert re.search(r"\b\d+ passed\b", done.stdout), done.stdout[-2000:]
    assert " failed" not in done.stdout.splitlines()[-1]


# Standard C and Python headers MSVC has; anything else must sit inside an #if.
_PORTABLE_HEADERS = {
    "Python.h",
    "structmember.h",
    "stddef.h",
    "stdint.h",
    "stdlib.h",
    "string.h",
    "limits.h",
    "math.h",
    "float.h",
    "errno.h",
}


def test_the_c_code_includes_no_posix_header_outside_a_conditional() -> None:
    """Every C file (both accelerators, their headers) includes only portable headers, or
    the project's own, unless inside an #if."""
    sources = sorted((ROOT / "src" / "iopoll").rglob("*.[ch]"))
    assert len(sources) >= 6, sources
    for source in sources:
        depth = 0
        unguarded = []
        for line in source.read_text().splitlines():
            directive = line.strip()
            if re.match(r"#\s*if", directive):
                depth += 1
            elif re.match(r"#\s*endif", directive):
                depth -= 1
            elif depth == 0 and (found := re.match(r'#\s*include\s*([<"])([^>"]+)', directive)):
                own = found.group(1) == '"' and (source.parent / found.group(2)).is_file()
                if not own:
                    unguarded.append(found.group(2))
        assert depth == 0, source
        assert set(unguarded) <= _PORTABLE_HEADERS, (source, set(unguarded) - _PORTABLE_HEADERS)
    c_file = ROOT / "src" / "iopoll" / "_speedups.h"
    assert "#include <Python.h>" in c_file.read_text(), "the parser above is wrong"


# What a compiler on no POSIX system leaves undefined, of the macros the C code asks.
_NOT_POSIX = ("-U__linux__", "-U__linux", "-Ulinux", "-U__unix__", "-U__unix", "-Uunix",
              "-U__APPLE__")


@pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason="Linux's system headers build without these macros; elsewhere the build is the test",
)
def test_the_c_code_compiles_where_no_posix_macro_is_defined() -> None:
    """Every C file, compiled as a platform with neither epoll nor poll sees it (Windows):
    no warning, so no function that only the POSIX branches define is called outside them.
    A C compiler on PATH (cc) is needed: skipped without one."""
    import shutil
    import sysconfig

    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        pytest.skip("no C compiler on PATH")
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").is_file():
        pytest.skip("no Python headers")
    sources = sorted((ROOT / "src" / "iopoll").rglob("*.c"))
    assert len(sources) >= 9, sources
    for source in sources:
        done = subprocess.run(
            [compiler, "-fsyntax-only", "-Wall", "-Wextra", "-Werror", *_NOT_POSIX,
             f"-I{include}", str(source)],
            capture_output=True, text=True, check=False,
        )
        assert done.returncode == 0, f"{source.name}:\n{done.stderr}"


@stand_in
def test_prelude_really_hides_the_modules() -> None:
    run_child(
        """
        import select
        assert not hasattr(select, "poll") and not hasattr(select, "epoll")
        for name in ("fcntl", "termios"):
            try:
                __import__(name)
            except ImportError:
                pass
            else:
                raise AssertionError(name + " imported")
        """
    )
