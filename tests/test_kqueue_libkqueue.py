"""The KQUEUE backend run for real on Linux, over libkqueue (a userspace kqueue on epoll).

``IOPOLL_TEST_LIBKQUEUE`` names a built ``libkqueue.so.0`` (``.ci/run`` builds one from
``../shared/vendor/``); without it this module is skipped, and the reason says how to get
one.  The shipped mechanism (``iopoll._kqueue.KqueueMechanism``) runs unchanged: the
test-only ctypes binding ``tests/libkqueue.py`` stands in for ``select.kqueue``.

- The regression tests below hold the mechanism to what real kqueue does (each failed on the
  first version of ``_kqueue.py``); they install the binding for one test at a time.
- The slow tests run, each in a process of its own (installing the binding changes
  ``select`` and ``Backend`` for the whole process): the whole conformance suite with
  ``--strict-extras``, the project's backend tests, and CPython's selector tests through
  ``IoPollSelector(Backend.KQUEUE)``.  What fails only because of libkqueue (a BSD kqueue
  passes it) is a strict xfail whose reason names the libkqueue behaviour
  (``tests/libkqueue_session.py``).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import unittest
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import libkqueue

LIBRARY = libkqueue.library_path()
TESTS = Path(__file__).resolve().parent

pytestmark = pytest.mark.skipif(LIBRARY is None, reason=libkqueue.HOW_TO_GET_IT)


@pytest.fixture
def kq() -> Iterator[ModuleType]:
    """``iopoll`` with ``Backend.KQUEUE`` on libkqueue for this test only."""
    import iopoll

    assert LIBRARY is not None
    installation = libkqueue.Installation(libkqueue.load(LIBRARY))
    try:
        yield iopoll
    finally:
        installation.undo()


@pytest.fixture
def ctx(kq: ModuleType) -> Iterator[Any]:
    with kq.Context(kq.Backend.KQUEUE) as context:
        yield context


def _reported(ctx: Any, timeout: float = 0.2) -> dict[Any, Any]:
    return {w.data: w.triggered_events for w in ctx.wait(timeout)}


def _close_all(ctx: Any, *fds: int) -> None:
    """Close ``ctx``, then each of ``fds`` the test has not closed itself (those it set to -1).

    The Context goes first, so that it never holds a registration of a closed fd.
    """
    ctx.close()
    for fd in fds:
        if fd >= 0:
            os.close(fd)


# -- what real kqueue does differently: one regression test per fix ----------------------


def test_switching_level_to_edge_and_back_changes_the_mode(
    kq: ModuleType, ctx: Any, pairs: Any
) -> None:
    """BSD keeps a knote's EV_CLEAR from its creation: a mode change deletes and re-adds."""
    a, b = pairs()
    watcher = ctx.add(b, kq.Event.READ, "b")
    a.send(b"x")
    assert [_reported(ctx), _reported(ctx, 0)] == [{"b": kq.Event.READ}] * 2
    watcher.modify_events(kq.Event.READ | kq.Event.EDGE_TRIGGERED)
    assert _reported(ctx) in ({}, {"b": kq.Event.READ})  # the switch: at most once
    assert _reported(ctx) == {}
    watcher.modify_events(kq.Event.READ)
    assert [_reported(ctx), _reported(ctx, 0)] == [{"b": kq.Event.READ}] * 2


def test_half_close_is_read_and_read_hangup_not_hangup(
    kq: ModuleType, ctx: Any, pairs: Any
) -> None:
    """EV_EOF on the read filter alone is the peer's shutdown(SHUT_WR): writing still works."""
    assert kq.Backend.KQUEUE.supports_read_hangup()
    a, b = pairs()
    ctx.add(b, kq.Event.READ | kq.Event.READ_HANGUP, "asked")
    plain = socket.socket(fileno=os.dup(b.fileno()))
    try:
        ctx.add(plain, kq.Event.READ, "plain")
        a.shutdown(socket.SHUT_WR)
        expected = {"asked": kq.Event.READ | kq.Event.READ_HANGUP, "plain": kq.Event.READ}
        assert [_reported(ctx), _reported(ctx, 0)] == [expected] * 2
        b.send(b"still open")
        assert a.recv(100) == b"still open"
    finally:
        plain.close()


def test_full_close_is_hangup_for_a_watcher_without_write(
    kq: ModuleType, ctx: Any, pairs: Any
) -> None:
    """The peer gone: HANGUP, asked or not, though a READ watcher has no write filter."""
    a, b = pairs()
    ctx.add(b, kq.Event.READ | kq.Event.READ_HANGUP, "b")
    a.close()
    expected = {"b": kq.Event.READ | kq.Event.READ_HANGUP | kq.Event.HANGUP}
    assert [_reported(ctx), _reported(ctx, 0)] == [expected] * 2


def test_a_hangup_probe_that_found_nothing_leaves_nothing_behind(
    kq: ModuleType, ctx: Any, pairs: Any
) -> None:
    """A READ watcher has no write filter, so at its read filter's EV_EOF the mechanism asks
    a second kqueue (a one-shot write filter) whether writing is over too.  When the socket
    cannot write the probe finds nothing and must be taken back: left there, it would fire
    once the socket drains and be what the next probe, of another socket, reads (that
    socket's peer gone, yet no HANGUP)."""
    from test_polyfill_fused_wait import _drain, _fill

    a1, b1 = pairs()
    first = ctx.add(b1, kq.Event.READ, "b1")
    _fill(b1)  # b1 cannot write
    a1.shutdown(socket.SHUT_WR)  # a half-close: EV_EOF on b1's read filter
    assert _reported(ctx) == {"b1": kq.Event.READ}  # the probe found b1 not writable
    first.remove()
    _drain(a1)  # b1 can write again: a probe left behind would fire now
    a2, b2 = pairs()
    ctx.add(b2, kq.Event.READ, "b2")
    a2.close()  # the peer gone: both directions over
    expected = {"b2": kq.Event.READ | kq.Event.HANGUP}
    assert [_reported(ctx), _reported(ctx, 0)] == [expected] * 2


def test_read_hangup_alone_ignores_unread_bytes_without_spinning(
    kq: ModuleType, ctx: Any, pairs: Any
) -> None:
    """READ_HANGUP without READ: unread bytes wake no wait; the half-close is level."""
    a, b = pairs()
    ctx.add(b, kq.Event.READ_HANGUP, "b")
    a.send(b"unread")
    started, cpu = time.monotonic(), time.process_time()
    assert ctx.wait(0.3) == []
    assert time.monotonic() - started >= 0.25
    assert time.process_time() - cpu < 0.15, "wait() spun on the unread bytes"
    a.shutdown(socket.SHUT_WR)
    assert [_reported(ctx), _reported(ctx, 0)] == [{"b": kq.Event.READ_HANGUP}] * 2


def test_read_hangup_made_edge_after_end_of_file_is_reported_once(
    kq: ModuleType, ctx: Any, pairs: Any
) -> None:
    """A level READ_HANGUP-only watcher at end of file, modified to EDGE_TRIGGERED: the end
    of file it had already reported is no new edge, and it must not come out on every wait
    (the level state kept for it outlived the change)."""
    a, b = pairs()
    watcher = ctx.add(b, kq.Event.READ_HANGUP, "b")
    a.shutdown(socket.SHUT_WR)
    assert _reported(ctx) == {"b": kq.Event.READ_HANGUP}
    watcher.modify_events(kq.Event.READ_HANGUP | kq.Event.EDGE_TRIGGERED)
    reports = [_reported(ctx, 0.05) for _ in range(3)]
    assert reports.count({}) >= 2, reports  # at most the edge of arming it again


def test_pipe_read_end_at_eof_is_hangup_then_read_only_while_bytes_are_left(
    kq: ModuleType, ctx: Any
) -> None:
    """A pipe whose writer is gone: EV_EOF with data > 0 is READ|HANGUP, with 0 HANGUP."""
    read_fd, write_fd = os.pipe()
    try:
        ctx.add(read_fd, kq.Event.READ, "r")
        os.write(write_fd, b"last")
        os.close(write_fd)
        write_fd = -1
        assert _reported(ctx) == {"r": kq.Event.READ | kq.Event.HANGUP}
        assert os.read(read_fd, 100) == b"last"
        assert [_reported(ctx), _reported(ctx, 0)] == [{"r": kq.Event.HANGUP}] * 2
    finally:
        _close_all(ctx, read_fd, write_fd)


def test_pipe_write_end_with_its_reader_gone_is_write_and_error(kq: ModuleType, ctx: Any) -> None:
    """EV_EOF on a pipe's write filter: writing fails with EPIPE: WRITE|ERROR, no HANGUP."""
    read_fd, write_fd = os.pipe()
    try:
        ctx.add(write_fd, kq.Event.WRITE, "w")
        os.close(read_fd)
        read_fd = -1
        assert [_reported(ctx), _reported(ctx, 0)] == [{"w": kq.Event.WRITE | kq.Event.ERROR}] * 2
    finally:
        _close_all(ctx, read_fd, write_fd)


def test_regular_file_is_read_until_end_of_file_and_always_write(kq: ModuleType, ctx: Any) -> None:
    """KQUEUE's rule where SPEC 6.7 is silent: READ while the offset is before end of file."""
    with tempfile.TemporaryFile() as stream:
        stream.write(b"content")
        stream.seek(0)
        watcher = ctx.add(stream, kq.Event.READ | kq.Event.WRITE, "f")
        both = {"f": kq.Event.READ | kq.Event.WRITE}
        assert [_reported(ctx, 0), _reported(ctx, 0)] == [both] * 2
        stream.read()
        watcher.modify_events(kq.Event.READ | kq.Event.WRITE)
        assert _reported(ctx, 0) == {"f": kq.Event.WRITE}


def test_read_and_write_reports_of_many_fds_merge_per_fd(
    kq: ModuleType, ctx: Any, pairs: Any
) -> None:
    """Two kevents per READ|WRITE fd: poll asks kevent for two per fd and merges them."""
    ends = [pairs() for _ in range(40)]
    for i, (a, b) in enumerate(ends):
        ctx.add(b, kq.Event.READ | kq.Event.WRITE, i)
        a.send(b"x")
    time.sleep(0.05)
    ready = ctx.wait(0)
    assert len(ready) == 40
    assert all(w.triggered_events == kq.Event.READ | kq.Event.WRITE for w in ready)


# -- the long runs, each in a process of its own ---------------------------------------


def _run(
    args: list[str], first: Path | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """``python *args`` in ``tests/``, with ``tests/`` first on its import path (after
    ``first``, if given), and ``env`` added to the environment."""
    path = os.pathsep.join(
        [*([str(first)] if first else []), str(TESTS), os.environ.get("PYTHONPATH", "")]
    )
    command = [sys.executable, *args]
    environment = dict(os.environ, PYTHONPATH=path, **env)
    return subprocess.run(
        command, cwd=TESTS, env=environment, capture_output=True, text=True, timeout=600
    )


def _counts(output: str) -> dict[str, int]:
    last = output.strip().splitlines()[-1]
    return {word: int(number) for number, word in re.findall(r"(\d+) (\w+)", last)}


@pytest.mark.slow
def test_conformance_suite_on_kqueue_over_libkqueue() -> None:
    """``python -m iopoll_conformance kqueue_over_libkqueue --backend KQUEUE --strict-extras``:
    every case passes, or is a strict xfail of ``libkqueue_session.XFAILS``."""
    result = _run(
        [
            "-m",
            "iopoll_conformance",
            "kqueue_over_libkqueue",
            "--backend",
            "KQUEUE",
            "--strict-extras",
            "-p",
            "libkqueue_session",
            "-q",
            "-p",
            "no:cacheprovider",
        ]
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    counts = _counts(result.stdout)
    assert counts.get("xfailed", 0) == 6, result.stdout[-3000:]
    assert counts.get("passed", 0) >= 190, result.stdout[-3000:]


@pytest.mark.slow
def test_project_backend_tests_on_kqueue_over_libkqueue() -> None:
    """The project's tests parametrized on every backend, on KQUEUE: the hidden bookkeeping
    (retire, rebuild) and the fast path (C and pure Python), the selector and asyncio loop."""
    result = _run(
        [
            "-m",
            "pytest",
            "-p",
            "libkqueue_session",
            "-p",
            "no:cacheprovider",
            "-q",
            "-k",
            "KQUEUE or kqueue",
            # Holds Linux to having no kqueue: the binding gives it one.
            "--deselect",
            "tests/test_native_internals.py::test_backends_this_platform_lacks_are_unavailable"
            "[Backend.KQUEUE]",
            "test_hidden_bookkeeping.py",
            "test_fast_path.py",
            "test_native_internals.py",
        ]
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert _counts(result.stdout).get("passed", 0) > 10, result.stdout[-3000:]


# -- the C fast path's own kevent(), in a build of it over libkqueue ---------------------
#
# iopoll._speedups calls kevent(2) itself where <sys/event.h> is the OS's (BSD, macOS).  Here
# a copy of the sources is built with libkqueue's header and library (IOPOLL_WITH_LIBKQUEUE),
# warning-free with -Wall -Wextra, and the KQUEUE cases run with that copy first on the
# import path: kqueue_c_wait_cases.py (C against Python, and that C is what waits), the
# test_speedups_differential.py cases written for one backend on KQUEUE, and the whole
# conformance suite.

ROOT = TESTS.parent


@pytest.fixture(scope="module")
def c_build_over_libkqueue(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``src`` directory of a copy of the sources whose ``iopoll._speedups`` was built
    against libkqueue.  Skips without a C compiler or libkqueue's headers."""
    import shutil
    import sysconfig

    assert LIBRARY is not None
    library = Path(LIBRARY).resolve()
    headers = library.parent.parent / "include" / "kqueue"
    if not (headers / "sys" / "event.h").is_file():
        pytest.skip(f"libkqueue's headers are not at {headers} (cmake --install puts them there)")
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        pytest.skip("no C compiler on PATH")
    source = tmp_path_factory.mktemp("c_over_libkqueue") / "src"
    shutil.copytree(
        ROOT / "src", source, ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__")
    )
    package = source / "iopoll"
    built = package / f"_speedups{sysconfig.get_config_var('EXT_SUFFIX')}"
    command = [
        compiler, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror",
        f"-I{sysconfig.get_paths()['include']}", "-DIOPOLL_WITH_LIBKQUEUE", f"-I{headers}",
        *sorted(str(path) for path in package.glob("*.c")), "-o", str(built),
        str(library), f"-Wl,-rpath,{library.parent}",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and not done.stderr, done.stderr
    return source


@pytest.mark.slow
def test_c_kevent_path_against_python_over_libkqueue(c_build_over_libkqueue: Path) -> None:
    """kqueue_c_wait_cases.py and the one-backend cases of test_speedups_differential.py on
    KQUEUE, with the C build: every case passes, or is one of libkqueue_session.py's strict
    xfails for this run (a closed fd libkqueue cannot see)."""
    check = _run(
        ["-c", "import iopoll._native, iopoll._speedups as c; "
         "assert iopoll._native.ACCELERATED; print(c.__file__)"],
        c_build_over_libkqueue,
    )  # fmt: skip
    assert check.stdout.startswith(str(c_build_over_libkqueue)), check.stdout + check.stderr
    result = _run(
        [
            "-m", "pytest", "-p", "libkqueue_session", "-p", "no:cacheprovider", "-q",
            "kqueue_c_wait_cases.py", "test_speedups_differential.py",
        ],
        c_build_over_libkqueue,
        IOPOLL_TEST_FAST_BACKEND="KQUEUE",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    counts = _counts(result.stdout)
    assert counts.get("xfailed", 0) == 22, result.stdout[-3000:]
    # The one EPOLL-shaped case libkqueue cannot set up (a freed fd number reused), on both
    # modules.
    assert counts.get("skipped", 0) == 2, result.stdout[-3000:]
    assert counts.get("passed", 0) >= 180, result.stdout[-3000:]


@pytest.mark.slow
def test_conformance_suite_with_the_c_kevent_path(c_build_over_libkqueue: Path) -> None:
    """The whole conformance suite on KQUEUE with the C build: as on the Python path."""
    result = _run(
        [
            "-m", "iopoll_conformance", "kqueue_over_libkqueue", "--backend", "KQUEUE",
            "--strict-extras", "-p", "libkqueue_session", "-q", "-p", "no:cacheprovider",
        ],
        c_build_over_libkqueue,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    counts = _counts(result.stdout)
    assert counts.get("xfailed", 0) == 6, result.stdout[-3000:]
    assert counts.get("passed", 0) >= 190, result.stdout[-3000:]


# -- CPython's selector tests through IoPollSelector(Backend.KQUEUE) ---------------------

try:
    from test import test_selectors
except ImportError:  # distributions that package CPython's test suite separately
    test_selectors = None
_HAS_SELECTOR_TESTS = test_selectors is not None
_Cases: Any = object
if _HAS_SELECTOR_TESTS:
    import test_aio_selectors_cpython as _cpython

    _Cases = _cpython._ScalableIoPollCases


@pytest.mark.slow
@unittest.skipUnless(_HAS_SELECTOR_TESTS, "CPython's test package is not installed")
class TestKqueueIoPollSelectorOverLibkqueue(_Cases, unittest.TestCase):
    """``BaseSelectorTestCase`` + ``ScalableSelectorMixIn`` and ``KqueueSelectorTestCase``'s
    extra case on ``IoPollSelector(Backend.KQUEUE)``, with the binding in place for the
    class (``AUTO`` resolves to ``KQUEUE`` meanwhile, as on BSD)."""

    _installation: libkqueue.Installation | None = None

    @classmethod
    def setUpClass(cls) -> None:
        import iopoll

        assert LIBRARY is not None
        cls._installation = libkqueue.Installation(libkqueue.load(LIBRARY))
        cls.SELECTOR = _cpython._factory(iopoll.Backend.KQUEUE)
        super().setUpClass()

    @classmethod
    def tearDownClass(cls) -> None:
        super().tearDownClass()
        if cls._installation is not None:
            cls._installation.undo()

    if _HAS_SELECTOR_TESTS:
        test_register_bad_fd = test_selectors.KqueueSelectorTestCase.test_register_bad_fd
