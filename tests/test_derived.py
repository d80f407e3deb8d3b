"""Derived data kept between processes (tracebench.derived): the classified template space, the
quota flows and the grammar's parse tables. Whatever the folder holds (nothing, the stored data, garbage), the
output is the same bytes; the folder is private; a folder that cannot be written is no error."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tracebench.formula import decode_template, encode_template, space_by_slot
from tracebench.library import default_library
from tracebench.sample import _quotas


def _trace(cache: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRACEBENCH_CACHE": str(cache)}
    return subprocess.run([sys.executable, "-m", "tracebench", *args], capture_output=True, text=True, env=env,
                          timeout=300)


@pytest.fixture()
def cache_root(tmp_path) -> Path:
    """A fresh cache root holding the default synthetic library (linked, not rebuilt)."""
    root = tmp_path / "cache"
    root.mkdir()
    library = default_library()
    (root / library.name).symlink_to(library, target_is_directory=True)
    return root


def test_compact_templates_read_back_to_the_same_templates():
    space = space_by_slot(range(1, 9))
    memo: dict = {}
    rng = random.Random(0)
    checked = 0
    for slot, templates in space.items():
        chosen = templates if len(templates) <= 3000 else rng.sample(templates, 3000)
        for template in chosen:
            code = encode_template(template, memo)
            assert encode_template(template) == code  # the memo changes nothing
            back = decode_template(code)
            assert back == template and encode_template(back) == code
            checked += 1
    assert checked > 10_000


@pytest.mark.parametrize("code", ["", "f f", "A1", "f A2", "f g C0", "f x", "g_ C1", "f g A1 A1", "C2"])
def test_a_malformed_compact_template_is_refused(code):
    with pytest.raises(ValueError):
        decode_template(code)


def test_encoding_refuses_bound_or_numbered_terms():
    from tracebench.formula import parse

    for text in ("f1", 'f(I1, "dog")', "C1(f, f)", 'T_e("a wizard") + g'):
        with pytest.raises(ValueError):
            encode_template(parse(text))


def test_stored_quota_flows_equal_the_solved_ones(monkeypatch, tmp_path):
    monkeypatch.setenv("TRACEBENCH_CACHE", str(tmp_path))
    problem = ([50, 30, 20], [60, 40, 0], {(0, 0), (0, 1), (1, 0), (1, 1), (2, 1)})
    solved = _quotas._joint_counts(*problem)
    assert _quotas._stored_joint_counts(*problem) == solved  # computed and stored
    assert list((tmp_path / "derived").glob("quota-joint-counts-*.json"))

    def unsolvable(*_):
        raise AssertionError("solved again instead of read back")

    monkeypatch.setattr(_quotas, "_joint_counts", unsolvable)
    assert _quotas._stored_joint_counts(*problem) == solved  # read back
    monkeypatch.undo()
    monkeypatch.setenv("TRACEBENCH_CACHE", str(tmp_path))
    impossible = ([2, 0, 0], [0, 2, 0], {(0, 0)})
    assert _quotas._joint_counts(*impossible) is None
    assert _quotas._stored_joint_counts(*impossible) is None
    assert _quotas._stored_joint_counts(*impossible) is None


def _sample(cache: Path, out: Path) -> bytes:
    result = _trace(cache, "sample", "--slots", "1-8", "--per-slot", "6", "--seed", "4", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return (out / "cases.jsonl").read_bytes()


def test_sampling_gives_the_same_bytes_cold_warm_and_from_a_damaged_folder(cache_root, tmp_path):
    cold = _sample(cache_root, tmp_path / "cold")
    derived = cache_root / "derived"
    assert derived.stat().st_mode & 0o777 == 0o700
    spaces = sorted(derived.glob("template-space-slot*.json"))
    assert len(spaces) == 8 and list(derived.glob("lark-*.pickle")) and list(derived.glob("quota-joint-counts-*"))
    stamps = {p: p.stat().st_mtime_ns for p in spaces}
    assert _sample(cache_root, tmp_path / "warm") == cold
    assert {p: p.stat().st_mtime_ns for p in spaces} == stamps  # read, not rewritten
    # a valid file of another slot level under slot 8's name, alone (nothing else rewrites it first)
    spaces[7].write_bytes(spaces[6].read_bytes())
    assert _sample(cache_root, tmp_path / "other-slot") == cold
    # damage every other kind of stored file: truncated, garbage
    spaces[0].write_bytes(spaces[0].read_bytes()[:-40])
    spaces[1].write_bytes(b"\x00not json")
    for path in derived.glob("lark-*.pickle"):
        path.write_bytes(b"garbage")
    for path in derived.glob("quota-joint-counts-*"):
        path.write_text('{"problem": [], "counts": [[0, 0, 99]]}')
    assert _sample(cache_root, tmp_path / "damaged") == cold
    assert _sample(cache_root, tmp_path / "repaired") == cold
    # a folder that cannot be made is no error: everything is computed in memory
    (cache_root / "derived").rename(cache_root / "moved")
    (cache_root / "derived").write_text("a file where the folder would go")
    assert _sample(cache_root, tmp_path / "without") == cold
    assert (cache_root / "derived").read_text() == "a file where the folder would go"


def test_the_stored_space_is_the_enumerated_one():
    """What sampling draws from (stored or classified on the spot) holds every template of
    the enumeration, each in its quota cell, in the enumeration's order."""
    for slot in (3, 6):
        space = _quotas.slot_space(slot)
        templates = space_by_slot([slot])[slot]
        assert len(space.codes) == len(templates)
        fresh = _quotas.SlotSpace.classify(templates)
        assert fresh.codes == space.codes and fresh.cells == space.cells and fresh.needs == space.needs
        assert _quotas.SlotSpace.from_json(fresh.to_json(slot), slot).cells == fresh.cells
        assert _quotas.SlotSpace.from_json(fresh.to_json(slot), slot + 1) is None  # another level's file
        for cell, positions in list(space.cells.items())[:5]:
            for p in positions[:20]:
                assert space.template(p) == templates[p]
                assert _quotas._cell(templates[p], {}) == cell


def test_a_library_is_checked_again_once_any_of_its_files_changes(cache_root, tmp_path):
    from library_helpers import make_library, sample_records

    library = make_library(tmp_path / "lib", sample_records())
    first = run_sample(cache_root, library, tmp_path / "one")
    assert first.returncode == 0, first.stderr
    assert len(list((cache_root / "derived").glob("library-valid-*"))) == 1  # remembered
    again = run_sample(cache_root, library, tmp_path / "two")  # remembered valid: the same benchmark
    assert again.returncode == 0 and (tmp_path / "one" / "cases.jsonl").read_bytes() == \
        (tmp_path / "two" / "cases.jsonl").read_bytes()
    image = sorted((library / "images").iterdir())[0]
    image.write_bytes(b"not an image any more")
    broken = run_sample(cache_root, library, tmp_path / "three")
    assert broken.returncode == 2 and "cannot read image" in broken.stderr and not (tmp_path / "three").exists()


def run_sample(cache: Path, library: Path, out: Path) -> subprocess.CompletedProcess:
    return _trace(cache, "sample", "--slots", "1-2", "--per-slot", "3", "--no-applications", "--library", str(library),
                  "--out", str(out))


def test_writing_a_derived_file_removes_old_files_of_its_name_only(monkeypatch, tmp_path):
    from tracebench import derived
    from tracebench.formula._grammar import build_lark

    monkeypatch.setenv("TRACEBENCH_CACHE", str(tmp_path / "cache"))
    folder = derived.derived_dir()
    month = derived.PRUNE_AFTER_DAYS * 86400
    old_key, recent_key = folder / f"space-slot1-{'a' * 24}.json", folder / f"space-slot1-{'b' * 24}.json"
    other_name = folder / f"space-slot10-{'c' * 24}.json"  # a name that starts alike
    longer_name = folder / f"space-slot1-extra-{'d' * 24}.json"
    half_written = folder / f"lark-{'e' * 24}.pickle.123.tmp"  # a process died writing it
    for path in (old_key, recent_key, other_name, longer_name, half_written):
        path.write_text("{}")
    for path in (old_key, other_name, longer_name, half_written):
        os.utime(path, (path.stat().st_atime - month - 60,) * 2)
    os.utime(recent_key, (recent_key.stat().st_atime - month + 3600,) * 2)

    derived.write_json("space-slot1", "f" * 64, {"x": 1})
    assert derived.read_json("space-slot1", "f" * 64) == {"x": 1}
    assert not old_key.exists()
    assert recent_key.exists() and other_name.exists() and longer_name.exists()

    build_lark()  # no tables in this folder yet: Lark writes them, renamed into place
    tables = list(folder.glob("lark-*.pickle"))
    assert len(tables) == 1 and tables[0].stat().st_mode & 0o777 == 0o600
    assert not half_written.exists() and not list(folder.glob("*.tmp"))
