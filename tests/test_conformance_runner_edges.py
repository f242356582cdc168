"""The conformance runner as a backend author meets it: ``python -m iopoll_conformance``'s
options and exit statuses, the plugin's options and backend selection, its summary table,
the suite's makeup, and the process-wide helpers ``alarm`` and ``in_child``.

The command-line and plugin cases run the real command or pytest in a subprocess on a
generated test module, as a third party would; the helpers run in this process (``alarm``
on the main thread's real ``SIGALRM`` and interval timer, ``in_child`` with a real fork).
The subprocess cases are marked slow: what they check is the same on every Python version,
so tox runs them once (its slow env; see tox.ini).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

import iopoll
import iopoll_conformance
from iopoll_conformance import ConformanceSuite
from iopoll_conformance.plugin import GROUPS
from iopoll_conformance.process import alarm, in_child

AVAILABLE = [b.name for b in iopoll.Backend.available_backends()]
# One rule that passes on every backend, to keep the subprocess runs short.
WAIT_RULE = "test_poll_ctx_wait_zero"
ONESHOT_RULE = "test_spec_6_4_oneshot_many_fire_each_once"


def _run(directory: Path, *arguments: str, site: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("PYTEST_ADDOPTS", None)
    if not site:
        # Without site-packages, and with only the suite's package on the path (a link to
        # it, wherever it is installed): pytest and hypothesis cannot be found.
        only = directory / "only_the_suite"
        only.mkdir()
        (only / "iopoll_conformance").symlink_to(Path(iopoll_conformance.__file__).parent)
        env["PYTHONPATH"] = str(only)
    return subprocess.run(
        [sys.executable, *([] if site else ["-S"]), *arguments],
        capture_output=True,
        text=True,
        cwd=directory,
        env=env,
        timeout=300,
    )


def _cli(directory: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    return _run(directory, "-m", "iopoll_conformance", *arguments)


def _pytest(directory: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    return _run(directory, "-m", "pytest", "-p", "no:cacheprovider", *arguments)


def _ids(output: str) -> list[str]:
    """The parameter ids (``[SELECT]``) of the node ids a ``--collect-only -q`` run listed."""
    return [
        line.rsplit("[", 1)[1].rstrip("]")
        for line in output.splitlines()
        if "::" in line and line.endswith("]")
    ]


def _module(directory: Path, body: str) -> Path:
    path = directory / "test_theirs.py"
    path.write_text(textwrap.dedent(body))
    return path


# -- python -m iopoll_conformance -----------------------------------------------------------


@pytest.mark.slow
def test_no_arguments_prints_the_usage_and_exits_2(tmp_path: Path) -> None:
    """A bare ``python -m iopoll_conformance`` is a usage error (2); ``--help`` is not (0)."""
    bare = _cli(tmp_path)
    assert bare.returncode == 2, bare.stdout + bare.stderr
    assert bare.stdout.startswith("usage: python -m iopoll_conformance IMPL")
    helped = _cli(tmp_path, "--help")
    assert helped.returncode == 0, helped.stdout + helped.stderr
    assert helped.stdout == bare.stdout


@pytest.mark.slow
def test_a_bad_command_line_exits_2_with_its_message_on_stderr(tmp_path: Path) -> None:
    """``--backend`` without a name exits 2, saying so (and the usage) on stderr only."""
    result = _cli(tmp_path, "iopoll", "--backend")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith("python -m iopoll_conformance: --backend needs a backend name")
    assert "usage: python -m iopoll_conformance IMPL" in result.stderr


@pytest.mark.slow
def test_missing_dependencies_are_named_with_exit_status_2(tmp_path: Path) -> None:
    """Without pytest and hypothesis (no site-packages), the command names both and exits 2."""
    result = _run(tmp_path, "-m", "iopoll_conformance", "iopoll", site=False)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "needs pytest and hypothesis to run, and they are not installed" in result.stderr
    assert "pip install 'iopoll[conformance]'" in result.stderr


@pytest.mark.slow
def test_a_module_missing_spec_names_is_refused_by_name(tmp_path: Path) -> None:
    """An IMPL that lacks some of the SPEC names exits 2 naming them, before any test runs."""
    (tmp_path / "cli_edge_partial.py").write_text(
        "from iopoll import *  # noqa: F403\n"
        "del InvalidHandleError, HandleAlreadyWatchedError  # noqa: F821\n"
    )
    result = _cli(tmp_path, "cli_edge_partial", "--collect-only")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    assert result.stderr == (
        "python -m iopoll_conformance: cli_edge_partial does not expose the iopoll names: "
        "HandleAlreadyWatchedError, InvalidHandleError missing\n"
    )


@pytest.mark.slow
def test_an_unavailable_backend_is_refused_by_the_command(tmp_path: Path) -> None:
    """``--backend`` naming a member not available here exits 2 with one line saying so,
    before pytest starts."""
    missing = [b.name for b in iopoll.Backend if b.name not in [*AVAILABLE, "AUTO"]]
    result = _cli(tmp_path, "iopoll", "--backend", missing[0].lower())
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    assert result.stderr == (
        f"python -m iopoll_conformance: backend {missing[0]} is not available in iopoll "
        f"here (available: {', '.join(AVAILABLE)})\n"
    )


@pytest.mark.slow
@pytest.mark.parametrize("spelling", [["--backend", "SELECT"], ["--backend=select"]])
def test_the_backend_option_restricts_the_run(tmp_path: Path, spelling: list[str]) -> None:
    """``--backend NAME`` and ``--backend=name`` (any case) run on that backend only, and the
    test ids name it."""
    result = _cli(tmp_path, "iopoll", *spelling, "--collect-only", "-q", "-k", WAIT_RULE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _ids(result.stdout) == ["SELECT"], result.stdout


@pytest.mark.slow
def test_a_command_run_shows_no_warning_of_its_own(tmp_path: Path) -> None:
    """The command imports the suite before pytest starts; pytest's "cannot be rewritten"
    warning about that is not shown to the author."""
    result = _cli(tmp_path, "iopoll", "--backend", "SELECT", "-q", "-k", WAIT_RULE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PytestAssertRewriteWarning" not in result.stdout + result.stderr
    assert "warning" not in result.stdout.splitlines()[-1], result.stdout
    assert "PASS: 1 passed, 0 failed, 0 skipped" in result.stdout.splitlines()


@pytest.mark.slow
def test_every_available_backend_runs_by_default(tmp_path: Path) -> None:
    """Without ``--backend`` the command runs on each available backend, each id its name."""
    result = _cli(tmp_path, "iopoll", "--collect-only", "-q", "-k", WAIT_RULE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _ids(result.stdout) == AVAILABLE, result.stdout


# -- the plugin -----------------------------------------------------------------------------


@pytest.mark.slow
def test_iopoll_impl_names_the_module_for_a_class_without_impl(tmp_path: Path) -> None:
    """``--iopoll-impl`` is the module under test for a suite class that sets no ``impl``."""
    module = _module(
        tmp_path,
        """
        from iopoll_conformance.fixtures import SuiteFixtures
        from iopoll_conformance.groups.wait import WaitRules

        class TestTheirs(SuiteFixtures, WaitRules):
            pass
        """,
    )
    base = ["--collect-only", "-q", "-k", WAIT_RULE, str(module)]
    fallback = _pytest(tmp_path, "--iopoll-impl", "iopoll_polyfill.fallback", *base)
    assert fallback.returncode == 0, fallback.stdout + fallback.stderr
    assert _ids(fallback.stdout) == ["SELECT"], fallback.stdout  # the fallback's only one
    default = _pytest(tmp_path, *base)
    assert default.returncode == 0, default.stdout + default.stderr
    assert _ids(default.stdout) == AVAILABLE, default.stdout


@pytest.mark.slow
def test_an_unimportable_implementation_is_a_usage_error(tmp_path: Path) -> None:
    """A class whose ``impl`` cannot be imported stops the run as a usage error: status 4,
    one line naming the module, no traceback."""
    module = _module(
        tmp_path,
        """
        from iopoll_conformance import ConformanceSuite

        class TestTheirs(ConformanceSuite):
            impl = "no_such_poll_module"
        """,
    )
    result = _pytest(tmp_path, "--collect-only", "-q", str(module))
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert result.stderr.startswith(
        "ERROR: iopoll_conformance: cannot import the implementation module "
        "'no_such_poll_module'"
    ), result.stderr
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.slow
def test_iopoll_backend_takes_any_case_and_overrides_the_class(tmp_path: Path) -> None:
    """``--iopoll-backend poll`` wins over the class's ``backend_name = "SELECT"``."""
    module = _module(
        tmp_path,
        """
        from iopoll_conformance import ConformanceSuite

        class TestTheirs(ConformanceSuite):
            impl = "iopoll"
            backend_name = "SELECT"
        """,
    )
    base = ["--collect-only", "-q", "-k", WAIT_RULE, str(module)]
    assert "POLL" in AVAILABLE
    chosen = _pytest(tmp_path, "--iopoll-backend", "poll", *base)
    assert chosen.returncode == 0, chosen.stdout + chosen.stderr
    assert _ids(chosen.stdout) == ["POLL"], chosen.stdout
    by_class = _pytest(tmp_path, *base)
    assert by_class.returncode == 0, by_class.stdout + by_class.stderr
    assert _ids(by_class.stdout) == ["SELECT"], by_class.stdout


@pytest.mark.slow
def test_an_unavailable_backend_is_a_usage_error(tmp_path: Path) -> None:
    """A ``backend_name`` that is a member but not available here stops the run as a usage
    error (status 4, one line) instead of running the suite on it."""
    missing = [b.name for b in iopoll.Backend if b.name not in [*AVAILABLE, "AUTO"]]
    module = _module(
        tmp_path,
        f"""
        from iopoll_conformance import ConformanceSuite

        class TestTheirs(ConformanceSuite):
            impl = "iopoll"
            backend_name = {missing[0]!r}
        """,
    )
    result = _pytest(tmp_path, "--collect-only", "-q", str(module))
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert result.stderr.startswith(
        f"ERROR: iopoll_conformance: backend {missing[0]} is not available in iopoll here"
    ), result.stderr
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.slow
def test_a_default_run_reports_the_extras_as_deselected(tmp_path: Path) -> None:
    """The strict extras left out of a default run are counted as deselected, not hidden."""
    module = _module(
        tmp_path,
        """
        from iopoll_conformance import ConformanceSuite

        class TestTheirs(ConformanceSuite):
            impl = "iopoll"
            backend_name = "SELECT"
        """,
    )
    result = _pytest(tmp_path, "--collect-only", "-q", str(module))
    assert result.returncode == 0, result.stdout + result.stderr
    assert " deselected)" in result.stdout.splitlines()[-1], result.stdout


@pytest.mark.slow
def test_k_chooses_a_rule_group_by_its_module_name(tmp_path: Path) -> None:
    """``-k timers`` selects every test of ``groups/timers.py``, those whose names (and
    mixin's name, ``TimerRules``) do not contain "timers" too."""
    from iopoll_conformance.groups.timers import TimerRules

    rules = {name for name in vars(TimerRules) if name.startswith("test_")}
    assert any("timers" not in name for name in rules)
    result = _cli(tmp_path, "iopoll", "--backend", "SELECT", "--collect-only", "-q", "-k", "timers")
    assert result.returncode == 0, result.stdout + result.stderr
    collected = {
        line.rsplit("::", 1)[1].split("[", 1)[0]
        for line in result.stdout.splitlines()
        if "::" in line
    }
    assert rules <= collected, sorted(rules - collected)


@pytest.mark.slow
def test_k_matches_no_base_class_names_on_other_projects_tests(tmp_path: Path) -> None:
    """The plugin adds no keywords to tests outside the SPEC suite: ``-k`` with the name of
    the base class a project's own test comes from selects nothing."""
    module = _module(
        tmp_path,
        """
        class CommonChecks:
            def test_something(self):
                pass

        class TestOwn(CommonChecks):
            pass
        """,
    )
    result = _pytest(tmp_path, "--collect-only", "-q", "-k", "CommonChecks", str(module))
    assert result.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, result.stdout + result.stderr
    assert "::test_something" not in result.stdout


SUMMARY_MODULE = """
import pytest

from iopoll_conformance.fixtures import SuiteFixtures
from iopoll_conformance.groups.oneshot import OneShotRules


class TestTheirs(SuiteFixtures, OneShotRules):
    impl = "iopoll"

    @pytest.fixture
    def broken_setup(self):
        raise RuntimeError("their fixture fails")

    def test_own_fails(self, backend):
        assert False

    def test_own_errors(self, backend, broken_setup):
        pass

    def test_own_skips(self, backend):
        pytest.skip("not on this backend")
"""


@pytest.fixture(scope="module")
def summary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[list[str]]]:
    """The conformance summary's lines, split into words, of a run on every available
    backend of one passing one-shot rule and three tests of the author's own: one fails,
    one errors in setup, one skips."""
    directory = tmp_path_factory.mktemp("summary")
    module = _module(directory, SUMMARY_MODULE)
    result = _pytest(directory, "-q", "-k", f"test_own or {ONESHOT_RULE}", str(module))
    assert result.returncode == pytest.ExitCode.TESTS_FAILED, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "iopoll conformance summary" in line)
    yield [line.split() for line in lines[start + 1 : start + 7]]


@pytest.mark.slow
def test_the_summary_has_a_column_per_backend_and_names_groups(
    summary: list[list[str]],
) -> None:
    """One column per backend run, then "all"; the one-shot group is called "one-shot"."""
    n = len(AVAILABLE)
    assert summary[0][:2] == ["implementation:", "iopoll"]
    assert summary[1] == ["group", *AVAILABLE, "all"]
    assert summary[2] == ["one-shot", *["1/0/0"] * n, f"{n}/0/0"]


@pytest.mark.slow
def test_the_summary_counts_setup_errors_as_failed_and_skips_as_skipped(
    summary: list[list[str]],
) -> None:
    """A test erroring in setup counts as failed, a skipped one as skipped."""
    n = len(AVAILABLE)
    assert summary[3] == ["TestTheirs", *["0/2/1"] * n, f"0/{2 * n}/{n}"]


@pytest.mark.slow
def test_the_summary_totals_each_backend_and_names_the_failing_groups(
    summary: list[list[str]],
) -> None:
    """The total row adds up each column; the verdict names the groups that failed."""
    n = len(AVAILABLE)
    assert summary[4] == ["total", *["1/2/1"] * n, f"{n}/{2 * n}/{n}"]
    assert " ".join(summary[5]) == (
        f"FAIL: {n} passed, {2 * n} failed, {n} skipped (failing groups: TestTheirs)"
    )


@pytest.mark.slow
def test_a_context_whose_close_fails_fails_the_rule(tmp_path: Path) -> None:
    """The suite closes the context each rule's ``ctx`` fixture made: a ``close()`` that
    raises is reported (a teardown error, counted as failed), not left to the collector."""
    (tmp_path / "cli_edge_close_fails.py").write_text(
        textwrap.dedent(
            """
            import iopoll
            from iopoll import *  # noqa: F403


            class Context(iopoll.Context):
                def close(self):
                    super().close()
                    raise RuntimeError("close failed")
            """
        )
    )
    result = _cli(tmp_path, "cli_edge_close_fails", "--backend", "SELECT", "-q", "-k", WAIT_RULE)
    assert result.returncode == pytest.ExitCode.TESTS_FAILED, result.stdout + result.stderr
    assert "RuntimeError: close failed" in result.stdout
    assert "FAIL: 0 passed, 1 failed, 0 skipped (failing groups: wait)" in result.stdout


# -- the suite ------------------------------------------------------------------------------


@pytest.mark.slow
def test_every_rule_group_is_in_the_suite_and_the_summary() -> None:
    """Each ``*Rules`` mixin of ``iopoll_conformance.groups`` is a base of
    ``ConformanceSuite``, and each group module has a name in the summary."""
    import iopoll_conformance.groups as groups

    modules = [info.name for info in pkgutil.iter_modules(groups.__path__)]
    assert modules
    for name in modules:
        module = importlib.import_module(f"iopoll_conformance.groups.{name}")
        mixins = [
            value
            for key, value in vars(module).items()
            if key.endswith("Rules")
            and isinstance(value, type)
            and value.__module__ == module.__name__
        ]
        assert mixins, f"groups/{name}.py defines no *Rules mixin"
        for mixin in mixins:
            assert mixin in ConformanceSuite.__mro__, f"{mixin.__name__} is not in the suite"
        assert name in GROUPS, f"groups/{name}.py has no name in the summary"


def test_the_suites_defaults_choose_nothing() -> None:
    """``ConformanceSuite`` names no implementation, no backend, and no strict extras."""
    assert ConformanceSuite.impl is None
    assert ConformanceSuite.backend_name is None
    assert ConformanceSuite.strict_extras is False


# -- alarm and in_child ---------------------------------------------------------------------


@pytest.fixture
def timer_state() -> Iterator[None]:
    """Put the ``SIGALRM`` handler and the real interval timer back after the test (a
    ``pytest-timeout`` of the signal kind uses both)."""
    handler = signal.getsignal(signal.SIGALRM)
    timer = signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, handler)
        if timer[0] > 0:
            signal.setitimer(signal.ITIMER_REAL, *timer)


def _ignore(signum: int, frame: FrameType | None) -> None:
    pass


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer")
def test_alarm_delivers_every_interval(timer_state: None) -> None:
    """With an interval, ``alarm`` delivers ``SIGALRM`` again and again, not once."""
    calls: list[int] = []
    with alarm(lambda signum, frame: calls.append(signum), 0.01, 0.01):
        deadline = time.monotonic() + 5
        while len(calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert calls[:3] == [signal.SIGALRM] * 3


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer")
def test_alarm_stops_its_timer_and_restores_the_handler(timer_state: None) -> None:
    """Leaving ``alarm`` early cancels its timer and puts the previous handler back."""
    signal.signal(signal.SIGALRM, _ignore)
    calls: list[int] = []
    with alarm(lambda signum, frame: calls.append(signum), 0.05, 0.05):
        pass
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is _ignore
    time.sleep(0.2)
    assert calls == []


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer")
def test_alarm_restores_the_previous_timer_shortened(timer_state: None) -> None:
    """A timer running before ``alarm`` (pytest-timeout's) runs on afterwards: less the time
    spent inside, with its own interval."""
    signal.signal(signal.SIGALRM, _ignore)
    signal.setitimer(signal.ITIMER_REAL, 30.0, 7.0)
    with alarm(_ignore, 5.0):
        time.sleep(0.3)
    remaining, interval = signal.getitimer(signal.ITIMER_REAL)
    assert 25.0 < remaining <= 29.75
    assert interval == pytest.approx(7.0)


def test_alarm_off_the_main_thread_skips() -> None:
    """Off the main thread ``alarm`` skips the test (signal handlers are main-thread only)
    rather than failing it."""
    raised: list[BaseException] = []

    def body() -> None:
        try:
            with alarm(_ignore, 10.0):
                pass
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert len(raised) == 1 and isinstance(raised[0], pytest.skip.Exception), raised
    assert "main thread" in str(raised[0])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_in_child_reports_a_system_exit_in_the_child() -> None:
    """A child body that raises ``SystemExit`` comes back as ``child_error``, like any other."""

    def body() -> dict[str, object]:
        sys.exit(3)

    assert in_child(body) == {"child_error": "SystemExit: 3"}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_in_child_returns_a_report_larger_than_a_pipe_read() -> None:
    """A report larger than one pipe read (64 KiB) comes back whole."""
    big = "x" * 300_000
    assert in_child(lambda: {"big": big}) == {"big": big}
