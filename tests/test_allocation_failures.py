"""Every allocation of the C paths failed in turn: an error raised, never a crash.

``tests/allocation_failure_scenarios.py`` has the scenarios and the walk; each runs here in a
child process under ``PYTHONMALLOC=debug``, so that a crash or a write to freed memory fails
its own test.  CPython's ``_testcapi.set_nomemory()`` makes the failures; where that module
is not built (some distributions' Pythons), the tests skip.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import iopoll
from iopoll._native import ACCELERATED as WAIT_IN_C
from iopoll.loop._iopoll_driver import ACCELERATED as LOOP_IN_C

TESTS = Path(__file__).resolve().parent
SOURCES = Path(iopoll.__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("_testcapi") is None, reason="_testcapi is not built here"
    ),
    pytest.mark.skipif(sys.platform == "win32", reason="socketpair and signals of POSIX"),
]

BACKENDS = [backend.name for backend in iopoll.Backend.available_backends()]
MODES = ("plain", "many", "oneshot", "closed", "dup", "leftovers", "timer")
WAITS = [
    pytest.param(f"wait-{backend}-{mode}", id=f"{backend}-{mode}")
    for backend in ("EPOLL", "POLL", "SELECT")
    for mode in MODES
    if backend in BACKENDS
]
REGISTRATIONS = [
    pytest.param(f"register-{backend}-{kind}", id=f"{backend}-{kind}")
    for backend in ("EPOLL", "POLL", "SELECT")
    for kind in ("socket", "int", "handle", "remove")
    if backend in BACKENDS
]
LOOPS = ["loop-defer", "loop-delay", "loop-repeat", "loop-io", "loop-signal", "loop-register"]


def walk(name: str, *, pure: bool = False) -> int:
    """Run scenario ``name`` in a child (``pure``: with ``IOPOLL_PURE_PYTHON=1``); how many
    allocations it failed."""
    path = [str(TESTS), str(SOURCES), os.environ.get("PYTHONPATH")]
    imports = os.pathsep.join(filter(None, path))
    # Under .ci/sanitizers' ASan run PYTHONMALLOC=malloc is kept: ASan then sees every block.
    allocator = "malloc" if os.environ.get("PYTHONMALLOC") == "malloc" else "debug"
    env = {**os.environ, "PYTHONMALLOC": allocator, "PYTHONPATH": imports}
    if pure:
        env["IOPOLL_PURE_PYTHON"] = "1"
    done = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-m", "allocation_failure_scenarios", name],
        cwd=TESTS,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode < 0:
        ended = f"crashed: {signal.Signals(-done.returncode).name}"
    else:
        ended = f"exit status {done.returncode}"
    assert done.returncode == 0, f"{ended}\n{done.stdout}\n{done.stderr[-3000:]}"
    found = re.fullmatch(rf"{re.escape(name)}: (\d+) allocations failed\n", done.stdout)
    assert found is not None, done.stdout
    return int(found.group(1))


@pytest.mark.skipif(not WAIT_IN_C, reason="iopoll._speedups is not in use")
@pytest.mark.parametrize("name", WAITS)
def test_the_c_wait_raises_memory_error_and_answers_the_next_wait(name: str) -> None:
    # At least the result list is allocated: a walk that failed nothing did not run.
    assert walk(name) >= 1


@pytest.mark.skipif(not LOOP_IN_C, reason="iopoll.loop._speedups is not in use")
@pytest.mark.parametrize("name", LOOPS)
def test_the_c_loop_raises_memory_error(name: str) -> None:
    assert walk(name) >= 1


@pytest.mark.parametrize("pure", [False, True], ids=["C", "pure"])
@pytest.mark.parametrize("name", REGISTRATIONS)
def test_a_failed_add_leaves_no_record_and_no_registration(name: str, pure: bool) -> None:
    """SPEC 1: nothing half-registered after a failed call, even when the failure is a
    MemoryError after the OS took the fd (the watcher, or a record of it, could not be
    made): the OS forgets the fd, and the next add() of it works.  Each allocation of
    add(), and of remove(), failed in turn, in C and in pure Python."""
    if not pure and not WAIT_IN_C:
        pytest.skip("iopoll._speedups is not in use")
    failed = walk(name, pure=pure)
    if not name.endswith("remove"):
        assert failed >= 1  # remove() may allocate nothing at all
