"""The `trace` command as a user runs it: the installed console script, in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tracebench.diagnose import build_tree, tree_json
from tracebench.formula import count_by_generating_function, describe_formula, parse, slot_count


def _trace_executable() -> list[str]:
    script = Path(sys.executable).parent / "trace"
    if script.exists():
        return [str(script)]
    found = shutil.which("trace")
    if found:
        return [found]
    pytest.fail("the `trace` console script is not installed next to this Python")


def run_trace(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``trace ARGS`` in a process of its own: its exit status, stdout and stderr.

    The process is forked from this one, which has tracebench imported already, and runs what the
    console script runs (``sys.exit(tracebench.cli.main())``) with ARGS and this process's
    environment and folder: the command's code in a fresh process (its own memory, exit status,
    file descriptors, signals), without the 0.3-0.6 s of imports a new interpreter pays before
    each command (half the suite's CPU time was those). The console script itself still runs in
    the tests that start it (``_trace_executable``: kills, Ctrl-C, servers, Ray) and in
    ``test_the_console_script_runs_the_command``; ``TRACEBENCH_TEST_EXEC=1`` sends every command
    through it, and a Ray run (``--executor``) always goes there (Ray does not survive a fork)."""
    if os.environ.get("TRACEBENCH_TEST_EXEC") or "--executor" in args or not hasattr(os, "fork"):
        # PYTHONPATH is passed on: under PYTHONPATH=<a worktree> the script runs that tree's code
        return subprocess.run([*_trace_executable(), *args], capture_output=True, text=True, timeout=timeout)
    return _forked(["trace", *args], timeout)


_FORKING = threading.Lock()


def _forked(argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    import selectors
    import signal
    import time

    # one command forked at a time (tests/golden_outputs.py forks from two threads): a child forked
    # while another command's pipes are open here would hold their write ends, and that command's
    # output would end only when this child does
    with _FORKING:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid != 0:
            os.close(out_w)
            os.close(err_w)
    if pid == 0:  # the command's process: never returns into pytest
        code = 1
        try:
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            for fd in (out_r, out_w, err_r, err_w):
                os.close(fd)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            sys.stdin = open(0, encoding="utf-8", closefd=False)
            sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
            sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1)
            sys.argv = argv
            from tracebench.cli import main

            code = main(argv[1:])
        except SystemExit as done:  # what sys.exit makes of it, as the interpreter would
            if done.code is None or isinstance(done.code, int):
                code = done.code or 0
            else:
                print(done.code, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - an uncaught error: the traceback and status 1, as python gives
            import traceback

            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except BaseException:  # noqa: BLE001 - a closed pipe (trace templates | head)
                    pass
            os._exit(code if isinstance(code, int) else 1)
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        for fd in chunks:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                for fd in chunks:
                    os.close(fd)
                raise subprocess.TimeoutExpired(argv, timeout)
            for key, _ in selector.select(min(left, 1.0)):
                data = os.read(key.fd, 1 << 16)
                if data:
                    chunks[key.fd].append(data)
                else:
                    selector.unregister(key.fd)
    for fd in chunks:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return subprocess.CompletedProcess(argv, code, b"".join(chunks[out_r]).decode("utf-8", "replace"),
                                       b"".join(chunks[err_r]).decode("utf-8", "replace"))


def test_the_console_script_runs_the_command(tmp_path):
    """The installed script, as a user starts it: the same output and status as run_trace's."""
    script = subprocess.run([*_trace_executable(), "parse", "C(f1, g_color)"], capture_output=True, text=True,
                            timeout=120)
    forked = run_trace("parse", "C(f1, g_color)")
    assert (script.returncode, script.stdout, script.stderr) == (forked.returncode, forked.stdout, forked.stderr)
    bad = subprocess.run([*_trace_executable(), "parse", "C(f1,"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and (bad.stdout, bad.stderr) == (run_trace("parse", "C(f1,").stdout,
                                                                 run_trace("parse", "C(f1,").stderr)


def test_parse_prints_canonical_form_and_slots():
    result = run_trace("parse", "C(T_e + g1 + g2, f1) + g_global")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "C(f1, T_e ⊕ g1 ⊕ g2) ⊕ g_global\tslots=4\n"
    ascii_result = run_trace("parse", "--ascii", "C(T_e ⊕ g1 ⊕ g2, f1) ⊕ g_global")
    assert ascii_result.stdout == "C(f1, T_e + g1 + g2) + g_global\tslots=4\n"


def test_parse_json_has_the_documented_keys():
    result = run_trace("parse", "--json", 'C( C(f1, T_e ⊕ g1) ⊕ g_rel , f2(I2, "dog") ⊕ g2 ⊕ g3 ) ⊕ g_global')
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["slots"] == 7
    assert info["depth"] == 2
    assert info["canonical"] == 'C(f2(I2, "dog") ⊕ g2 ⊕ g3, C(f1, T_e ⊕ g1) ⊕ g_rel) ⊕ g_global'
    assert info["ascii"] == info["canonical"].replace("⊕", "+")
    assert info["template"] == "C(f ⊕ g ⊕ g, C(f, T_e ⊕ g) ⊕ g_rel) ⊕ g_global"
    assert [(t["symbol"], t["op"], t["role"]) for t in info["terms"]] == [
        ("f1", "f", "anchor"), ("T_e", "T", "text"), ("g1", "g", "local"), ("g_rel", "g", "relation"),
        ("f2", "f", "anchor"), ("g2", "g", "local"), ("g3", "g", "local"), ("g_global", "g", "global"),
    ]
    assert info["terms"][4]["binding"] == {"image": 2, "entity": "dog"}
    assert {"symbol", "op", "kind", "role"} <= set(info["terms"][0])


@pytest.mark.parametrize(
    "formula,fragment",
    [
        ("", "empty formula"),
        ("C(f1 ⊕ g1", "formula column 10: the formula ends too early"),
        ("f ⊕ g_nope", "formula column 5: unknown g kind"),
        ("C(C(C(f1, f2) ⊕ g_rel, f3), f4)", "formula column 5: C nested 3 levels"),
        ("C(f1, f2) ⊕ g_pattern", "formula column 13: g_pattern binds to one entity"),
    ],
)
def test_bad_formulas_give_one_line_and_exit_2(formula, fragment):
    result = run_trace("parse", formula)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("trace parse: ")
    assert fragment in lines[0]
    assert "Traceback" not in result.stderr


def test_templates_count_json_matches_the_generating_function():
    result = run_trace("templates", "--slots", "1-5", "--count", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    expected = {str(s): n for s, n in count_by_generating_function().items() if s <= 5}
    assert data == {"counts": expected, "total": sum(expected.values())}


def test_templates_listing_parses_back_with_its_slot_level():
    result = run_trace("templates", "--slots", "2,4")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == sum(n for s, n in count_by_generating_function().items() if s in (2, 4))
    for line in lines:
        level, formula = line.split("\t")
        assert slot_count(parse(formula)) == int(level)
    assert len(set(lines)) == len(lines)


def test_templates_json_listing():
    result = run_trace("templates", "--slots", "1", "--json", "--ascii")
    data = json.loads(result.stdout)
    assert sorted(t["template"] for t in data["templates"]) == ["T_e + g", "T_e + g_attach", "T_e + g_ip", "f"]
    assert {t["slots"] for t in data["templates"]} == {1}


@pytest.mark.parametrize("spec", ["0-9", "9", "3-1", "x", "1-", ""])
def test_bad_slot_specs_give_one_line_and_exit_2(spec):
    result = run_trace("templates", "--count", "--slots", spec)
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "--slots" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_subcommand_is_one_line():
    result = run_trace("frobnicate")
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1


def test_the_python_api_gives_what_the_commands_print():
    formula = 'C(f1, T_e + g1) ⊕ g_style'
    assert json.loads(run_trace("parse", "--json", formula).stdout) == describe_formula(formula)
    dry = run_trace("diagnose", "--formula", formula, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout) == tree_json(build_tree(parse(formula)))


def test_files_and_folders_follow_the_umask(tmp_path):
    """What tracebench writes can be shared or served: the permissions a plain write gives under
    the user's umask (here 002: group-writable), not the temporary files' 0600 and 0700."""
    import stat

    def trace(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*_trace_executable(), *args], capture_output=True, text=True, timeout=300,
                              preexec_fn=lambda: os.umask(0o002))

    bench, run, diag = tmp_path / "bench", tmp_path / "run", tmp_path / "diag"
    steps = [("sample", "--slots", "3-5", "--per-slot", "2", "--no-applications", "--out", str(bench)),
             ("run", str(bench), "--generator", "synthetic:global-interference", "--judge", "oracle", "--out", str(run)),
             ("diagnose", str(run), "--out", str(diag)),
             ("report", str(run), "--diagnosis", str(diag), "--out", str(tmp_path / "report.html"))]
    for step in steps:
        result = trace(*step)
        assert result.returncode == 0, (step[0], result.stderr)
    made = [p for p in tmp_path.rglob("*")]
    assert len(made) > 20
    wrong = {str(p.relative_to(tmp_path)): oct(stat.S_IMODE(p.stat().st_mode)) for p in made
             if stat.S_IMODE(p.stat().st_mode) != (0o775 if p.is_dir() else 0o664)}
    assert not wrong, wrong


def test_an_unknown_option_names_its_subcommand(tmp_path):
    for args, prog in ((("score", str(tmp_path), "--bogus"), "trace score"),
                       (("library", "validate", str(tmp_path), "--bogus"), "trace library validate")):
        result = run_trace(*args)
        assert result.returncode == 2
        assert result.stderr.startswith(f"{prog}: unrecognized arguments: --bogus"), result.stderr


@pytest.mark.parametrize("command", [
    ("sample", "--slots", "1", "--per-slot", "1"),
    ("run", "BENCH", "--generator", "synthetic:perfect", "--judge", "oracle"),
    ("report", "BENCH"),
    ("diagnose", "BENCH"),
    ("library", "synth", "--n", "2"),
])
def test_an_out_under_a_file_is_one_line_and_exit_2(tmp_path, command):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    args = [str(tmp_path) if a == "BENCH" else a for a in command]
    result = run_trace(*args, "--out", str(blocker / "sub" / "out"))
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and f"{blocker} is a file, not a folder" in result.stderr
    assert "Traceback" not in result.stderr and blocker.read_text() == "not a folder"


def test_an_empty_benchmark_is_an_error_not_a_run(tmp_path):
    bench = tmp_path / "bench"
    assert run_trace("sample", "--slots", "1", "--per-slot", "1", "--no-applications", "--out", str(bench)).returncode == 0
    (bench / "cases.jsonl").write_text("")
    result = run_trace("run", str(bench), "--generator", "synthetic:perfect", "--judge", "oracle",
                       "--out", str(tmp_path / "run"))
    assert result.returncode == 2 and "holds no case" in result.stderr and not (tmp_path / "run").exists()
    empty = tmp_path / "made-elsewhere"
    empty.mkdir()
    bench2 = tmp_path / "bench2"
    assert run_trace("sample", "--slots", "1", "--per-slot", "1", "--no-applications", "--out", str(bench2)).returncode == 0
    result = run_trace("run", str(bench2), "--generator", f"folder:{empty}", "--judge", "oracle",
                       "--out", str(tmp_path / "run2"))
    assert result.returncode == 2 and "holds no image" in result.stderr and not (tmp_path / "run2").exists()


def test_ctrl_c_stops_a_run_with_one_line_and_exit_130_and_the_same_command_resumes(tmp_path):
    import signal
    import time

    from tracebench.serve import ZooServer

    bench = tmp_path / "bench"
    assert run_trace("sample", "--slots", "1-3", "--per-slot", "3", "--no-applications",
                     "--out", str(bench)).returncode == 0
    with ZooServer([bench], latency=1.0).start() as zoo:  # a slow judge: the run is mid-way when interrupted
        args = [*_trace_executable(), "run", str(bench), "--generator", "synthetic:perfect",
                "--judge", f"openai:oracle@{zoo.base_url}", "--concurrency", "1", "--out", str(tmp_path / "run")]
        # SIGINT as a terminal delivers it: a test suite started in the background (`pytest &`) ignores
        # SIGINT, and its children would inherit that
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        verdicts = tmp_path / "run" / "verdicts.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (verdicts.is_file() and verdicts.stat().st_size):
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 130, (stdout, stderr, verdicts.read_text().count("\n"))
        assert stderr.strip() == "trace run: interrupted; run the same command to resume"
        done = len(verdicts.read_text().splitlines())
        zoo.latency = 0.0  # the slow judge was there for the interruption; the resumed run need not wait
        again = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    total = len(verdicts.read_text().splitlines())
    assert 0 < done < total


def test_an_empty_library_is_an_error_not_a_benchmark(tmp_path):
    from tracebench.library import write_library

    library = tmp_path / "empty"
    library.mkdir()
    write_library(library, "empty", [])
    assert run_trace("library", "validate", str(library)).returncode == 0  # valid, just empty
    result = run_trace("sample", "--library", str(library), "--slots", "1", "--out", str(tmp_path / "bench"))
    assert result.returncode == 2 and result.stderr.strip().endswith("holds no image; add tagged images "
                                                                     "(trace library import)"), result.stderr
    assert result.stderr.count("\n") == 1 and not (tmp_path / "bench").exists()


def test_first_mistakes_are_named_once_with_a_guess(tmp_path, monkeypatch):
    """A misspelt profile or judge is named once, with the nearest name; the missing folder of
    trace tag comes before the key it would need."""
    bench = tmp_path / "bench"
    assert run_trace("sample", "--slots", "1", "--per-slot", "1", "--no-applications", "--out", str(bench)).returncode == 0
    profile = run_trace("run", str(bench), "--generator", "synthetic:perfct", "--judge", "oracle", "--out", str(tmp_path / "r"))
    (line,) = profile.stderr.strip().splitlines()
    assert profile.returncode == 2 and line.count("perfct") == 1 and "(did you mean perfect?)" in line
    judge = run_trace("run", str(bench), "--generator", "synthetic:perfect", "--judge", "orcale", "--out", str(tmp_path / "r"))
    assert judge.returncode == 2 and "--judge 'orcale' (did you mean oracle?)" in judge.stderr
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    tag = run_trace("tag", str(tmp_path / "nosuchdir"), "--model", "m", "--out", str(tmp_path / "lib"))
    assert tag.returncode == 2 and tag.stderr.strip() == f"trace tag: {tmp_path / 'nosuchdir'}: not a folder"


def test_score_prints_intervals_with_even_decimals_and_a_resume_names_other_judges(tmp_path):
    bench = tmp_path / "bench"
    assert run_trace("sample", "--slots", "1-2", "--per-slot", "3", "--no-applications", "--out", str(bench)).returncode == 0
    out = tmp_path / "run"
    assert run_trace("run", str(bench), "--generator", "synthetic:noise:0.3", "--judge", "oracle",
                     "--out", str(out)).returncode == 0
    table = run_trace("score", str(out)).stdout
    import re

    intervals = re.findall(r"\[[^\]]*\]", table.split("cases ")[0])
    assert intervals and all(re.fullmatch(r"\[\d\.\d{4}, \d\.\d{4}\]", i) for i in intervals), intervals
    again = run_trace("run", str(bench), "--generator", "synthetic:perfect", "--judge", "oracle", "--judge",
                      "oracle:flip=0.1", "--out", str(out))
    assert again.returncode == 2 and "holds a run with another generator, ensemble and other judges;" in again.stderr


def test_the_first_command_ends_with_the_next_one_to_try(tmp_path):
    out = tmp_path / "my bench"
    result = run_trace("sample", "--slots", "1", "--per-slot", "1", "--no-applications", "--out", str(out))
    assert result.returncode == 0, result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert last == (f"next: trace run '{out}' --generator synthetic:global-interference --judge oracle "
                    f"--out '{tmp_path / 'my bench-run'}'")
    import shlex

    assert run_trace(*shlex.split(last.removeprefix("next: trace "))).returncode == 0  # it runs as printed
