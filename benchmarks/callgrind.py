"""Counting a benchmark's instructions with valgrind's callgrind (the ``--instructions`` modes).

Wall-clock rates on a shared machine drift; the instructions a piece of work costs in user
space do not (or within a few percent, as the garbage collector's timing moves).  Each
benchmark runs one cell in a child process, ``python -m benchmarks.<module> --child ...``;
two runs of different length, subtracted, cancel out the start-up.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

__all__ = ["available", "instructions_of"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def available() -> bool:
    """Whether valgrind is on PATH (Debian: apt install valgrind)."""
    return shutil.which("valgrind") is not None


def instructions_of(module: str, *child_args: str, timeout: float = 900) -> int:
    """The instructions ``python -m benchmarks.<module> --child *child_args`` runs."""
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
         "-m", f"benchmarks.{module}", "--child", *child_args],
        capture_output=True, text=True, timeout=timeout, check=False, cwd=ROOT,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode or found is None:
        cell = " / ".join(child_args)
        raise RuntimeError(f"callgrind failed for {cell}: {done.stderr[-500:]}")
    return int(found.group(1))
