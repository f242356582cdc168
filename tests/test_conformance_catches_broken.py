"""Proof that the conformance suite can fail: it must reject each deliberately broken
implementation in ``tests/broken`` and accept the unbroken wrapper built the same way.

Each case runs the real command line, ``python -m iopoll_conformance broken.NAME --backend B
-x -k GROUP``, in a subprocess on the best native backend here: the rule group that states
the broken rule, stopping at the first failure (the unbroken wrapper runs the whole suite).
``CI=1`` makes the differential test's search deterministic, so these results do not depend
on luck; ``broken/no_shrink.py`` skips the shrinking of what it finds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import iopoll

TESTS = Path(__file__).resolve().parent
BACKEND = iopoll.Backend.AUTO.resolve().name

# Each broken module: the rule it breaks (see its docstring), and the rule group that states
# that rule.  Each is run against its group alone (``-k <Group>Rules``), which keeps this
# file's run short; the unbroken wrapper runs the whole suite.
BROKEN = {
    "ignores_max_events": ("wait() returns more than max_events watchers", "WaitRules"),
    "no_hangup": ("HANGUP is never reported", "EventRules"),
    "returns_closed": ("wait() returns watchers of closed streams", "ClosedStreamRules"),
    "duplicate_add": ("adding a watched fd replaces its watcher", "AddRules"),
    "negative_timeout": ("a negative timeout is taken as 0", "ErrorRules"),
    "oneshot_repeats": ("a one-shot watcher keeps firing", "OneShotRules"),
    "level_as_edge": ("a level-triggered watcher is reported once", "EventRules"),
    "empty_events": ("add() with empty events watches READ", "ErrorRules"),
    # Only the random walk compares len() with the select reference after closes.
    "len_counts_closed": ("len(ctx) counts watchers of closed streams", "DifferentialRules"),
    "consumes_socket_error": (
        "wait() reads (and so clears) the socket error it reports",
        "EventRules",
    ),
    "periodic_timer_bursts": (
        "a periodic timer far behind is reported once per missed period",
        "TimerRules",
    ),
    "notify_clears_itself": ("wait() clears a notify handle it reports", "NotifyRules"),
    "process_reported_twice": ("a process watcher is reported on two waits", "ProcessRules"),
}

pytestmark = pytest.mark.slow


def run_suite(module: str, *pytest_args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, CI="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [
            *(sys.executable, "-m", "iopoll_conformance", module, "--backend", BACKEND),
            *("-p", "broken.no_shrink", *pytest_args),  # the verdict, without shrinking
        ],
        cwd=TESTS,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def verdict(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith(("PASS:", "FAIL:"))]
    assert len(lines) == 1, f"no conformance summary in the output:\n{output}"
    return lines[0]


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_suite_fails_on_broken_implementation(name: str) -> None:
    rule, group = BROKEN[name]
    result = run_suite(f"broken.{name}", "-x", "-q", "-k", group)
    output = result.stdout + result.stderr
    # 1 is pytest's "tests failed": not a usage error, a crash or an empty collection.
    assert result.returncode == 1, f"{name} ({rule}) was not caught by {group}:\n{output}"
    assert verdict(output).startswith("FAIL: "), output
    assert "FAILED " in output, output


def test_suite_passes_on_unbroken_wrapper() -> None:
    result = run_suite("broken.unbroken", "-q")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    summary = verdict(output)
    assert summary.startswith("PASS: ") and " 0 failed" in summary, output
