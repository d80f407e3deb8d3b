"""A judge plugin: answers "yes" to every question.

    trace run BENCH --generator synthetic:perfect --judge python:examples/plugins/always_yes.py --out RUN

A judge that is always satisfied passes every question that expects "yes" and fails every one
that expects "no" (duplication, leakage): scores with it measure the checklist's polarity, not
the image. Also the smallest example of the judge interface (docs/evaluate.md): subclass
``Judge``, implement ``ask`` returning question id -> answer (or the raw JSON reply).
"""

from __future__ import annotations

from tracebench.providers import Judge


class AlwaysYes(Judge):
    spec = "python:always_yes"

    async def ask(self, case, questions, image, references):
        return {q.id: "yes" for q in questions}


judge = AlwaysYes  # the name `python:always_yes.py` looks for
