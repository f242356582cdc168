"""The conformance plugin is loaded into every pytest session once iopoll is installed: it
must act on the suite's own classes only, and leak no fixture into other projects."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def _pytest(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(directory)],
        capture_output=True,
        text=True,
        cwd=directory,
        timeout=120,
    )


def test_suite_fixture_names_do_not_leak_into_other_projects(tmp_path: Path) -> None:
    (tmp_path / "test_other.py").write_text(
        textwrap.dedent(
            """
            def test_uses_ctx(ctx):
                pass
            """
        )
    )
    result = _pytest(tmp_path)
    assert result.returncode == 1, result.stdout
    assert "fixture 'ctx' not found" in result.stdout


def test_a_projects_own_backend_fixture_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "test_other.py").write_text(
        textwrap.dedent(
            """
            import pytest

            @pytest.fixture
            def backend():
                return "theirs"

            def test_backend(backend):
                assert backend == "theirs"

            class TestInAClass:
                def test_backend(self, backend):
                    assert backend == "theirs"
            """
        )
    )
    result = _pytest(tmp_path)
    assert result.returncode == 0, result.stdout
    assert "2 passed" in result.stdout
    assert "iopoll conformance summary" not in result.stdout
