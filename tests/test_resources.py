"""The declarative folders are found through one loader, installed or in a checkout."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tracebench.resources import FOLDERS, data_dir, data_hash, read_toml


def test_every_data_folder_is_reachable():
    for folder in FOLDERS:
        assert data_dir(folder).is_dir(), folder
    assert (data_dir("grammar") / "trace.lark").is_file()
    assert "kinds" in read_toml("taxonomy", "kinds.toml")


def test_unknown_folder_is_refused():
    with pytest.raises(KeyError):
        data_dir("nope")


def test_data_hash_changes_with_content_and_names():
    a = data_hash(("grammar", "trace.lark"))
    assert a == data_hash(("grammar", "trace.lark"))
    assert a != data_hash(("grammar", "language.toml"))


def test_loader_does_not_depend_on_the_working_directory(tmp_path):
    code = "from tracebench.formula import parse, slot_count; print(slot_count(parse('C(f1, f2) + g_style')))"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "3"
