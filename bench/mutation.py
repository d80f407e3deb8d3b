"""Mutation testing of one module with mutmut: how many of its mutants the named tests kill.

mutmut (https://pypi.org/project/mutmut/, not a dependency of tracebench: ``pip install
mutmut``) rewrites a module into mutants (an operator flipped, a constant changed, an argument
dropped) and runs the tests that cover each; a mutant the tests do not notice survives. The
repository is cloned into a temporary folder (mutmut writes a ``mutants/`` tree beside the
code), mutmut is configured there to mutate ``--module`` alone and to run ``--tests`` alone,
and the counts are printed: killed, survived, not covered by the tests given, and the kill
rate over all mutants.

mutmut imports the mutated copy, so tracebench must not be importable from elsewhere: run this
with a Python whose environment holds tracebench's dependencies but not tracebench itself::

    python3.11 -m venv /tmp/mutvenv && /tmp/mutvenv/bin/pip install '.[test]' mutmut
    /tmp/mutvenv/bin/pip uninstall -y tracebench
    /tmp/mutvenv/bin/python bench/mutation.py --module tracebench/diagnose/_attribute.py \\
        --tests tests/test_attribution_rules.py

Fast, pure tests make it practical: each surviving candidate reruns the tests that cover it.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", required=True, help="the file to mutate, from the repository root")
    parser.add_argument("--tests", nargs="+", required=True, help="the pytest node ids or files to run")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--show-survivors", action="store_true", help="print the diff of every surviving mutant")
    parser.add_argument("--functions", nargs="+", metavar="NAME",
                        help="count only the mutants of these functions of the module (Class.method for a method), "
                             "e.g. the resume functions of a larger module")
    args = parser.parse_args()
    if importlib.util.find_spec("tracebench") is not None:
        raise SystemExit("tracebench is importable here: run this from an environment without it (see --help)")
    with tempfile.TemporaryDirectory(prefix="tracebench-mutation-") as tmp:
        clone = Path(tmp) / "repo"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        others = sorted(str(p.relative_to(clone)) for p in (clone / "tracebench").rglob("*.py")
                        if str(p.relative_to(clone)) != args.module)
        lines = ["[mutmut]", "source_paths =", "    tracebench", "do_not_mutate ="]
        lines += [f"    {o}" for o in others]
        lines += ["pytest_add_cli_args =", "    -o", "    pythonpath=.", "    -p", "    no:cacheprovider", "    -n", "    0"]
        lines += ["pytest_add_cli_args_test_selection ="] + [f"    {t}" for t in args.tests]
        lines += ["also_copy ="] + [f"    {d}" for d in ("grammar", "templates", "taxonomy", "diagnose", "tests")]
        (clone / "setup.cfg").write_text("\n".join(lines) + "\n")
        env = {**os.environ, "CI": "true"}
        mutmut = [sys.executable, "-m", "mutmut"]
        subprocess.run([*mutmut, "run", "--max-children", str(args.jobs)], cwd=clone, env=env, check=True,
                       stdout=subprocess.DEVNULL)
        results = subprocess.run([*mutmut, "results", "--all", "true"], cwd=clone, env=env, check=True,
                                 capture_output=True, text=True).stdout
        if args.functions:  # mutmut names a mutant x_<function>__mutmut_N, or xǁClassǁmethod__mutmut_N
            marks = tuple(("xǁ" + f.replace(".", "ǁ") if "." in f else "x_" + f) + "__mutmut_" for f in args.functions)
            results = "\n".join(line for line in results.splitlines() if any(m in line for m in marks))
        statuses = Counter(m.group(1) for m in re.finditer(r":\s*(\w[\w ]*\w)\s*$", results, re.M))
        total = sum(statuses.values())
        killed = statuses.get("killed", 0)
        where = f"{args.module} ({', '.join(args.functions)})" if args.functions else args.module
        print(f"{where}: {total} mutants, {killed} killed, {statuses.get('survived', 0)} survived, "
              f"{statuses.get('no tests', 0)} not covered by the tests given; kill rate {killed / total:.1%}"
              if total else f"{where}: no mutants")
        for status, n in sorted(statuses.items()):
            print(f"  {status}: {n}")
        if args.show_survivors:  # each surviving mutant's diff, to classify it
            for name in re.findall(r"^\s*(\S+):\s*survived\s*$", results, re.M):
                shown = subprocess.run([*mutmut, "show", name], cwd=clone, env=env, capture_output=True, text=True)
                print(f"--- {name}\n{shown.stdout.strip()}")


if __name__ == "__main__":
    main()
