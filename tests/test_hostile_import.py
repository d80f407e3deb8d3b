"""Hostile dataset folders: `trace import` of a folder downloaded from a stranger.

A dataset folder is data. Whatever it holds (a card that is not UTF-8, nested 100,000 deep or
megabytes long; a number of 6,000 digits; a reference path naming a folder; a node image named
with Arabic-Indic digits; an image whose bytes differ from what the card hashes; a cell of
hundreds of megabytes), the import is a result or one line naming the file and the field, exit
2, with nothing written. A rerun after a kill past the final rename finds its output complete.

One small export of each kind (a benchmark; a run with its diagnosis, node images included) is
made once per session and copied per test; the crafted folders are edits of those copies."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_cli import run_trace
from test_hostile_files import _one_line_error
from tracebench.errors import TraceError
from tracebench.providers import ModelSettings
from tracebench.share import export_folder, import_dataset

GENERATOR = "synthetic:global-interference,composition-interference:2"  # fails some cases: trees to diagnose


@pytest.fixture(scope="module")
def made(shared_folder) -> Path:
    """A benchmark (slot level 3, two cases), a run of it with failures, its adaptive diagnosis and
    their exports: ``export-bench`` and ``export-run`` (with the diagnosis). Read only."""

    def make(root: Path) -> None:
        from tracebench.diagnose import DiagnoseOptions, diagnose_run
        from tracebench.run import RunOptions, run_benchmark
        from tracebench.sample import SampleOptions, sample_benchmark

        sample_benchmark(root / "bench", SampleOptions(slots=(3,), per_slot=2, seed=3, applications=False))
        run_benchmark(root / "bench", root / "run", RunOptions(generator=GENERATOR, judges=["oracle"], progress=False))
        diagnose_run(root / "run", root / "diag", DiagnoseOptions(strategy="adaptive", progress=False,
                     settings=ModelSettings(max_retries=0, timeout=30.0)))
        export_folder(root / "bench", root / "export-bench")
        export_folder(root / "run", root / "export-run", diagnosis=root / "diag")

    return shared_folder("hostile-import", make)


def _copy(made: Path, kind: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(made / f"export-{kind}", tmp_path / "export"))


def _shard(export: Path) -> Path:
    (shard,) = (export / "data").glob("*.parquet")
    return shard


def _edit_rows(export: Path, edit) -> None:
    """Rewrite the export's one shard with ``edit(rows)`` applied (the same schema)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(_shard(export))
    rows = table.to_pylist()
    edit(rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), _shard(export))


def _edit_card(export: Path, old: str, new: str) -> None:
    card = export / "README.md"
    text = card.read_text(encoding="utf-8")
    assert old in text, old
    card.write_text(text.replace(old, new, 1), encoding="utf-8")


def _refused(export: Path, tmp_path: Path, fragment: str) -> str:
    """`trace import EXPORT` is one line holding ``fragment``, exit 2, and writes nothing."""
    line = _one_line_error(run_trace("import", str(export), "--out", str(tmp_path / "back")), fragment)
    assert not (tmp_path / "back").exists() and not list(tmp_path.glob(".back.*")), list(tmp_path.iterdir())
    return line


def _node_image(rows: list[dict]) -> dict:
    return next(image for row in rows for image in row["node_images"] or [])


def _set_node_path(path: str):
    def edit(rows: list[dict]) -> None:
        _node_image(rows)["path"] = path
    return edit


def _set_reference_path(path: str):
    def edit(rows: list[dict]) -> None:
        rows[0]["references"][0]["path"] = path
    return edit


# --------------------------------------------------------------------------- 1. crafted rows and cards

@pytest.mark.parametrize("path", [".", "references", "references/", "cases.jsonl", "manifest.json/x.png"])
def test_a_reference_path_naming_a_folder_or_another_file_is_one_line(made, tmp_path, path):
    export = _copy(made, "bench", tmp_path)
    _edit_rows(export, _set_reference_path(path))
    line = _refused(export, tmp_path, "row 1: references[0].path")
    assert "data/test-00000-of-00001.parquet" in line


def test_a_node_image_path_ending_in_images_dot_is_one_line(made, tmp_path):
    export = _copy(made, "run", tmp_path)
    _edit_rows(export, _set_node_path("rounds/01/run/images/."))
    _refused(export, tmp_path, "node_images[0]")


def test_a_card_that_is_not_utf8_is_one_line_naming_its_line(made, tmp_path):
    export = _copy(made, "bench", tmp_path)
    card = export / "README.md"
    card.write_bytes(card.read_bytes().replace(b"pretty_name: tracebench", b"pretty_name: \xfftracebench", 1))
    _refused(export, tmp_path, "README.md:2: not UTF-8 text")


@pytest.mark.parametrize("nested", ["[" * 100_000 + "]" * 100_000,
                                    "{a: " * 100_000 + "1" + "}" * 100_000])
def test_a_card_nested_100000_deep_is_one_line(made, tmp_path, nested):
    """libyaml's scanner stops a flow nest at 1,000 levels; the walk of the events at 32, with
    either parser (pure Python's would take minutes over the whole nest)."""
    export = _copy(made, "bench", tmp_path)
    _edit_card(export, "pretty_name: tracebench benchmark", f"pretty_name: {nested}")
    line = _refused(export, tmp_path, "README.md:2: ")
    assert "nested deeper than 32 levels" in line or "exceeded maximum nesting depth" in line


def test_a_6000_digit_number_on_the_card_is_one_line_naming_its_field(made, tmp_path):
    export = _copy(made, "bench", tmp_path)
    _edit_card(export, "  format: ", "  format: " + "9" * 6000)
    _refused(export, tmp_path, "tracebench.format: a number of 6,001 characters")


def test_an_alias_on_the_card_is_one_line(made, tmp_path):
    """YAML aliases make a few lines a structure that grows exponentially once written out
    (billion laughs); a card of trace export has none."""
    export = _copy(made, "bench", tmp_path)
    _edit_card(export, "pretty_name: tracebench benchmark", "pretty_name: &a [x, x]\nlicense_note: [*a, *a]")
    _refused(export, tmp_path, "license_note[0]: an alias")


# --------------------------------------------------------------------------- 2. bounded reads

def test_a_card_over_the_limit_is_refused_by_its_size_before_it_is_parsed(made, tmp_path, monkeypatch):
    from tracebench.share import _limits

    export = _copy(made, "bench", tmp_path)
    card = export / "README.md"
    with open(card, "a", encoding="utf-8") as handle:
        handle.write("x" * (_limits.MAX_CARD_BYTES - card.stat().st_size + 1))
    monkeypatch.setattr("yaml.safe_load", None)  # never reached: the size refuses it first
    with pytest.raises(TraceError, match=r"README.md: \d[\d,]* bytes, more than a dataset card may hold"):
        import_dataset(export, tmp_path / "back")
    assert not (tmp_path / "back").exists()


def test_a_shard_that_is_a_pipe_is_refused_not_waited_on(made, tmp_path):
    export = _copy(made, "bench", tmp_path)
    shard = _shard(export)
    shard.unlink()
    os.mkfifo(shard)
    _one_line_error(run_trace("import", str(export), "--out", str(tmp_path / "back"), timeout=30),
                    "test-00000-of-00001.parquet: not a regular file")


def _big_reference(size: int):
    """An edit making the first reference image ``size`` bytes (every row naming its path)."""
    def edit(rows: list[dict]) -> None:
        path = rows[0]["references"][0]["path"]
        for row in rows:
            for ref, image in zip(row["references"], row["reference_images"]):
                if ref["path"] == path:
                    image["bytes"] = b"\x89PNG" + bytes(size - 4)
    return edit


def test_an_image_cell_over_the_limit_is_refused_naming_the_column(made, tmp_path, monkeypatch):
    from tracebench.share import _limits

    monkeypatch.setattr(_limits, "MAX_IMAGE_BYTES", 100_000)
    export = _copy(made, "bench", tmp_path)
    _edit_rows(export, _big_reference(100_001))
    with pytest.raises(TraceError, match=r"reference_images\.bytes: a value of 100,001 bytes, more than"):
        import_dataset(export, tmp_path / "back")
    assert not (tmp_path / "back").exists()


def test_a_string_over_the_limit_is_refused_naming_the_field(made, tmp_path, monkeypatch):
    from tracebench.share import _limits

    monkeypatch.setattr(_limits, "MAX_STRING_BYTES", 10_000)
    export = _copy(made, "run", tmp_path)
    _edit_rows(export, lambda rows: rows[1]["verdicts"][0]["votes"][0].update(reason="x" * 10_001))
    with pytest.raises(TraceError, match=r"verdicts\.votes\.reason: a value of 10,001 bytes, more than"):
        import_dataset(export, tmp_path / "back")


def test_a_row_group_over_the_limit_is_refused_from_the_footer_before_it_is_read(made, tmp_path, monkeypatch):
    from tracebench.share import _limits

    monkeypatch.setattr(_limits, "MAX_ROW_GROUP_BYTES", 1_000_000)
    export = _copy(made, "bench", tmp_path)
    _edit_rows(export, _big_reference(1_000_000))
    monkeypatch.setattr("pyarrow.parquet.ParquetFile.iter_batches", None)  # never reached
    with pytest.raises(TraceError, match=r"row group 0: \d[\d,]* bytes .*more than"):
        import_dataset(export, tmp_path / "back")


def test_a_shard_with_other_columns_is_refused_before_its_rows_are_read(made, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    export = _copy(made, "bench", tmp_path)
    table = pq.read_table(_shard(export))
    deep = pa.array([[[[1]]]] * table.num_rows)
    pq.write_table(table.append_column("extra", deep), _shard(export))
    _refused(export, tmp_path, "column extra: not a column of a trace export")


def test_an_export_keeps_its_row_groups_within_what_import_reads(made, tmp_path, monkeypatch):
    """Rows are grouped by bytes as well as by count: an export of large images stays importable."""
    import pyarrow.parquet as pq

    from tracebench.share import _limits

    monkeypatch.setattr(_limits, "MAX_ROW_GROUP_BYTES", 200_000)  # the export aims at 7/8: one row a group
    export_folder(made / "bench", tmp_path / "export")
    assert pq.ParquetFile(_shard(tmp_path / "export")).metadata.num_row_groups == 2
    import_dataset(tmp_path / "export", tmp_path / "back")


@pytest.mark.parametrize("limit, message", [("MAX_IMAGE_BYTES", r"reference_images\.bytes: a value of"),
                                            ("MAX_ROW_GROUP_BYTES", "a row of")])
def test_an_export_refuses_a_row_the_import_would_refuse_naming_its_case(made, tmp_path, monkeypatch, limit, message):
    from tracebench.share import _limits

    monkeypatch.setattr(_limits, limit, 20_000)
    with pytest.raises(TraceError, match=rf"bench: case s3-0000\d: {message}"):
        export_folder(made / "bench", tmp_path / "export")
    assert not (tmp_path / "export").exists() and not list(tmp_path.glob(".export.*"))


# --------------------------------------------------------------------------- 3. ASCII digits only

@pytest.mark.parametrize("path", ["rounds/\u0660\u0661/run/images/x.png", "rounds/01/run-\u0661/images/x.png",
                                  "external/\u0967/images/x.png"])
def test_a_node_folder_named_with_other_digits_is_one_line(made, tmp_path, path):
    export = _copy(made, "run", tmp_path)
    _edit_rows(export, _set_node_path(path))
    _refused(export, tmp_path, "node_images[0]")


# --------------------------------------------------------------------------- 4. the card hashes every file

def test_reference_bytes_other_than_the_card_hashes_are_refused(made, tmp_path):
    export = _copy(made, "bench", tmp_path)
    _edit_rows(export, _big_reference(1000))  # the same new bytes in every row: only the card can tell
    _refused(export, tmp_path, "differ from tracebench.content.benchmark")


def test_a_node_image_other_than_the_card_hashes_is_refused(made, tmp_path):
    export = _copy(made, "run", tmp_path)
    _edit_rows(export, lambda rows: _node_image(rows).update(bytes=b"\x89PNG other"))
    _refused(export, tmp_path, "differ from tracebench.content.run")


def test_an_export_of_an_older_format_is_refused_saying_to_export_again(made, tmp_path):
    export = _copy(made, "bench", tmp_path)
    _edit_card(export, "  format: 2", "  format: 1")
    _refused(export, tmp_path, "export the folder again")


# --------------------------------------------------------------------------- 5. a rerun after the final rename

def test_an_import_rerun_over_its_complete_output_is_already_complete(made, tmp_path):
    export = made / "export-run"
    first = run_trace("import", str(export), "--out", str(tmp_path / "back"))
    assert first.returncode == 0, first.stderr
    again = run_trace("import", str(export), "--out", str(tmp_path / "back"))
    assert again.returncode == 0 and "already complete" in again.stdout, again.stderr
    assert not list(tmp_path.glob(".back.*"))
    next((tmp_path / "back" / "images").glob("*.png")).write_bytes(b"other")
    _one_line_error(run_trace("import", str(export), "--out", str(tmp_path / "back")), "already exists")
    assert not list(tmp_path.glob(".back.*"))


def test_an_export_rerun_over_its_complete_output_is_already_complete(made, tmp_path):
    out = tmp_path / "export"
    shutil.copytree(made / "export-bench", out)
    again = run_trace("export", str(made / "bench"), "--out", str(out))
    assert again.returncode == 0 and "already complete" in again.stdout, again.stderr
    other = run_trace("export", str(made / "run"), "--out", str(out))  # another folder's export: refused
    _one_line_error(other, "already exists")
    assert not list(tmp_path.glob(".export.*"))


def test_an_import_into_a_folder_of_something_else_is_refused_at_once(made, tmp_path):
    (tmp_path / "back").mkdir()
    (tmp_path / "back" / "notes.txt").write_text("mine")
    _one_line_error(run_trace("import", str(made / "export-bench"), "--out", str(tmp_path / "back")),
                    "already exists")
    assert (tmp_path / "back" / "notes.txt").read_text() == "mine"


# --------------------------------------------------------------------------- 6. fuzzing: a result or one line

FUZZ = settings(max_examples=max(8, settings.default.max_examples // 8), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large])
YAMLISH = st.lists(st.sampled_from(list("ab01 -:?[]{},&*!|>'\"#%@`\n\t.\u0660\u00e9~")
                                   + ["!!int ", "!!binary ", "tracebench", "format", "9" * 5000]),
                   max_size=40).map("".join)
PATHY = st.lists(st.sampled_from(list("./\\~_-a0\u0661\u00e9 :") + ["..", "images/", "rounds/", "external/", "run/",
                                                                   "references/", "\x00"]), max_size=12).map("".join)


def _imports_or_refuses(export: Path, **options) -> None:
    """import_dataset in this process: a result or a TraceError, nothing else; nothing half-written."""
    out = export.parent / "back"
    try:
        import_dataset(export, out, **options)
    except TraceError as error:
        assert "\n" not in str(error), str(error)
        assert not out.exists() and not list(export.parent.glob(".back.*"))
    else:
        shutil.rmtree(out)


def _fuzzed(made: Path, kind: str):
    """A fresh copy of an export in a temporary folder (Hypothesis runs many examples a test)."""
    folder = tempfile.TemporaryDirectory(prefix="fuzz-")
    return folder, _copy(made, kind, Path(folder.name))


def _card_section(made: Path, kind: str) -> tuple[str, dict]:
    import yaml

    text = (made / f"export-{kind}" / "README.md").read_text(encoding="utf-8")
    return text, yaml.safe_load(text[4:text.index("\n---\n", 3)])


def _jsonish():
    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                          max_size=4), max_leaves=20)


@FUZZ
@given(data=st.data())
def test_fuzzed_card_headers_give_a_result_or_one_line(made, data):
    import yaml

    kind = data.draw(st.sampled_from(["bench", "run"]))
    text, header = _card_section(made, kind)
    how = data.draw(st.sampled_from(["raw", "field", "bytes"]))
    if how == "raw":  # any YAML-looking text as the header, or spliced into it
        at = data.draw(st.integers(0, len(text)))
        card = (text[:at] + data.draw(YAMLISH) + text[at:]).encode()
    elif how == "field":  # a field of the tracebench section with any JSON-like value
        section = header["tracebench"]
        parent = data.draw(st.sampled_from([section] + [v for v in section.values() if isinstance(v, dict)]))
        key = data.draw(st.sampled_from(sorted(parent) + ["content", "rounds", "diagnosis", "extra"]))
        parent[key] = data.draw(_jsonish())
        card = ("---\n" + yaml.safe_dump(header, allow_unicode=True) + "---\n").encode()
    else:  # bytes, UTF-8 or not
        at = data.draw(st.integers(0, len(text)))
        card = text[:at].encode() + data.draw(st.binary(max_size=8)) + text[at:].encode()
    folder, export = _fuzzed(made, kind)
    with folder:
        (export / "README.md").write_bytes(card)
        _imports_or_refuses(export)


def _arrow_values(kind):
    """Any value a column of Arrow type ``kind`` holds (null included)."""
    import pyarrow as pa

    if pa.types.is_struct(kind):
        value = st.fixed_dictionaries({kind.field(k).name: _arrow_values(kind.field(k).type)
                                       for k in range(kind.num_fields)})
    elif pa.types.is_list(kind):
        value = st.lists(_arrow_values(kind.value_type), max_size=3)
    elif pa.types.is_integer(kind):
        value = st.integers(-(2 ** 63), 2 ** 63 - 1)
    elif pa.types.is_floating(kind):
        value = st.floats()
    elif pa.types.is_boolean(kind):
        value = st.booleans()
    elif pa.types.is_binary(kind):
        value = st.binary(max_size=16)
    else:
        value = st.text(max_size=12) | PATHY
    return st.none() | value


@FUZZ
@given(data=st.data())
def test_fuzzed_rows_give_a_result_or_one_line(made, data):
    import pyarrow as pa
    import pyarrow.parquet as pq

    kind = data.draw(st.sampled_from(["bench", "run"]))
    folder, export = _fuzzed(made, kind)
    with folder:
        table = pq.read_table(_shard(export))
        rows = table.to_pylist()
        for _ in range(data.draw(st.integers(1, 3))):  # a column of a row, any value its type holds
            column = data.draw(st.sampled_from(table.schema.names))
            row = data.draw(st.integers(0, len(rows) - 1))
            rows[row][column] = data.draw(_arrow_values(table.schema.field(column).type))
        pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), _shard(export))
        _imports_or_refuses(export)


PLACES = {  # where a row names a file: (column, the path's place in it)
    "reference": lambda row, path: row["references"][0].update(path=path),
    "generated": lambda row, path: row["generated_image"] and row["generated_image"].update(path=path),
    "node": lambda row, path: row["node_images"] and row["node_images"][0].update(path=path),
    "node-file": lambda row, path: row["node_images"] and row["node_images"][0].update(
        path=f"rounds/01/run/images/{path}"),
}


@FUZZ
@given(data=st.data())
def test_fuzzed_paths_give_a_result_or_one_line(made, data):
    place = data.draw(st.sampled_from(sorted(PLACES)))
    path = data.draw(PATHY | st.sampled_from([".", "..", "references", "cases.jsonl", "manifest.json", "images/.",
                                             "rounds/\u0661/run/images/x.png", "run.json", "/etc/x", "a" * 300]))
    folder, export = _fuzzed(made, "run")
    with folder:
        _edit_rows(export, lambda rows: [PLACES[place](row, path) for row in rows])
        _imports_or_refuses(export)
