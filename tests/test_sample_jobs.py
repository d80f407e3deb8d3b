"""`trace sample --jobs N`: cases made by forked workers are the bytes of one process; an error
in a worker is the same one-line error; Ctrl-C leaves nothing behind."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from library_helpers import entity, make_library, record
from test_cli import run_trace
from tracebench.sample import SampleOptions, sample_benchmark
from tracebench.sample._parallel import PARALLEL_FROM


def _manifest(folder) -> dict:
    data = json.loads((folder / "manifest.json").read_text())
    data["arguments"].pop("library", None)
    return data


def test_any_number_of_workers_writes_the_same_bytes(tmp_path):
    outputs = []
    for jobs in (1, 2, 3):
        out = tmp_path / f"jobs{jobs}"
        manifest = sample_benchmark(out, SampleOptions(slots=(1, 4, 7), per_slot=70, seed=9, jobs=jobs))
        assert manifest.cases >= PARALLEL_FROM  # large enough to be made in parallel
        outputs.append(((out / "cases.jsonl").read_bytes(), _manifest(out),
                        sorted(p.name for p in (out / "references").iterdir())))
    assert outputs[0] == outputs[1] == outputs[2]


def test_the_cli_samples_on_every_core_by_default_and_refuses_a_bad_count(tmp_path):
    result = run_trace("sample", "--slots", "2-3", "--per-slot", "60", "--seed", "1", "--out", str(tmp_path / "a"))
    assert result.returncode == 0, result.stderr
    single = run_trace("sample", "--slots", "2-3", "--per-slot", "60", "--seed", "1", "--jobs", "1",
                       "--out", str(tmp_path / "b"))
    assert single.returncode == 0, single.stderr
    assert (tmp_path / "a" / "cases.jsonl").read_bytes() == (tmp_path / "b" / "cases.jsonl").read_bytes()
    for bad in ("0", "-2", "many"):
        refused = run_trace("sample", "--slots", "2", "--jobs", bad, "--out", str(tmp_path / "c"))
        assert refused.returncode == 2 and "--jobs" in refused.stderr and "Traceback" not in refused.stderr
        assert not (tmp_path / "c").exists()


def test_a_case_that_cannot_be_bound_in_a_worker_is_the_usual_one_line_error(tmp_path):
    library = make_library(tmp_path / "lib", [record("one", [entity("Animal", "the lone cat")])])
    out = tmp_path / "bench"
    result = run_trace("sample", "--slots", "2", "--per-slot", str(PARALLEL_FROM + 50), "--no-applications",
                       "--jobs", "2", "--library", str(library), "--out", str(out))
    assert result.returncode == 2
    last = result.stderr.splitlines()[-1]
    assert "cannot bind C(f, f)" in last and "other templates of slot 2" in last  # as without workers
    assert "Traceback" not in result.stderr
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".bench")]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_with_workers_exits_130_and_leaves_nothing(tmp_path):
    out = tmp_path / "bench"
    command = [sys.executable, "-m", "tracebench", "sample", "--slots", "1-8", "--per-slot", "4000", "--jobs", "2",
               "--no-applications", "--out", str(out)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(p.name.startswith(".bench") for p in tmp_path.iterdir()):
        time.sleep(0.2)  # the stage folder appears once cases are being written
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err
    assert not out.exists() and list(tmp_path.iterdir()) == []
    children = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True)
    assert children.stdout.strip() == "", "a worker outlived the interrupted command"
