"""The conformance plugin is loaded into every pytest session once iopoll is installed: it
must act on the SPEC suite's own classes only (not on the driver contract suite, though that
ships in the same package), and leak no fixture into other projects."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from iopoll_conformance import ConformanceSuite
from iopoll_conformance.fixtures import SuiteFixtures
from iopoll_conformance.groups.add import AddRules
from iopoll_conformance.loop import DriverConformance
from iopoll_conformance.plugin import ConformanceSummary, is_suite_class

# Each case runs pytest in a subprocess: what they check is the plugin's, the same on every
# Python version, so tox runs them once (its slow env; see tox.ini).
pytestmark = pytest.mark.slow

SUMMARY = "iopoll conformance summary"


def _pytest(directory: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            *arguments,
            str(directory),
        ],
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
    assert SUMMARY not in result.stdout


def test_only_classes_built_on_the_spec_suite_are_served() -> None:
    class OneGroup(SuiteFixtures, AddRules):
        pass

    class TheirDriver(DriverConformance):
        pass

    assert is_suite_class(ConformanceSuite)
    assert is_suite_class(SuiteFixtures)
    assert is_suite_class(OneGroup)
    assert not is_suite_class(DriverConformance)
    assert not is_suite_class(TheirDriver)
    assert not is_suite_class(None)


def test_a_driver_conformance_run_prints_no_spec_summary(tmp_path: Path) -> None:
    (tmp_path / "test_driver.py").write_text(
        textwrap.dedent(
            """
            from iopoll.loop import Driver, SelectorsDriver
            from iopoll_conformance.loop import DriverConformance

            class TestTheirDriver(DriverConformance):
                def make(self) -> Driver:
                    return SelectorsDriver()
            """
        )
    )
    result = _pytest(tmp_path, "-k", "test_get_identifiers or test_debug_info")
    assert result.returncode == 0, result.stdout
    assert "4 passed" in result.stdout
    assert SUMMARY not in result.stdout
    assert "DriverConformance" not in result.stdout


def test_a_spec_suite_run_still_prints_its_summary(tmp_path: Path) -> None:
    (tmp_path / "test_theirs.py").write_text(
        textwrap.dedent(
            """
            from iopoll_conformance import ConformanceSuite

            class TestTheirs(ConformanceSuite):
                impl = "iopoll"
                backend_name = "SELECT"
            """
        )
    )
    result = _pytest(tmp_path, "-k", "test_poll_stream_sock_add_only")
    assert result.returncode == 0, result.stdout
    assert "1 passed" in result.stdout
    assert SUMMARY in result.stdout
    assert "implementation: iopoll" in result.stdout
    assert any(line.split()[:2] == ["add", "1/0/0"] for line in result.stdout.splitlines())


def test_the_summary_plugin_is_hashable_as_pytest_9_needs() -> None:
    # pytest 9.0 keeps registered plugins in a set; a plain @dataclass has no __hash__, and
    # registering it failed every run with "unhashable type: 'ConformanceSummary'".
    summary = ConformanceSummary()
    assert {summary} == {summary}
    assert ConformanceSummary() != summary  # identity, as for any other plugin object
