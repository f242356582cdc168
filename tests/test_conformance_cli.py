"""``python -m iopoll_conformance``: an implementation that cannot be tested at all gets a
message saying why (and exit status 2), never a traceback out of the runner itself."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from iopoll_conformance.__main__ import check_implementation, main


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on ``sys.path`` for throwaway implementation modules."""
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [name for name in sys.modules if name.startswith("cli_impl_")]:
        del sys.modules[name]


def write(directory: Path, name: str, body: str) -> str:
    (directory / f"{name}.py").write_text(textwrap.dedent(body))
    return name


def test_a_file_path_is_told_to_be_a_module_name() -> None:
    problem = check_implementation("./mypoll.py", None)
    assert problem is not None and "not a file" in problem and "mypoll" in problem


def test_an_import_that_exits_is_a_failed_import(modules: Path) -> None:
    name = write(modules, "cli_impl_exits", "import sys\nsys.exit(3)\n")
    problem = check_implementation(name, None)
    assert problem is not None
    assert problem.startswith(f"cannot import the implementation module {name!r}")
    assert "SystemExit: 3" in problem


def test_available_backends_raising_is_reported(modules: Path) -> None:
    name = write(
        modules,
        "cli_impl_unavailable",
        """
        from iopoll import *  # noqa: F403
        import iopoll

        class Backend:
            AUTO = iopoll.Backend.AUTO

            @staticmethod
            def available_backends():
                raise OSError("no backend today")
        """,
    )
    problem = check_implementation(name, None)
    assert problem is not None and "available_backends() raised" in problem
    assert "no backend today" in problem


def test_auto_is_not_a_backend_to_run_on() -> None:
    problem = check_implementation("iopoll", "AUTO")
    assert problem is not None and "not AUTO" in problem


def test_a_usable_implementation_has_no_problem() -> None:
    assert check_implementation("iopoll", None) is None
    assert check_implementation("iopoll", "select") is None


def test_the_command_exits_2_with_the_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["./mypoll.py"]) == 2
    assert "not a file" in capsys.readouterr().err
