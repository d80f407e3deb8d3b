"""What a cache key must depend on, what a resumed run must redo, and what each checklist question
declares: places where a wrong change once passed the tests unnoticed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracebench.cache import cache_key
from tracebench.operators import SCENE, Family, Operator, Role
from tracebench.providers import ModelSettings, make_generator, make_judge
from tracebench.records import Verdict
from tracebench.run import RunOptions, run_benchmark
from tracebench.sample import read_cases

SETTINGS = ModelSettings(max_retries=0, timeout=5.0)


@pytest.fixture(scope="module")
def bench(run_bench) -> Path:
    return run_bench  # tests/conftest.py: shared with tests/test_run.py


@pytest.fixture(scope="module")
def cases(bench):
    return list(read_cases(bench))


def _judge_key(judge, case, image: bytes, references=(b"ref",)) -> str:
    return cache_key(**judge.key(case, list(case.checklist), image, list(references)))


@pytest.mark.parametrize("spec", ["oracle", "openai:some-judge@http://127.0.0.1:9/v1"])
def test_a_judge_key_changes_with_the_generated_image_the_questions_and_the_references(cases, spec):
    judge = make_judge(spec, SETTINGS)
    case, other = cases[0], cases[1]
    key = _judge_key(judge, case, b"image one")
    assert _judge_key(judge, case, b"image one") == key  # a key is a function of its inputs
    assert _judge_key(judge, case, b"image two") != key
    assert cache_key(**judge.key(case, list(case.checklist)[:-1], b"image one", [b"ref"])) != key
    assert _judge_key(judge, other, b"image one") != key
    if spec != "oracle":  # the oracle reads the record the image carries, not the references
        assert _judge_key(judge, case, b"image one", (b"another ref",)) != key


def test_a_synthetic_generator_key_changes_with_the_profile_the_seed_and_the_case(cases):
    def key(spec: str, seed: int = 0, case=cases[0]) -> str:
        return cache_key(**make_generator(spec, ModelSettings(seed=seed)).key(case, [b"ref"]))

    base = key("synthetic:global-interference")
    assert key("synthetic:global-interference") == base
    assert key("synthetic:relation-blind") != base
    assert key("synthetic:global-interference,noise:0.1") != base
    assert key("synthetic:global-interference", seed=1) != base
    assert key("synthetic:global-interference", case=cases[1]) != base


def test_an_openai_generator_key_changes_with_the_prompt_and_the_references(cases):
    generator = make_generator("openai:some-model@http://127.0.0.1:9/v1", SETTINGS)
    base = cache_key(**generator.key(cases[0], [b"ref"]))
    assert cache_key(**generator.key(cases[0], [b"ref"])) == base
    assert cache_key(**generator.key(cases[0], [b"other ref"])) != base
    assert cache_key(**generator.key(cases[1], [b"ref"])) != base


def test_resume_does_not_count_a_half_written_case_as_done(bench, tmp_path):
    """A run killed between two of a case's lines: the lines of the unfinished case are dropped and
    the case is generated and judged again, to the same verdicts."""
    whole = run_benchmark(bench, tmp_path / "whole", RunOptions(generator="synthetic:noise:0.2", judges=["oracle"],
                          settings=SETTINGS, cache_dir=tmp_path / "cache-whole"))
    lines = (tmp_path / "whole" / "verdicts.jsonl").read_bytes().splitlines(keepends=True)
    last = Verdict.model_validate_json(lines[-1]).case_id
    first_of_last = next(k for k, line in enumerate(lines) if Verdict.model_validate_json(line).case_id == last)
    assert len(lines) - first_of_last >= 2
    run_benchmark(bench, tmp_path / "cut", RunOptions(generator="synthetic:noise:0.2", judges=["oracle"], settings=SETTINGS,
                  cache_dir=tmp_path / "cache-cut"))
    cut = lines[:first_of_last + 1]  # the last case's first line only, each line whole
    (tmp_path / "cut" / "verdicts.jsonl").write_bytes(b"".join(cut))
    (tmp_path / "cut" / "images" / f"{last}.png").unlink()
    for entry in (tmp_path / "cache-cut").rglob("*"):  # nothing cached: the case must really run again
        if entry.is_file():
            entry.unlink()
    again = run_benchmark(bench, tmp_path / "cut", RunOptions(generator="synthetic:noise:0.2", judges=["oracle"],
                          settings=SETTINGS, cache_dir=tmp_path / "cache-cut"))
    assert again.calls == {"synthetic:noise:0.2": 1, "oracle": 1}  # that case alone, generated and judged
    assert (tmp_path / "cut" / "verdicts.jsonl").read_bytes() == (tmp_path / "whole" / "verdicts.jsonl").read_bytes()
    assert again.cases == whole.cases


def test_each_question_declares_the_images_it_needs(cases):
    for case in cases:
        terms = {t.symbol: t for t in case.terms}
        for q in case.checklist:
            head = q.target.split("⊕")[-1] if q.op is Operator.APPLY else q.target
            term = terms.get(head)
            if q.aspect in ("identity",) or (q.op is Operator.DISENTANGLE and q.aspect not in ("carrier",)
                                             and not (term.role is Role.RELATION and q.aspect == "presence")):
                assert q.images == (term.image,), (case.id, q.id)  # the source image of its term
            elif q.op is Operator.COMPOSE and q.aspect.startswith("leakage"):
                inside = [t.image for t in case.terms if t.image]
                assert q.images and set(q.images) <= set(inside), (case.id, q.id)
                if q.target == SCENE:
                    assert q.images == tuple(dict.fromkeys(inside)), (case.id, q.id)  # every image of the scene
            elif q.op is Operator.APPLY and q.aspect == "exclusivity":
                assert q.images == (term.image,), (case.id, q.id)
            else:
                assert q.images == (), (case.id, q.id)  # asked of the generated image alone


def test_each_question_declares_its_dependencies(cases):
    seen = set()
    for case in cases:
        terms = {t.symbol: t for t in case.terms}
        for q in case.checklist:
            if q.op is Operator.ANCHOR:
                expected = () if q.aspect == "existence" else (f"{q.target}:existence",)
            elif q.op is Operator.DISENTANGLE:
                expected = () if q.aspect == "presence" else (f"{q.target}:presence",)
            elif q.op is Operator.APPLY:
                carrier, g = q.target.split("⊕")
                own = f"{g}:presence"
                if terms[g].role is Role.GLOBAL:
                    expected = (own,) if q.aspect == "consistency" else ()
                elif terms[g].role is Role.RELATION:
                    expected = (own,) if q.aspect == "binding" else ()
                elif q.aspect == "integrity":
                    expected = (f"{carrier}:existence",) if terms[carrier].op is Family.ANCHOR else ()
                else:
                    expected = (own,)
            else:
                members = [m for m in _members(case, q.target) if terms[m].op is Family.ANCHOR]
                expected = (tuple(f"{m}:existence" for m in members)
                            if q.aspect in ("coexistence", "relation") else ())
                if q.aspect == "relation":
                    relation = next(t for t in case.terms if t.role is Role.RELATION and t.carrier == q.target)
                    expected = tuple(f"{p}:existence" for p in relation.participants if terms[p].op is Family.ANCHOR)
            assert q.depends_on == expected, (case.id, q.id, q.depends_on, expected)
            seen.add((q.op, q.aspect))
    assert len(seen) >= 20  # every kind of question was met


def _members(case, composition: str) -> list[str]:
    """The entity symbols directly in a composition (as coexistence asks them), from the formula."""
    from tracebench.diagnose import compositions_of
    from tracebench.formula import parse

    if composition == SCENE:
        return [t.symbol for t in case.terms if t.role in (Role.ANCHOR, Role.TEXT)]
    return list(dict(((c, m) for c, m, _ in compositions_of(parse(case.formula))))[composition])


def test_a_placeholder_key_does_not_corrupt_replies():
    """Local servers take any key; a one-letter placeholder must not be scrubbed out of every reply
    (it turned the id C0:leakage_context into C0:leakage_conte***t, an abstention)."""
    from tracebench.providers import scrub

    reply = '{"answers": [{"id": "C0:leakage_context", "answer": "no", "reason": "not EMPTYING"}]}'
    assert scrub(reply, ("x",)) == reply and scrub(reply, ("EMPTY",)) == reply
    assert scrub("key sk-live-abcdefgh here", ("sk-live-abcdefgh",)) == "key *** here"
    # a short key is still hidden where it stands as a word, in any case, and in base64 from 6 bytes
    assert scrub("auth failed for key s3cr3t7 (S3CR3T7) / czNjcjN0Nw==", ("s3cr3t7",)) == \
           "auth failed for key *** (***) / ***w=="  # the base64 characters that depend on the key alone
    assert scrub("Bearer x", ("x",)) == "Bearer ***"
