"""The report's figures: matplotlib, rendered to SVG text that the page embeds.

Deterministic: a fixed hash salt and no date in the SVG, so the same scores give the same
bytes. Every function takes plain numbers (from ``trace score`` and the diagnosis summary)
and returns one ``<svg>`` element as a string.
"""

from __future__ import annotations

import io
from typing import Mapping

import matplotlib

matplotlib.use("Agg")  # no display; before pyplot is imported
import matplotlib.pyplot as plt  # noqa: E402

from ..operators import OPERATORS  # noqa: E402

__all__ = ["bars", "lines_by_slot", "cumulative_pass"]

# text.parse_math off: run names are generator specs, and a command: spec may hold "$VAR"s
_STYLE = {"svg.hashsalt": "tracebench", "svg.fonttype": "none", "font.size": 9, "axes.spines.top": False,
          "axes.spines.right": False, "text.parse_math": False}


def _svg(fig) -> str:
    out = io.StringIO()
    fig.savefig(out, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    text = out.getvalue()
    return text[text.index("<svg"):]  # the element alone, without the XML prolog and doctype


def lines_by_slot(runs: Mapping[str, Mapping[str, Mapping[str, float | None]]]) -> str:
    """Operator score by slot level, one panel per operator, one line per run.
    ``runs``: run name -> slot -> {operator: score}."""
    with plt.rc_context(_STYLE):
        fig, axes = plt.subplots(1, 4, figsize=(11, 2.8), sharey=True)
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for ax, op in zip(axes, OPERATORS):
            for k, (name, by_slot) in enumerate(runs.items()):
                slots = sorted(int(s) for s in by_slot)
                points = [(s, by_slot[str(s)].get(op)) for s in slots]
                points = [(s, v) for s, v in points if v is not None]
                if points:  # one color per run in every panel, so one legend serves all
                    ax.plot([s for s, _ in points], [v for _, v in points], marker="o", ms=3,
                            color=colors[k % len(colors)])
            ax.set_title(op)
            ax.set_xlabel("slot level")
            ax.set_ylim(0, 1.02)
            ax.set_xticks(range(1, 9))
        axes[0].set_ylabel("score")
        handles = [plt.Line2D([], [], color=colors[k % len(colors)], marker="o", ms=3) for k in range(len(runs))]
        fig.legend(handles, list(runs), fontsize=7, frameon=False, loc="lower center", ncol=min(3, len(runs)),
                   bbox_to_anchor=(0.5, -0.08 * ((len(runs) + 2) // 3)))
        return _svg(fig)


def bars(values: Mapping[str, Mapping[str, float | None]], *, title: str, xlabel: str = "score") -> str:
    """Horizontal bars: one group per category, one bar per run. ``values``: run -> category -> value."""
    categories = sorted({c for per_run in values.values() for c in per_run})
    with plt.rc_context(_STYLE):
        height = max(1.6, 0.28 * len(categories) * max(1, len(values)) + 0.8)
        fig, ax = plt.subplots(figsize=(5.5, height))
        width = 0.8 / max(1, len(values))
        for k, (name, per_run) in enumerate(values.items()):
            ys = [i + k * width for i in range(len(categories))]
            ax.barh(ys, [float("nan") if per_run.get(c) is None else per_run[c] for c in categories],
                    height=width, label=name)  # no bar where a run has no score
        ax.set_yticks([i + 0.4 - width / 2 for i in range(len(categories))], categories)
        ax.invert_yaxis()
        ax.set_xlim(0, 1.0)
        ax.set_xlabel(xlabel)
        ax.set_title(title)
        if len(values) > 1:  # under the axis: over the bars it would hide them
            ax.legend(fontsize=7, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.6 / height))
        return _svg(fig)


def cumulative_pass(curves: Mapping[str, Mapping[str, float]]) -> str:
    """Cumulative pass rate over relative depth, one line per operator. ``curves``: op -> x -> rate."""
    with plt.rc_context(_STYLE):
        fig, ax = plt.subplots(figsize=(5, 2.8))
        for op, curve in curves.items():
            xs = [float(x) for x in curve]
            ax.plot(xs, list(curve.values()), marker="o", ms=3, label=op)
        ax.set_xlabel("relative depth (0 root, 1 most simplified)")
        ax.set_ylabel("passing by then")
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize=7, frameon=False)
        return _svg(fig)
