"""``docs/rules.md`` is the index of the php-src rule numbers that test docstrings cite.

Tests name the PHP behaviour they port by its number in the research notes behind SPEC
("B." and the number).  The index gives each number a line: the rule in this project's
words, the php-src test file that shows it, and the tests that cite it.  Here: every number
cited anywhere under ``conformance/`` and ``tests/`` is in the index, each rule is listed
once and in order, and the "cited by" column is what the code says.

The "cited by" column is generated: after adding or moving a citation, run
``python tests/test_conformance_rules.py`` to rewrite it.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INDEX = ROOT / "docs" / "rules.md"
SCANNED = (ROOT / "conformance", ROOT / "tests")
GROUPS = ROOT / "conformance" / "iopoll_conformance" / "groups"
RULES = range(1, 96)  # the notes number their behaviour rules 1 to 95

# A citation in code: the letter of the notes' section, a dot, the rule's number.
CITATION = re.compile(r"\bB\.(\d+)\b")
# A row of the index: | B.<n> | rule | php-src test | cited by |
ROW = re.compile(r"^\| B\.(?P<number>\d+) \| (?P<rule>.+?) \| (?P<phpt>.+?) \| (?P<cited>.*?) \|$")


def _label(path: Path, qualified: list[str]) -> str:
    """How the index names a test: ``Group.test`` in the suite, ``file::test`` elsewhere."""
    if path.parent == GROUPS:
        return ".".join(qualified)
    return "::".join([path.name, *qualified])


def _tests_by_line(path: Path, tree: ast.Module) -> list[tuple[int, int, str]]:
    """(first line, last line, label) of every test function in ``tree``."""
    found: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, outer: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, [*outer, child.name])
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) and (
                child.name.startswith("test")
            ):
                end = child.end_lineno or child.lineno
                found.append((child.lineno, end, _label(path, [*outer, child.name])))

    visit(tree, [])
    return found


def citations() -> tuple[set[int], dict[int, list[str]]]:
    """Every rule number cited under ``SCANNED``, and the tests citing each one.

    A citation outside any test function (a class docstring, a comment) counts as cited
    but names no test.
    """
    cited: set[int] = set()
    by_test: dict[int, set[str]] = defaultdict(set)
    for directory in SCANNED:
        for path in sorted(directory.rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            if not CITATION.search(source):
                continue
            tests = _tests_by_line(path, ast.parse(source))
            for number, line in enumerate(source.splitlines(), start=1):
                for match in CITATION.finditer(line):
                    rule = int(match[1])
                    cited.add(rule)
                    for first, last, label in tests:
                        if first <= number <= last:
                            by_test[rule].add(label)
    return cited, {rule: sorted(labels) for rule, labels in by_test.items()}


def cited_by_cell(labels: list[str]) -> str:
    """The index's "cited by" cell for ``labels``."""
    return ", ".join(f"`{label}`" for label in labels) if labels else "none"


def index_rows() -> dict[int, re.Match[str]]:
    """The index's rows by rule number (the last one wins if a number repeats)."""
    rows = {}
    for line in INDEX.read_text(encoding="utf-8").splitlines():
        row = ROW.match(line)
        if row is not None:
            rows[int(row["number"])] = row
    return rows


def regenerate() -> str:
    """The index with its "cited by" column made from the code."""
    _, by_test = citations()
    lines = []
    for line in INDEX.read_text(encoding="utf-8").splitlines():
        row = ROW.match(line)
        if row is not None:
            cell = cited_by_cell(by_test.get(int(row["number"]), []))
            line = f"| B.{row['number']} | {row['rule']} | {row['phpt']} | {cell} |"
        lines.append(line)
    return "\n".join(lines) + "\n"


def test_every_cited_rule_is_in_the_index() -> None:
    cited, _ = citations()
    missing = sorted(cited - set(index_rows()))
    assert not missing, f"cited but not in docs/rules.md: {', '.join(f'B.{n}' for n in missing)}"


def test_the_index_lists_each_rule_once_in_order() -> None:
    text = INDEX.read_text(encoding="utf-8").splitlines()
    numbers = [int(row["number"]) for line in text if (row := ROW.match(line)) is not None]
    assert numbers == list(RULES)


def test_the_cited_by_column_is_what_the_code_says() -> None:
    assert INDEX.read_text(encoding="utf-8") == regenerate(), (
        "docs/rules.md is out of date: run  python tests/test_conformance_rules.py"
    )


if __name__ == "__main__":
    INDEX.write_text(regenerate(), encoding="utf-8")
    sys.exit(0)
