"""Every public name list in the tree against SPEC sections 1 and 10, read from ``docs/SPEC.md``.

The lists are written out where type checkers need them (``iopoll.__all__``,
``iopoll_polyfill.fallback.__all__``, the two ``Backend`` enums) and in the conformance
suite, which cannot take them from an implementation it checks; this file is what keeps
them one list.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import iopoll
import iopoll_polyfill
import pure_iopoll
from _iopoll_core import api
from _iopoll_core.backend import RESOLUTION_ORDER
from _iopoll_core.watcher import Watcher as EngineWatcher
from iopoll_conformance.support import SPEC_NAMES
from iopoll_polyfill import fallback

SPEC = Path(__file__).resolve().parent.parent / "docs" / "SPEC.md"


def _section_1() -> str:
    text = SPEC.read_text(encoding="utf-8")
    start = text.index("## 1. Names")
    return text[start : text.index("\n## 2.", start)]


def _spec_names() -> set[str]:
    """The names section 1's table defines: its first column, and the subclasses that a
    row's second column lists ("subclasses `FailedHandleAddError`, ...")."""
    names: set[str] = set()
    for row in _section_1().splitlines():
        if not row.startswith("| `"):
            continue
        _, first, second, _ = row.split("|")
        names.update(re.findall(r"`(\w+)", first))
        if "subclasses" in second:
            names.update(re.findall(r"`(\w+)`", second.split("subclasses", 1)[1]))
    return names


def _section_10_names() -> set[str]:
    """The handles section 10 adds to section 1's list ("New names in section 1's list:")."""
    text = SPEC.read_text(encoding="utf-8")
    start = text.index("## 10.")
    sentence = text[start:].split("New names in section 1's list:", 1)[1].split(".", 1)[0]
    return set(re.findall(r"`(\w+)`", sentence))


def _every_spec_name() -> set[str]:
    return _spec_names() | _section_10_names()


def _spec_members(enum_name: str) -> list[str]:
    row = next(r for r in _section_1().splitlines() if r.startswith(f"| `{enum_name}` |"))
    listed = row.split("|")[2].split(":", 1)[1]
    return re.findall(r"\b([A-Z][A-Z_]+)\b", listed.split("(this order)")[0])


def test_the_spec_table_is_read() -> None:
    names = _spec_names()
    assert len(names) == 17
    assert {"Context", "Watcher", "PollError", "FailedPollWaitError"} <= names
    assert _section_10_names() == {
        "WeakHandle",
        "StreamPollWeakHandle",
        "TimerHandle",
        "NotifyHandle",
        "SignalHandle",
        "ProcessHandle",
    }


@pytest.mark.parametrize(
    ("module", "extra"),
    [
        pytest.param(iopoll, set(), id="iopoll"),
        pytest.param(fallback, {"FD_SETSIZE"}, id="fallback"),
        pytest.param(iopoll_polyfill, {"FD_SETSIZE", "IMPLEMENTATION", "fallback"}, id="polyfill"),
        pytest.param(pure_iopoll, set(), id="pure_iopoll"),
    ],
)
def test_every_all_is_the_spec_list(module: object, extra: set[str]) -> None:
    exported = list(module.__all__)  # type: ignore[attr-defined]
    assert len(exported) == len(set(exported)), "a name is listed twice"
    assert set(exported) == _every_spec_name() | extra
    for name in exported:
        assert hasattr(module, name), name


def test_the_suite_and_the_engine_list_the_spec_names() -> None:
    # The suite requires section 1's names; section 10's are optional (their groups skip).
    assert set(SPEC_NAMES) == _spec_names()
    # (isidentifier: pytest may have rewritten the module, adding "@py_builtins" and the like)
    shared = {n for n in vars(api) if n.isidentifier() and not n.startswith("_")}
    assert shared | {"Backend", "Context", "Watcher"} == _every_spec_name()


@pytest.mark.parametrize(
    "backend_type", [iopoll.Backend, fallback.Backend], ids=["iopoll", "fallback"]
)
def test_backend_members_are_the_spec_members_in_order(backend_type: type) -> None:
    members = [member.name for member in backend_type]  # type: ignore[attr-defined]
    assert members == _spec_members("Backend")
    assert sorted(RESOLUTION_ORDER) == sorted(set(members) - {"AUTO"})


def test_event_and_error_code_members_are_the_spec_members() -> None:
    assert [member.name for member in iopoll.Event] == _spec_members("Event")
    assert [member.name for member in iopoll.ErrorCode] == _spec_members("ErrorCode")


def test_pure_iopoll_runs_the_engine_watcher_without_the_c_getter() -> None:
    """The pure run must not pick up ``iopoll.Watcher`` (and its C ``data``) by star import."""
    assert pure_iopoll.Watcher is EngineWatcher
    a, b = __import__("socket").socketpair()
    try:
        with pure_iopoll.Context() as ctx:
            assert type(ctx.add(a, iopoll.Event.READ)) is EngineWatcher
    finally:
        a.close()
        b.close()
