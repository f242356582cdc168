"""SPEC 8: the default conformance run checks only what SPEC states.

The strict extras (``iopoll_conformance.groups.extras``) are neither collected nor run unless
``--strict-extras`` is given or the suite class sets ``strict_extras = True``; a case whose
rule SPEC states for some backends only is skipped on the others unless asked for.  Each
check runs pytest (or ``python -m iopoll_conformance``) in a subprocess on a generated test
module, as a third party would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from iopoll_conformance.groups.extras import StrictExtraRules

# Each case runs the suite's command line in a subprocess: what they check is the plugin's,
# the same on every Python version, so tox runs them once (its slow env; see tox.ini).
pytestmark = pytest.mark.slow

EXTRAS = sorted(name for name in vars(StrictExtraRules) if name.startswith("test_"))

# A case that SPEC states except on select semantics (SPEC 7 lets select consume the error).
SELECT_EXTRA = "test_spec_6_2_waiting_leaves_the_socket_error_to_the_application"


def _suite_module(directory: Path, strict_extras: bool | None = None) -> Path:
    attribute = "" if strict_extras is None else f"    strict_extras = {strict_extras}\n"
    path = directory / "test_theirs.py"
    path.write_text(
        textwrap.dedent(
            """
            from iopoll_conformance import ConformanceSuite


            class TestTheirs(ConformanceSuite):
                impl = "iopoll"
                backend_name = "SELECT"
            """
        )
        + attribute
    )
    return path


def _run(directory: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [sys.executable, *arguments],
        capture_output=True,
        text=True,
        cwd=directory,
        env=env,
        timeout=300,
    )


def _collected(output: str) -> set[str]:
    """The test function names a ``--collect-only -q`` run listed."""
    names = set()
    for line in output.splitlines():
        if "::" in line:
            names.add(line.rsplit("::", 1)[1].split("[", 1)[0])
    return names


def _collect(directory: Path, *arguments: str) -> set[str]:
    module = str(directory / "test_theirs.py")
    result = _run(
        directory,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "--collect-only",
        "-q",
        module,
        *arguments,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return _collected(result.stdout)


def test_the_extras_group_is_not_empty() -> None:
    assert len(EXTRAS) >= 10, EXTRAS
    assert "test_poll_double_construct" in EXTRAS


def test_default_run_does_not_collect_the_extras(tmp_path: Path) -> None:
    _suite_module(tmp_path)
    collected = _collect(tmp_path)
    assert "test_poll_ctx_wait_zero" in collected  # the rule groups are there
    assert not collected & set(EXTRAS)


@pytest.mark.parametrize("how", ["option", "class attribute"])
def test_strict_extras_collects_them(tmp_path: Path, how: str) -> None:
    _suite_module(tmp_path, strict_extras=True if how == "class attribute" else None)
    collected = _collect(tmp_path, *(["--strict-extras"] if how == "option" else []))
    assert set(EXTRAS) <= collected
    assert "test_poll_ctx_wait_zero" in collected


def test_the_command_line_passes_strict_extras_on(tmp_path: Path) -> None:
    def collect(*extra: str) -> set[str]:
        result = _run(
            tmp_path,
            "-m",
            "iopoll_conformance",
            "iopoll",
            "--backend",
            "SELECT",
            "--collect-only",
            "-q",
            *extra,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return _collected(result.stdout)

    assert not collect() & set(EXTRAS)
    assert set(EXTRAS) <= collect("--strict-extras")


def test_a_rule_stated_for_other_backends_only_is_skipped_by_default(tmp_path: Path) -> None:
    module = str(_suite_module(tmp_path))
    base = ["-m", "pytest", "-p", "no:cacheprovider", "-rs", module, "-k", SELECT_EXTRA]
    default = _run(tmp_path, *base)
    assert default.returncode == 0, default.stdout + default.stderr
    assert "1 skipped" in default.stdout and "--strict-extras" in default.stdout, default.stdout
    strict = _run(tmp_path, *base, "--strict-extras")
    assert strict.returncode == 0, strict.stdout + strict.stderr
    assert "1 passed" in strict.stdout, strict.stdout
