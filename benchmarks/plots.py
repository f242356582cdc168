"""Run every benchmark with ``--plot`` and keep its table beside its picture.

    python -m benchmarks.plots [DIR] [--quick] [--only roundtrip memory churn ...]

DIR defaults to ``docs/img``, where the README's pictures live.  Each benchmark runs in a
process of its own, one after the other (never side by side: they time things), with its
default workload, or its ``--quick`` one; its table goes to ``DIR/<benchmark>.txt`` and its
PNGs (``DIR/<benchmark>*.png``) come from its own ``--plot``.  So the figures a page quotes
and the picture it shows come from the same run.  The whole default run takes about 8
minutes here; bench_http needs wrk.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# benchmark -> (its default arguments, its --quick ones)
BENCHMARKS: dict[str, tuple[list[str], list[str]]] = {
    "roundtrip": (["--quiet"], ["--quick", "--quiet"]),
    "memory": ([], ["--watchers", "2000"]),
    "churn": ([], ["--ops", "2000", "--repeats", "3"]),
    "bench_loop": ([], ["--quick"]),
    "bench_aio": ([], ["--quick"]),
    "bench_http": (["--quiet"], ["--quiet", "--duration", "1", "--rounds", "1"]),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument("--quick", action="store_true", help="each benchmark's short run")
    parser.add_argument("--only", nargs="+", choices=list(BENCHMARKS), metavar="NAME",
                        help="only these: " + ", ".join(BENCHMARKS))
    args = parser.parse_args(argv)
    args.directory.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    failed = []
    for name in args.only or BENCHMARKS:
        extra = BENCHMARKS[name][1 if args.quick else 0]
        started = time.monotonic()
        print(f"{name}: running", file=sys.stderr, flush=True)
        done = subprocess.run(
            [sys.executable, "-m", f"benchmarks.{name}", *extra, "--plot", str(args.directory)],
            cwd=ROOT, env=env, capture_output=True, text=True, check=False,
        )
        table = [line for line in done.stdout.splitlines() if not line.startswith("plot: ")]
        (args.directory / f"{name}.txt").write_text("\n".join(table) + "\n")
        took = time.monotonic() - started
        if done.returncode:
            failed.append(name)
            print(f"{name}: failed after {took:.0f} s\n{done.stderr[-2000:]}", file=sys.stderr)
        else:
            print(f"{name}: {took:.0f} s", file=sys.stderr, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
