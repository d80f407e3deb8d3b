"""What `trace report` writes, read back from the file: each image once, thumbnails unless
--full-images, case bodies packed until opened; and what it imports."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
import zlib

import numpy as np
import pytest
from PIL import Image

from test_cli import run_trace
from tracebench.records import TREES
from tracebench.report import build_report
from tracebench.report._report import THUMBNAIL, _node_image, reference_file
from tracebench.run import generated_image, load_run

IMAGE = re.compile(r'<data class="tb-image" id="tb-img-(\w+)" value="([^"]*)"></data>')
CASE = re.compile(r'<details class="case"[^>]* data-case="([^"]+)"[^>]* data-body="([^"]*)">')


def unpack(html: str) -> tuple[dict[str, bytes], dict[str, str]]:
    """The page's images (key -> the bytes of its data URI) and case bodies (case id -> HTML)."""
    images: dict[str, bytes] = {}
    for key, uri in IMAGE.findall(html):
        assert key not in images and uri.startswith("data:image/")
        images[key] = base64.b64decode(uri.split(",", 1)[1])
    bodies = {cid: zlib.decompress(base64.b64decode(packed)).decode("utf-8") for cid, packed in CASE.findall(html)}
    return images, bodies


def shown_files(run_dir, diag_dir) -> dict:
    """Every image file a report of the run and its diagnosis shows -> its bytes."""
    run = load_run(run_dir)
    files = {}
    trees = {tree.case_id: tree for tree in TREES.read(diag_dir)} if diag_dir else {}
    for cid, case in run.cases.items():
        paths = [reference_file(run.cases_dir, case, r.path) for r in case.references]
        paths.append(generated_image(run_dir, cid))
        if cid in trees:
            paths += [_node_image(diag_dir, trees[cid], node) for node in trees[cid].nodes]
        files.update({p.resolve(): p.read_bytes() for p in paths if p is not None})
    return files


@pytest.fixture(scope="module")
def twin(default_world, tmp_path_factory):
    """A copy of the default run in which case B's generated image has case A's bytes."""
    root = tmp_path_factory.mktemp("twin")
    run = root / "run"
    shutil.copytree(default_world["run"], run)
    first, second = list(load_run(run).cases)[:2]
    shutil.copyfile(generated_image(run, first), generated_image(run, second))
    return {"run": run, "diag": default_world["diag"], "first": first, "second": second}


def test_each_distinct_image_is_embedded_once(twin, tmp_path):
    out = build_report(twin["run"], tmp_path / "page.html", diagnosis=twin["diag"])
    images, bodies = unpack(out.read_text(encoding="utf-8"))
    files = shown_files(twin["run"], twin["diag"])
    distinct = {hashlib.sha256(data).digest() for data in files.values()}
    assert len(distinct) < len(files)  # files with equal bytes: at least the twin generated images
    assert len(images) <= len(distinct)  # two files can also make one thumbnail
    assert len({hashlib.sha256(data).digest() for data in images.values()}) == len(images)
    whole, _ = unpack(build_report(twin["run"], tmp_path / "full.html", diagnosis=twin["diag"],
                                   full_images=True).read_text(encoding="utf-8"))
    assert sorted(whole.values()) == sorted(set(files.values()))  # as they are: every distinct file, once

    def generated_key(cid: str) -> str:
        return re.search(rf'<img data-img="(\w+)" alt="generated image of {cid}">', bodies[cid]).group(1)

    assert generated_key(twin["first"]) == generated_key(twin["second"])
    keys = {k for body in bodies.values() for k in re.findall(r'data-img="(\w+)"', body)}
    assert keys == set(images)  # every image the page holds is shown by some case, and none is missing


def test_images_are_thumbnails_unless_full_images(twin, tmp_path):
    thumbs = build_report(twin["run"], tmp_path / "thumbs.html", diagnosis=twin["diag"])
    full = build_report(twin["run"], tmp_path / "full.html", diagnosis=twin["diag"], full_images=True)
    files = set(shown_files(twin["run"], twin["diag"]).values())
    small, _ = unpack(thumbs.read_text(encoding="utf-8"))
    whole, _ = unpack(full.read_text(encoding="utf-8"))
    assert set(whole.values()) == files
    assert min(max(Image.open(io.BytesIO(f)).size) for f in files) > THUMBNAIL  # each file has pixels to lose
    for data in small.values():
        with Image.open(io.BytesIO(data)) as image:
            assert image.format == "WEBP" and max(image.size) == THUMBNAIL
    assert sum(map(len, small.values())) < sum(map(len, whole.values())) / 2


def test_case_bodies_hold_what_a_case_shows(default_world, tmp_path):
    out = build_report(default_world["run"], tmp_path / "page.html", diagnosis=default_world["diag"])
    html = out.read_text(encoding="utf-8")
    _, bodies = unpack(html)
    run = load_run(default_world["run"])
    assert list(bodies) == list(run.verdicts)  # every case, in the run's order
    for cid, body in bodies.items():
        case = run.cases[cid]
        assert body.count('<table class="questions">') == 1 and body.count("<tr><td><code>") == len(case.checklist)
        assert "share-bar" not in body and "table class=\"chain\"" not in body  # first-pass: no rates view
    first = bodies[default_world["first"]]
    assert "&lt;script&gt;alert(&#34;injected&#34;)&lt;/script&gt;" in first and "<script" not in first
    assert "<div class=\"prompt\">" not in html.split('<div id="case-list">', 1)[1]  # no body outside its pack
    trees = {tree.case_id for tree in TREES.read(default_world["diag"])}
    assert {cid for cid, body in bodies.items() if "svg class=\"tree\"" in body} == trees & set(bodies)


def test_report_imports_neither_scikit_learn_nor_scipy(default_world, tmp_path):
    script = ("import sys\nfrom tracebench.cli import main\ncode = main(sys.argv[1:])\n"
              "print(sorted(m for m in ('sklearn', 'scipy') if m in sys.modules))\n"
              "from tracebench.report import agree, Label\n"  # still there, imported on first use
              "print(agree.__module__, Label.__name__, sorted(m for m in ('sklearn', 'scipy') if m in sys.modules))\n"
              "sys.exit(code)\n")
    result = subprocess.run([sys.executable, "-c", script, "report", str(default_world["run"]), "--diagnosis",
                             str(default_world["diag"]), "--out", str(tmp_path / "page.html")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[-2] == "[]"
    assert lines[-1] == "tracebench.report._agree Label ['scipy', 'sklearn']"


def test_the_bootstrap_intervals_are_scipys():
    """`trace score`'s intervals, computed without SciPy, equal scipy.stats.bootstrap's, float for float."""
    from scipy import stats

    from tracebench.score._score import _bootstrap_interval

    rng = np.random.default_rng(7)
    for trial in range(200):
        n = int(rng.integers(2, 120))
        values = (rng.integers(0, 2, n) if trial % 2 else rng.integers(0, 13, n) / 12).astype(float).tolist()
        seed = int(rng.integers(0, 1000))
        expected = stats.bootstrap((np.asarray(values),), np.mean, n_resamples=1000, confidence_level=0.95,
                                   method="percentile", random_state=np.random.default_rng(seed))
        assert _bootstrap_interval(values, seed) == (float(expected.confidence_interval.low),
                                                     float(expected.confidence_interval.high)), (values, seed)


def test_full_images_is_documented_in_the_help():
    result = run_trace("report", "--help")
    assert result.returncode == 0 and "--full-images" in result.stdout and "thumbnails" in result.stdout
    assert json.dumps(THUMBNAIL) in result.stdout.replace("\n", " ")
