"""The pytest plugin: options, fixtures and the per-group summary.

Registered as the ``pytest11`` entry point ``iopoll_conformance``, so an installed project
loads it by itself.  Where plugin autoload is off, enable it with ``-p iopoll_conformance``
(the entry point's name: this never registers it twice); from a source tree that was not
installed, use ``-p iopoll_conformance.plugin``.

The fixtures, the ``backend`` parametrization and the summary apply only to test classes
built on the SPEC suite (``ConformanceSuite``, ``SuiteFixtures`` or one of its rule group
mixins; see ``is_suite_class``), so the plugin never touches other projects' tests that
happen to use a fixture called ``backend``, nor the driver contract suite
(``iopoll_conformance.loop``).

The strict extras group (``iopoll_conformance.groups.extras``: behaviour SPEC does not state)
is collected only with ``--strict-extras`` or for a suite class with ``strict_extras = True``
(SPEC 8: the default run fails an implementation only for rules SPEC states).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pytest

# Rule group modules (iopoll_conformance.groups.<module>) and how the summary names them,
# in the order the summary lists them.
GROUPS: dict[str, str] = {
    "backends": "backends",
    "handles": "handles",
    "add": "add",
    "wait": "wait",
    "lifecycle": "lifecycle",
    "errors": "errors",
    "boundaries": "boundaries",
    "events": "events",
    "oneshot": "one-shot",
    "edge": "edge",
    "buffered": "buffered",
    "files": "files",
    "closed": "closed streams",
    "differential": "differential",
    "timers": "timers",
    "notify": "notify",
    "signals": "signals",
    "processes": "processes",
    "weak": "weak handles",
    "removed": "removal callbacks",
    "extras": "strict extras",
}

_GROUPS_PACKAGE = "iopoll_conformance.groups."
_EXTRAS_MODULE = _GROUPS_PACKAGE + "extras"
# The modules of the SPEC suite's classes besides the rule groups: its fixture base
# (``SuiteFixtures``) and ``ConformanceSuite``.
_SPEC_SUITE_MODULES = frozenset({"iopoll_conformance.fixtures", "iopoll_conformance.suite"})
# The summary's column for tests that take no backend (handles, enum members, ...).
NO_BACKEND = "(no backend)"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("iopoll_conformance", "iopoll conformance suite")
    group.addoption(
        "--iopoll-impl",
        default=None,
        help="module implementing the iopoll API to test, for suite classes that set no "
        "'impl' (default: iopoll)",
    )
    group.addoption(
        "--iopoll-backend",
        default=None,
        help="test only this backend (a Backend member name); default: every available one",
    )
    group.addoption(
        "--strict-extras",
        action="store_true",
        default=False,
        help="also check behaviour SPEC does not state (PHP details, this project's own "
        "choices): the 'strict extras' group, and cases SPEC states for other backends only; "
        "off by default, as such behaviour never fails an implementation (SPEC 8)",
    )


def is_suite_class(cls: type | None) -> bool:
    """Whether ``cls`` is built on the SPEC suite (so the plugin serves it).

    That is: ``ConformanceSuite``, its fixture base ``SuiteFixtures``, or a rule group mixin
    of ``iopoll_conformance.groups``, in its MRO.  Other classes of the package, such as the
    driver contract ``iopoll_conformance.loop.DriverConformance`` (which has its own
    ``loop`` fixture and no backend), are not served: no ``backend`` parametrization, no
    strict extras deselection or group keywords, no summary table.  Matched by module name,
    so the plugin imports none of them.
    """
    if cls is None:
        return False
    return any(_is_spec_suite_module(base.__module__) for base in cls.__mro__)


def _is_spec_suite_module(module: str) -> bool:
    return module.startswith(_GROUPS_PACKAGE) or module in _SPEC_SUITE_MODULES


def implementation_name(config: pytest.Config, cls: type | None) -> str:
    """The module under test: the class's ``impl``, else ``--iopoll-impl``, else iopoll."""
    name = getattr(cls, "impl", None) or config.getoption("--iopoll-impl") or "iopoll"
    return str(name)


def strict_extras_enabled(config: pytest.Config, cls: type | None) -> bool:
    """Whether the strict extras run: the class's ``strict_extras``, or ``--strict-extras``."""
    return bool(getattr(cls, "strict_extras", False) or config.getoption("--strict-extras"))


def _import_implementation(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise pytest.UsageError(
            f"iopoll_conformance: cannot import the implementation module {name!r}: {exc}"
        ) from exc


def selected_backends(api: ModuleType, chosen: str | None) -> list[Any]:
    """The backends to run: ``chosen`` (a member name, any case) or every available one.

    Raises ``pytest.UsageError`` for a name that is not a member or not available.
    """
    available = list(api.Backend.available_backends())
    if not chosen:
        return available
    names = ", ".join(b.name for b in available)
    try:
        member = api.Backend[chosen.upper()]
    except KeyError:
        raise pytest.UsageError(
            f"iopoll_conformance: {chosen!r} is not a Backend member of {api.__name__} "
            f"(available here: {names})"
        ) from None
    if member not in available:
        raise pytest.UsageError(
            f"iopoll_conformance: backend {member.name} is not available in {api.__name__} "
            f"here (available: {names})"
        )
    return [member]


# A usage error met while the suite's tests were parametrized (pytest_generate_tests).
_USAGE_ERROR = pytest.StashKey[pytest.UsageError]()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames or not is_suite_class(metafunc.cls):
        return
    try:
        api = _import_implementation(implementation_name(metafunc.config, metafunc.cls))
        chosen = metafunc.config.getoption("--iopoll-backend") or getattr(
            metafunc.cls, "backend_name", None
        )
        backends = selected_backends(api, chosen)
    except pytest.UsageError as exc:
        # Raised here, inside a collector, pytest would report it as a collection error with
        # a traceback through pluggy: kept, it is raised once collection is over
        # (pytest_collection_modifyitems), where pytest says it in one line, status 4.
        metafunc.config.stash.setdefault(_USAGE_ERROR, exc)
        backends = []
    metafunc.parametrize("backend", backends, ids=[b.name for b in backends], scope="class")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the strict extras unless they are asked for, and let ``-k`` choose rule
    groups: by module (``-k oneshot``) or mixin (``-k OneShotRules``)."""
    error = config.stash.get(_USAGE_ERROR, None)
    if error is not None:
        raise error
    kept: list[pytest.Item] = []
    extras: list[pytest.Item] = []
    for item in items:
        cls = getattr(item, "cls", None)
        if cls is None or not is_suite_class(cls):
            kept.append(item)
            continue
        name = getattr(item, "originalname", None) or item.name
        defining = defining_class(cls, name)
        if defining.__module__ == _EXTRAS_MODULE and not strict_extras_enabled(config, cls):
            extras.append(item)
            continue
        kept.append(item)
        item.extra_keyword_matches.add(defining.__name__)
        if defining.__module__.startswith(_GROUPS_PACKAGE):
            item.extra_keyword_matches.add(defining.__module__[len(_GROUPS_PACKAGE) :])
    if extras:
        config.hook.pytest_deselected(items=extras)
        items[:] = kept


# -- the summary by rule group --------------------------------------------------------------


def group_of(cls: type, function_name: str) -> str:
    """The summary's name for the rule group that defines ``cls.<function_name>``.

    That is the class in ``cls``'s MRO whose body defines the test: a suite mixin maps to
    its group's name; a test a third party added in its own subclass is listed under that
    class's name.
    """
    base = defining_class(cls, function_name)
    module = base.__module__
    if module.startswith(_GROUPS_PACKAGE):
        short = module[len(_GROUPS_PACKAGE) :]
        return GROUPS.get(short, short)
    return base.__qualname__


def defining_class(cls: type, function_name: str) -> type:
    """The class in ``cls``'s MRO whose body defines ``function_name`` (else ``cls``)."""
    for base in cls.__mro__:
        if function_name in vars(base):
            return base
    return cls


@dataclass
class _Counts:
    passed: int = 0
    failed: int = 0
    skipped: int = 0

    def add(self, outcome: str) -> None:
        setattr(self, outcome, getattr(self, outcome) + 1)

    def merge(self, other: _Counts) -> None:
        self.passed += other.passed
        self.failed += other.failed
        self.skipped += other.skipped

    def cell(self) -> str:
        return f"{self.passed}/{self.failed}/{self.skipped}"


@dataclass
class _Where:
    impl: str
    group: str
    backend: str


@dataclass(eq=False)  # registered as a pytest plugin: pytest 9.0 keeps plugins in a set
class ConformanceSummary:
    """Collects each suite test's outcome and prints a table per implementation.

    Rows are rule groups, columns backends; each cell reads ``passed/failed/skipped``.
    """

    where: dict[str, _Where] = field(default_factory=dict)
    outcomes: dict[str, str] = field(default_factory=dict)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            cls = getattr(item, "cls", None)
            if cls is None or not is_suite_class(cls):
                continue
            name = getattr(item, "originalname", None) or item.name
            callspec = getattr(item, "callspec", None)
            backend = callspec.params.get("backend") if callspec is not None else None
            self.where[item.nodeid] = _Where(
                impl=implementation_name(session.config, cls),
                group=group_of(cls, name),
                backend=getattr(backend, "name", NO_BACKEND),
            )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.nodeid not in self.where:
            return
        previous = self.outcomes.get(report.nodeid)
        if report.failed:
            self.outcomes[report.nodeid] = "failed"
        elif previous == "failed":
            return
        elif report.skipped:  # a skip, or an expected failure
            self.outcomes[report.nodeid] = "skipped"
        elif report.when == "call":
            self.outcomes[report.nodeid] = "passed"

    def tables(self) -> list[str]:
        """The summary's lines (empty when no suite test ran)."""
        per_impl: dict[str, dict[str, dict[str, _Counts]]] = {}
        backends: dict[str, list[str]] = {}
        for nodeid, outcome in self.outcomes.items():
            where = self.where[nodeid]
            groups = per_impl.setdefault(where.impl, {})
            groups.setdefault(where.group, {}).setdefault(where.backend, _Counts()).add(outcome)
            seen = backends.setdefault(where.impl, [])
            if where.backend not in seen:
                seen.append(where.backend)
                seen.sort(key=lambda name: name == NO_BACKEND)
        lines: list[str] = []
        for impl, groups in per_impl.items():
            columns = backends[impl]
            order = [g for g in GROUPS.values() if g in groups]
            order += sorted(g for g in groups if g not in order)
            width = max(len(g) for g in [*order, "group", "total"]) + 2
            cell = max(10, *(len(b) + 2 for b in columns))

            def row(label: str, cells: list[str], width: int = width, cell: int = cell) -> str:
                return label.ljust(width) + "".join(c.ljust(cell) for c in cells).rstrip()

            lines.append(f"implementation: {impl}   (each cell: passed/failed/skipped)")
            lines.append(row("group", [*columns, "all"]))
            totals = {b: _Counts() for b in columns}
            grand = _Counts()
            failing: list[str] = []
            for group in order:
                cells = []
                whole = _Counts()
                for backend in columns:
                    counts = groups[group].get(backend, _Counts())
                    totals[backend].merge(counts)
                    whole.merge(counts)
                    cells.append(counts.cell())
                grand.merge(whole)
                if whole.failed:
                    failing.append(group)
                lines.append(row(group, [*cells, whole.cell()]))
            lines.append(row("total", [*(totals[b].cell() for b in columns), grand.cell()]))
            verdict = "FAIL" if grand.failed else "PASS"
            detail = f" (failing groups: {', '.join(failing)})" if failing else ""
            lines.append(
                f"{verdict}: {grand.passed} passed, {grand.failed} failed, "
                f"{grand.skipped} skipped{detail}"
            )
            lines.append("")
        return lines[:-1]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        lines = self.tables()
        if not lines:
            return
        terminalreporter.write_sep("=", "iopoll conformance summary")
        for line in lines:
            terminalreporter.write_line(line)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(ConformanceSummary(), "iopoll_conformance_summary")
