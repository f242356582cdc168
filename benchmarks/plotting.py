"""PNG pictures of the benchmarks' tables, for ``--plot DIR`` (matplotlib, the ``bench`` extra).

Two shapes cover every table: ``bars`` (one group per row, one bar per column, an error
bar for the spread where the benchmark measured one) and ``lines`` (a rate against N, one
line per column, for the round trips).  A missing cell (``None``) draws nothing: the
table says why it is missing.

Only the Agg backend is used, so no display is needed, and each file is written in one
``savefig``: a run that fails half-way leaves no half-drawn picture.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

Spread = tuple[float, float]  # (lowest, highest) around a bar's value


def add_argument(parser: argparse.ArgumentParser) -> None:
    """The ``--plot DIR`` option every benchmark takes."""
    parser.add_argument(
        "--plot", type=Path, metavar="DIR",
        help="also write the table as a PNG into DIR (needs matplotlib: pip install .[bench])",
    )


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise SystemExit(
            "--plot needs matplotlib: python -m pip install matplotlib (or .[bench])"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _title(ax: Any, title: str) -> None:
    """The table's header line as the title, wrapped to the figure's width (they run long)."""
    width = int(ax.figure.get_figwidth() * 11)  # characters of 10-point text per inch, about
    ax.set_title(textwrap.fill(title, max(40, width)), fontsize=10)


def _legend(ax: Any) -> None:
    """The legend right of the axes, where it hides no bar or line (ten columns, some)."""
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def _thousands(ax: Any, log: bool) -> None:
    """Y ticks as 100,000 rather than 100000 or 10^5, as the tables print them; on a log
    axis at 1, 2 and 5 of each decade, the two or three decades a table spans giving few."""
    from matplotlib.ticker import LogLocator, NullFormatter, StrMethodFormatter

    if log:
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))


def _save(fig: Any, directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _pyplot().close(fig)
    return path


def bars(
    directory: Path,
    name: str,
    title: str,
    ylabel: str,
    groups: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    spread: Mapping[str, Sequence[Spread | None]] | None = None,
    log: bool = False,
) -> Path:
    """Grouped bars: ``groups`` along x, one bar per key of ``series`` in each group.

    ``series[column][i]`` is the value for ``groups[i]``; ``spread``, where given, the
    (lowest, highest) drawn as an error bar.  Returns the path written.
    """
    plt = _pyplot()
    # Wide enough for the bars, up to what a screen shows whole.
    inches = min(14.0, max(7.0, 1.1 * len(groups) * max(1, len(series)) / 2))
    fig, ax = plt.subplots(figsize=(inches, 4.2))
    width = 0.8 / max(1, len(series))
    for k, (column, values) in enumerate(series.items()):
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(groups))]
        present = [(x, v, i) for i, (x, v) in enumerate(zip(xs, values, strict=True))
                   if v is not None]
        if not present:
            continue
        errors = None
        if spread is not None and column in spread:
            low_high = [spread[column][i] for _, _, i in present]
            errors = [
                [v - (s[0] if s else v) for (_, v, _), s in zip(present, low_high, strict=True)],
                [(s[1] if s else v) - v for (_, v, _), s in zip(present, low_high, strict=True)],
            ]
        ax.bar([p[0] for p in present], [p[1] for p in present], width, label=column,
               yerr=errors, capsize=2 if errors else 0)
    ax.set_xticks(range(len(groups)))
    slanted = len(groups) > 4
    ax.set_xticklabels(groups, rotation=20 if slanted else 0, ha="right" if slanted else "center")
    ax.set_ylabel(ylabel)
    _title(ax, title)
    if log:
        ax.set_yscale("log")
    _thousands(ax, log)
    ax.grid(axis="y", alpha=0.3)
    if len(series) > 1:  # one series: the y label says what it is
        _legend(ax)
    return _save(fig, directory, name)


def lines(
    directory: Path,
    name: str,
    title: str,
    xlabel: str,
    ylabel: str,
    xs: Sequence[int],
    series: Mapping[str, Sequence[float | None]],
) -> Path:
    """One line per key of ``series`` against ``xs`` (drawn evenly spaced, labelled)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 4.2))  # 7 for the axes, the rest for the legend
    positions = range(len(xs))
    # matplotlib's default cycle has ten colours: past ten lines, the marker tells them apart.
    markers = "os^Dv"
    for index, (column, values) in enumerate(series.items()):
        points = [(p, v) for p, v in zip(positions, values, strict=True) if v is not None]
        if points:
            ax.plot([p for p, _ in points], [v for _, v in points], label=column,
                    marker=markers[index // 10 % len(markers)])
    ax.set_xticks(list(positions))
    ax.set_xticklabels([f"{x:,}" for x in xs])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    _title(ax, title)
    ax.set_ylim(bottom=0)
    _thousands(ax, log=False)
    ax.grid(alpha=0.3)
    _legend(ax)
    return _save(fig, directory, name)
