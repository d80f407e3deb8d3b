"""The house limits on functions (80 lines, complexity 25, 8 parameters), measured by
bench/code_shape.py: the check and the bench script are one function."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("code_shape", ROOT / "bench" / "code_shape.py")
code_shape = sys.modules.setdefault("code_shape", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(code_shape)


def test_every_function_of_tracebench_keeps_the_limits():
    past = code_shape.violations()
    assert past == [], "\n" + code_shape.table(past)


def test_the_measures_of_a_small_file(tmp_path):
    branches = "".join(f"    if x == {k}:\n        return {k}\n" for k in range(25))  # 25 decisions: complexity 26
    source = textwrap.dedent('''\
        from dataclasses import dataclass


        @dataclass(frozen=True)
        class Options:
            def __init__(self, a, b, c, d, e, f, g, h, i):
                pass


        class Runner:
            def __init__(self, a, b, c, d, e, f, g, h, i):
                pass

            @classmethod
            def make(cls, a, *rest, key=None, **more):
                def inner(y):
                    return y
                return inner


        def long(x):
        ''') + "    x += 1\n" * 80 + "\n\ndef branchy(x):\n" + branches
    (tmp_path / "tracebench").mkdir()
    path = tmp_path / "tracebench" / "sample.py"
    path.write_text(source, encoding="utf-8")
    shapes = {s.name: (s.line, s.lines, s.complexity, s.parameters, s.problems())
              for s in code_shape.file_shapes(path, tmp_path)}
    assert shapes == {
        "Options.__init__": (6, 2, 1, None, ()),  # a frozen record's constructor: exempt
        "Runner.__init__": (11, 2, 1, 9, ("parameters",)),
        "Runner.make": (15, 4, 1, 4, ()),  # a, *rest, key, **more; cls not counted
        "Runner.make.inner": (16, 2, 1, 1, ()),
        "long": (21, 81, 1, 1, ("lines",)),
        "branchy": (104, 51, 26, 1, ("complexity",)),
    }
    assert [s.name for s in code_shape.violations(tmp_path)] == ["Runner.__init__", "long", "branchy"]
