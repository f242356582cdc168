"""The C dispatch against Python code that frees, rebinds or mistypes what the C code reads.

``IoPollDriver``'s C methods read the driver's slots, its records' slots and list items
through borrowed references, and some of those reads reach across a call into Python code: a
number's ``__add__`` or comparison, a ``__bool__``, a ``__hash__``, a finalizer run by a GC
allocation, an overridden ``_now()``, ``_wait()`` or ``getcurrent()``.  Code there can rebind
the slot or empty the list, so the object C holds is freed, or the index C holds goes stale;
an object of the wrong type in a private queue must raise what Python raises rather than be
read by offset.  Each scenario of ``tests/reentry_scenarios.py`` does one of these things to
a driver and prints what it saw.

A use after free often reads memory that still looks right, so each scenario runs in a child
process with ``PYTHONMALLOC=debug``, which fills freed memory: the C driver must then exit
normally (a signal is a crash) and print exactly what the pure-Python reference
(``PyIoPollDriver``) prints, which the reference must do without an error.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import iopoll
from iopoll.loop._iopoll_driver import ACCELERATED
from reentry_scenarios import SCENARIOS

needs_c = pytest.mark.skipif(not ACCELERATED, reason="iopoll.loop._speedups is not in use")
needs_greenlet = pytest.mark.skipif(
    importlib.util.find_spec("greenlet") is None, reason="greenlet is not installed"
)

# Since 3.12 a collection waits for the interpreter's next check between bytecodes: none
# runs inside a C method, so gc_defer's finalizer runs after the C defer() returned, where
# the Python one's runs inside it (both then do what they should; they only differ in when).
collects_in_allocations = pytest.mark.skipif(
    sys.version_info >= (3, 12), reason="no collection runs inside an allocation since 3.12"
)
MARKS = {"runner_last": [needs_greenlet], "runner_last_type": [needs_greenlet],
         "suspension_runner_type": [needs_greenlet], "gc_defer": [collects_in_allocations]}

# one test per scenario, named after it
PARAMS = [pytest.param(name, marks=MARKS.get(name, [])) for name in SCENARIOS]

TESTS = Path(__file__).resolve().parent
SOURCES = Path(iopoll.__file__).resolve().parent.parent  # where this session imports iopoll


def run_scenario(name: str, cls: str) -> subprocess.CompletedProcess[str]:
    """Run scenario ``name`` on the driver class ``cls`` in a child with a debug allocator
    (or, under ``.ci/sanitizers``' ASan run, with ``PYTHONMALLOC=malloc``, which it keeps:
    ASan then sees every object's memory and reports the first read after a free)."""
    path = [str(TESTS), str(SOURCES), os.environ.get("PYTHONPATH", "")]
    allocator = "malloc" if os.environ.get("PYTHONMALLOC") == "malloc" else "debug"
    imports = os.pathsep.join(filter(None, path))
    env = {**os.environ, "PYTHONMALLOC": allocator, "PYTHONPATH": imports}
    return subprocess.run(
        [sys.executable, "-X", "faulthandler", "-m", "reentry_scenarios", name, cls],
        cwd=TESTS,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def outcome(done: subprocess.CompletedProcess[str]) -> str:
    """How a child ended, and the end of what it wrote to stderr, for an assertion message."""
    if done.returncode < 0:
        ended = f"crashed: {signal.Signals(-done.returncode).name}"
    else:
        ended = f"exit status {done.returncode}"
    return f"{ended}\nstdout: {done.stdout!r}\nstderr:\n{done.stderr[-3000:]}"


@needs_c
@pytest.mark.parametrize("name", PARAMS)
def test_the_c_driver_survives_and_matches_the_pure_one(name: str) -> None:
    """Under PYTHONMALLOC=debug the C driver exits normally and prints what the pure one does."""
    expected = run_scenario(name, "PyIoPollDriver")
    assert expected.returncode == 0, f"the pure driver failed the scenario: {outcome(expected)}"
    assert expected.stdout.count("\n") == 1, expected.stdout
    got = run_scenario(name, "IoPollDriver")
    assert got.returncode == 0, outcome(got)
    assert got.stdout == expected.stdout, outcome(got)
