"""Counting a benchmark's instructions with valgrind's callgrind (the ``--instructions`` modes).

Wall-clock rates on a shared machine drift; the instructions a piece of work costs in user
space do not (or within a few percent, as the garbage collector's timing moves).  Each
benchmark runs one cell in a child process, ``python -m benchmarks.<module> --child ...``;
two runs of different length, subtracted, cancel out the start-up.

A server is counted in one run instead, over a window of its life: it runs under
``prefix(out)``, ``zero(pid)`` drops what it did until the load starts, and
``dumped(pid, out)`` reads what it did since (``bench_aio``, ``bench_http``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["available", "dumped", "instructions_of", "prefix", "zero"]

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


def prefix(out_file: Path) -> list[str]:
    """The command line before a server's own, to count it with ``zero()`` and ``dumped()``."""
    return ["valgrind", "-q", "--tool=callgrind", f"--callgrind-out-file={out_file}"]


def zero(pid: int) -> None:
    """Forget what the process under ``prefix()`` has run so far."""
    subprocess.run(["callgrind_control", "--zero", str(pid)], check=True, capture_output=True)


def dumped(pid: int, out_file: Path) -> int:
    """The instructions the process ran since ``zero()``.

    ``--dump`` writes them to ``<out_file>.1``; the process's exit writes ``out_file`` itself.
    """
    subprocess.run(["callgrind_control", "--dump", str(pid)], check=True, capture_output=True)
    for line in Path(f"{out_file}.1").read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError("callgrind wrote no instruction count")
