"""The hand-over (SPEC 7): ``import iopoll_polyfill`` gives iopoll's own objects when a native
backend exists, the select() implementation otherwise, or when ``IOPOLL_POLYFILL`` says so.

The choice is made once, at import, from the environment: every case runs in a fresh
interpreter.  Each child prints a JSON report that the test checks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import iopoll
import iopoll_polyfill
from iopoll_conformance.support import SPEC_NAMES

# The names of SPEC section 1, identical in iopoll and iopoll_polyfill.
SECTION_1 = list(SPEC_NAMES)

HAS_NATIVE = iopoll.Backend.AUTO.resolve() is not iopoll.Backend.SELECT

# Runs in the child, after an optional prelude: describes what iopoll_polyfill chose.
# argv[1] is SECTION_1 as JSON.
REPORT = """
import json, socket, sys
import iopoll_polyfill
from iopoll_polyfill import fallback

names = json.loads(sys.argv[1])
iopoll_module = sys.modules.get("iopoll")
a, b = socket.socketpair()
with iopoll_polyfill.Context() as ctx:
    ctx.add(b, iopoll_polyfill.Event.READ, "b")
    a.send(b"ping")
    round_trip = [(w.data, int(w.triggered_events)) for w in ctx.wait(1)]
    received = b.recv(10).decode()
    backend = ctx.backend.name
with fallback.Context() as select_ctx:
    fallback_backend = select_ctx.backend.name
print(json.dumps({
    "implementation": iopoll_polyfill.IMPLEMENTATION,
    "iopoll_loaded": iopoll_module is not None,
    "iopoll_submodules": sorted(
        name for name, module in sys.modules.items()
        if name.startswith("iopoll.") and module is not None
    ),
    "from_fallback": [n for n in names if getattr(iopoll_polyfill, n) is getattr(fallback, n)],
    "from_iopoll": [
        n for n in names
        if iopoll_module is not None and getattr(iopoll_polyfill, n) is getattr(iopoll_module, n)
    ],
    "context_is_fallback": iopoll_polyfill.Context is fallback.Context,
    "backend": backend,
    "available": [b.name for b in iopoll_polyfill.Backend.available_backends()],
    "fallback_available": [b.name for b in fallback.Backend.available_backends()],
    "fallback_backend": fallback_backend,
    "fallback_module": fallback.__name__,
    "round_trip": round_trip,
    "received": received,
    "all_exported": sorted(set(names) - set(iopoll_polyfill.__all__)),
}))
"""


def run_child(prelude: str = "", polyfill_env: str | None = None) -> dict[str, Any]:
    """Run ``prelude`` then ``REPORT`` in a new interpreter; return the JSON it printed."""
    env = dict(os.environ)
    env.pop("IOPOLL_POLYFILL", None)
    if polyfill_env is not None:
        env["IOPOLL_POLYFILL"] = polyfill_env
    # The source tree first, so that an uninstalled checkout (python3.10 with PYTHONPATH)
    # tests the same code as this process.
    src = str(Path(iopoll_polyfill.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    code = textwrap.dedent(prelude) + REPORT
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(SECTION_1)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def assert_select_chosen(report: dict[str, Any]) -> None:
    assert report["implementation"] == "select"
    assert report["context_is_fallback"] is True
    assert report["from_fallback"] == SECTION_1
    assert report["backend"] == "SELECT"
    assert report["available"] == ["SELECT"]
    assert report["round_trip"] == [["b", 1]]
    assert report["received"] == "ping"


def assert_fallback_is_select(report: dict[str, Any]) -> None:
    """Whatever was chosen, ``iopoll_polyfill.fallback`` is the select implementation."""
    assert report["fallback_module"] == "iopoll_polyfill.fallback"
    assert report["fallback_available"] == ["SELECT"]
    assert report["fallback_backend"] == "SELECT"
    assert report["all_exported"] == []


@pytest.mark.skipif(not HAS_NATIVE, reason="no native backend on this platform")
@pytest.mark.parametrize("value", [None, "", "0"], ids=["unset", "empty", "zero"])
def test_native_backend_is_handed_over(value: str | None) -> None:
    report = run_child(polyfill_env=value)
    assert report["implementation"] == "native"
    assert report["from_iopoll"] == SECTION_1  # every name: iopoll's very object
    assert report["context_is_fallback"] is False
    assert report["backend"] == iopoll.Backend.AUTO.resolve().name
    assert report["available"] == [b.name for b in iopoll.Backend.available_backends()]
    assert report["round_trip"] == [["b", 1]]
    assert_fallback_is_select(report)


@pytest.mark.parametrize("value", ["1", "yes", "true", "select", " "])
def test_iopoll_polyfill_variable_forces_the_select_implementation(value: str) -> None:
    report = run_child(polyfill_env=value)
    assert_select_chosen(report)
    assert_fallback_is_select(report)
    # The veto is read before iopoll is imported: it costs nothing and loads nothing.
    assert report["iopoll_loaded"] is False


def test_works_with_iopoll_absent() -> None:
    """``sys.modules["iopoll"] = None`` makes ``import iopoll`` fail, as if not installed."""
    report = run_child('import sys\nsys.modules["iopoll"] = None\n')
    assert_select_chosen(report)
    assert_fallback_is_select(report)
    assert report["iopoll_loaded"] is False
    assert report["iopoll_submodules"] == []


def test_iopoll_with_only_select_is_not_handed_over() -> None:
    """On a platform where iopoll's AUTO would be SELECT, the polyfill keeps its own."""
    prelude = """
    import iopoll
    from _iopoll_core.select_mechanism import SelectMechanism
    iopoll.Backend._mechanisms = {"SELECT": SelectMechanism}  # as on a platform without poll
    assert iopoll.Backend.AUTO.resolve() is iopoll.Backend.SELECT
    """
    report = run_child(prelude)
    assert_select_chosen(report)
    assert_fallback_is_select(report)


def test_this_process_made_the_documented_choice() -> None:
    """The in-process import agrees with the rule, under whatever environment pytest has."""
    forced = os.environ.get("IOPOLL_POLYFILL", "") not in ("", "0")
    expected = "native" if HAS_NATIVE and not forced else "select"
    assert expected == iopoll_polyfill.IMPLEMENTATION
    if expected == "native":
        for name in SECTION_1:
            assert getattr(iopoll_polyfill, name) is getattr(iopoll, name), name
    with iopoll_polyfill.fallback.Context() as ctx:
        assert ctx.backend.name == "SELECT"
    assert iopoll_polyfill.FD_SETSIZE == iopoll_polyfill.fallback.FD_SETSIZE
