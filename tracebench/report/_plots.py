"""The report's figures: matplotlib, rendered to SVG text that the page embeds.

Deterministic: a fixed hash salt and no date in the SVG, so the same scores give the same
bytes. Every function takes plain numbers (from ``trace score`` and the diagnosis summary)
and returns one ``<svg>`` element as a string.
"""

from __future__ import annotations

import io
import re
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


MISSING = "#bdbdbd"  # no score: a light grey hatched band labelled "n/a", never a bar
STUB = 0.012  # a score of 0.0 still draws this much bar, labelled "0.00": a zero, not a gap


def _counts(per_run: Mapping[str, Mapping[str, int]], key: str) -> str:
    """"n=4" under one category; "n=4/5" when the runs differ (shards, missing verdicts)."""
    found = list(dict.fromkeys(per_run[name].get(key, 0) for name in per_run))
    return "n=" + "/".join(str(n) for n in found)


def _slot_ticks(slots: list[int], ns: list[str]) -> tuple[list[str], str]:
    """The slot levels' tick labels and the axis label: one n for all in the label when the
    levels hold alike ("slot level (n=30 each)"), else each level's n under it, every other one
    a line lower so that neighbours never run together ("n=30n=30" in a narrow panel)."""
    if len(set(ns)) == 1:
        return [str(s) for s in slots], f"slot level ({ns[0]} each)"
    return [f"{s}\n{'' if k % 2 == 0 else chr(10)}{n}" for k, (s, n) in enumerate(zip(slots, ns))], "slot level"


def lines_by_slot(runs: Mapping[str, Mapping[str, Mapping[str, float | None]]],
                  counts: Mapping[str, Mapping[str, int]]) -> str:
    """Operator score by slot level, one panel per operator, one line per run.
    ``runs``: run name -> slot -> {operator: score}; ``counts``: run name -> slot -> cases.
    Each slot's tick shows its n; a slot without a score breaks the line and reads "n/a"."""
    slots = sorted({int(s) for by_slot in runs.values() for s in by_slot})
    ticks, xlabel = _slot_ticks(slots, [_counts(counts, str(s)) for s in slots])
    with plt.rc_context(_STYLE):
        fig, axes = plt.subplots(1, 4, figsize=(11, 3.0), sharey=True)
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for ax, op in zip(axes, OPERATORS):
            missing = set()
            for k, (name, by_slot) in enumerate(runs.items()):
                values = [by_slot.get(str(s), {}).get(op) for s in slots]
                missing |= {s for s, v in zip(slots, values) if v is None}
                # nan breaks the line: no segment is drawn across a slot without data
                ax.plot(slots, [float("nan") if v is None else v for v in values], marker="o", ms=3,
                        color=colors[k % len(colors)])  # one color per run in every panel, so one legend serves all
            for s in sorted(missing):
                ax.text(s, 0.5, "n/a", color="#757575", ha="center", va="center", fontsize=7, rotation=90)
            ax.set_title(op)
            ax.set_ylim(-0.04, 1.04)  # a 0.0 marker sits above the axis line, not on it
            ax.set_xlim(slots[0] - 0.5, slots[-1] + 0.5)
            ax.set_xticks(slots, ticks, fontsize=6)
            ax.set_xlabel(xlabel)
        axes[0].set_ylabel("score")
        handles = [plt.Line2D([], [], color=colors[k % len(colors)], marker="o", ms=3) for k in range(len(runs))]
        fig.legend(handles, list(runs), fontsize=7, frameon=False, loc="lower center", ncol=min(3, len(runs)),
                   bbox_to_anchor=(0.5, -0.08 * ((len(runs) + 2) // 3) - 0.04))
        return _svg(fig)


def bars(values: Mapping[str, Mapping[str, float | None]], counts: Mapping[str, Mapping[str, int]], *,
         title: str, xlabel: str = "score") -> str:
    """Horizontal bars: one group per category, one bar per run, each labelled with its value
    and n. ``values``: run -> category -> value; ``counts``: run -> category -> how many
    cases or instances the value averages. No value: a grey hatched band labelled "n/a";
    a value of 0.0: a stub of bar labelled "0.00"."""
    categories = sorted({c for per_run in values.values() for c in per_run})
    with plt.rc_context(_STYLE):
        height = max(1.6, 0.28 * len(categories) * max(1, len(values)) + 0.8)
        fig, ax = plt.subplots(figsize=(5.5, height))
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        width = 0.8 / max(1, len(values))
        slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")  # ids unique on a page of several plots
        for k, (name, per_run) in enumerate(values.items()):
            color = colors[k % len(colors)]
            for i, category in enumerate(categories):
                y, value = i + k * width, per_run.get(category)
                n = counts.get(name, {}).get(category, 0)
                if value is None:
                    band = ax.barh(y, 1.0, height=width * 0.9, facecolor="none", edgecolor=MISSING, hatch="////",
                                   linewidth=0)
                    band.patches[0].set_gid(f"{slug}-missing-{k}-{i}")
                    ax.text(0.02, y, f"n/a (n={n})", va="center", fontsize=7, color="#616161")
                    continue
                bar = ax.barh(y, max(value, STUB), height=width, color=color)
                bar.patches[0].set_gid(f"{slug}-{'zero' if value == 0 else 'value'}-{k}-{i}")
                ax.text(max(value, STUB) + 0.01, y, f"{value:.2f} (n={n})", va="center", fontsize=7)
        ax.set_yticks([i + 0.4 - width / 2 for i in range(len(categories))], categories)
        ax.invert_yaxis()
        ax.set_xlim(0, 1.3)  # room for the labels right of a full bar
        ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0])
        ax.set_xlabel(xlabel)
        ax.set_title(title)
        if len(values) > 1:  # under the axis: over the bars it would hide them
            handles = [plt.Rectangle((0, 0), 1, 1, color=colors[k % len(colors)]) for k in range(len(values))]
            ax.legend(handles, list(values), fontsize=7, frameon=False, loc="upper center",
                      bbox_to_anchor=(0.5, -0.12 - 0.6 / height))
        return _svg(fig)


def cumulative_pass(curves: Mapping[str, Mapping[str, float]], counts: Mapping[str, int]) -> str:
    """Cumulative pass rate over relative depth, one line per operator. ``curves``: op -> x -> rate;
    ``counts``: op -> the instances behind its curve (shown in the legend as n)."""
    with plt.rc_context(_STYLE):
        fig, ax = plt.subplots(figsize=(5, 2.8))
        # a marker and a dash of its own per operator, drawn a little transparent: a line on top of
        # another (apply under compose, both at 1.0) still shows
        styles = (("o", "-"), ("s", "--"), ("^", "-."), ("D", ":"))
        for k, (op, curve) in enumerate(curves.items()):
            xs = [float(x) for x in curve]
            marker, dash = styles[k % len(styles)]
            ax.plot(xs, list(curve.values()), marker=marker, ms=4, linestyle=dash, alpha=0.8, lw=1.6,
                    label=f"{op} (n={counts.get(op, 0)})")
        ax.set_title("requirements passing by relative depth")
        ax.set_xlabel("relative depth (0 root, 1 most simplified)")
        ax.set_ylabel("passing by then")
        ax.set_ylim(0, 1.02)
        if curves:  # a diagnosis of no case (every case passed) draws no line to name
            ax.legend(fontsize=7, frameon=False)
        return _svg(fig)
