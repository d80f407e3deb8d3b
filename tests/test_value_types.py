"""The small value types own their rules: every answer scale is one registry entry (tracebench.scales)
and every other string-typed vocabulary one enum, and whatever names them (the CLI's choices, the
settings check, the record fields, the judge's schema and text, the oracle, trace serve) asks
them. Parametrised over the registry and the enums, so a new member is covered without a new test."""

from __future__ import annotations

import ast
import base64
import json
import typing
import urllib.error
import urllib.request
from enum import StrEnum
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

import tracebench
from tracebench.cli import build_parser
from tracebench.errors import TraceError
from tracebench.operators import Family, Operator, Role
from tracebench.outcomes import ENSEMBLES, FAILED, PASSED, Ensemble, Status, combine
from tracebench.providers import ModelSettings, make_judge
from tracebench.records import Case, DiagnosisManifest, Executor, JudgeBatch, Question, RunManifest, Vote, executor_of, \
    read_cases, read_verdicts
from tracebench.resources import data_path
from tracebench.scales import DEFAULT_SCALE, KINDS, SCALE_HEADER, STATES, Scale, ScaleSpec, answer_scale, answers, \
    kind_of, normalize, outcome, recorded_scale, register_scale, scale_names, scale_of_answers, spec_of, \
    truth_answer, unregister_scale

ENUMS: tuple[type[StrEnum], ...] = (Ensemble, JudgeBatch, Executor, Role, Family, Operator, Status)
CLI_CHOICES = {"--scale": lambda: scale_names(), "--ensemble": lambda: tuple(Ensemble),
               "--judge-batch": lambda: tuple(JudgeBatch), "--executor": lambda: tuple(Executor)}


def _q(expected: str = "yes", aspect: str = "identity", op: str = "anchor") -> Question:
    return Question(id=f"f1:{aspect}", op=op, target="f1", aspect=aspect, question="Is it?", expected=expected)


def _choices(flag: str) -> dict[str, tuple[str, ...]]:
    """Command -> the choices of its ``flag``, from the real parser."""
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    return {name: tuple(action.choices) for name, sub in commands.items() for action in sub._actions
            if flag in action.option_strings and action.choices is not None}


# ------------------------------------------------------------------------------ every registered scale

@pytest.mark.parametrize("name", scale_names())
@pytest.mark.parametrize("expected", ["yes", "no"])
def test_every_scale_tells_the_truth_of_each_state(name, expected):
    spec = spec_of(name)
    q = _q(expected, "leakage" if expected == "no" else "identity", "compose" if expected == "no" else "anchor")
    if kind_of(name, q) != name:
        pytest.skip(f"{name} does not grade this question")  # tiers: anchor identity only, which expects yes
    values = {state: outcome(name, truth_answer(name, q, state), q).value for state in STATES}
    partial = spec.values[spec.answers.index(spec.truth[1])]
    assert values == {"holds": 1.0, "partial": partial, "broken": 0.0}
    assert (0.0 < partial < 1.0) == spec.graded
    assert all(outcome(name, a, q).passed == (spec.value(a, q) > 0.5) for a in spec.answers)


@pytest.mark.parametrize("name", scale_names())
def test_every_answer_reads_back_as_itself(name):
    spec = spec_of(name)
    for answer in spec.answers:
        assert normalize(name, answer) == answer and normalize(name, f" {answer.upper()} ") == answer
        if spec.numeric:
            assert normalize(name, float(answer)) == answer
    assert normalize(name, "none of these") is None and normalize(name, True) is None
    assert all(answer in spec.other_than for answer in spec.answers)
    assert KINDS[name] == spec.answers and Scale(name).spec is spec and Scale(name) is Scale(str(name))


@pytest.mark.parametrize("name", scale_names())
def test_every_scale_is_a_choice_a_setting_a_record_and_a_judge_text(name):
    assert all(name in choices for choices in _choices("--scale").values())
    assert ModelSettings(scale=name).scale == name
    recorded = recorded_scale(name)
    assert (recorded is None) == (Scale(name) is DEFAULT_SCALE)
    manifest = RunManifest.model_validate(_run_manifest(scale=recorded))
    assert manifest.answer_scale is Scale(name) and ("scale" in manifest.model_dump_json()) == (recorded is not None)
    enum = RunManifest.model_json_schema()["properties"]["scale"]["anyOf"][0]["enum"]
    assert (name in enum) == (recorded is not None)
    for answer in spec_of(name).answers:
        assert Vote(judge="j", verdict="pass", value=1.0, answer=answer).answer == answer
    judge = make_judge("openai:m@http://127.0.0.1:9/v1", ModelSettings(scale=name))
    q = _q()
    text = judge.prompt_text(_case(q), [q])
    instruction, suffix = spec_of(kind_of(name, q)).text()
    assert name == DEFAULT_SCALE or (instruction in text and suffix in text)
    assert f'"{answers(name, q)[0]}"' in text or name == DEFAULT_SCALE


def test_a_record_names_only_a_registered_scale_as_a_literal_would():
    with pytest.raises(ValidationError, match=r"Input should be 'ternary' or 'tiers'"):
        RunManifest.model_validate(_run_manifest(scale="binary"))  # the default is left out, never written
    with pytest.raises(ValidationError, match=r"scale\n  Input should be"):
        DiagnosisManifest.model_validate({**_diagnosis_manifest(), "scale": "five"})
    with pytest.raises(TraceError, match=r"--scale: 'five' is not binary, ternary or tiers"):
        ModelSettings(scale="five")
    with pytest.raises(ValueError, match="'five' is not a valid Scale"):
        answer_scale("five")
    assert answer_scale(None) is DEFAULT_SCALE


def _run_manifest(**fields) -> dict:
    return {"tool": "t", "cases_dir": "b", "cases_hash": "h", "generator": "g", "judges": ["oracle"],
            "judge_batch": "case", "hashes": {}, "cases": 0, "verdicts": 0, "calls": {}, "cache_hits": 0,
            "abstentions": 0, "tokens": 0, **fields}


def _diagnosis_manifest() -> dict:
    return {"tool": "t", "run_dir": "r", "cases_dir": "b", "cases_hash": "h", "generator": "g", "judges": ["oracle"],
            "judge_batch": "case", "strategy": "full", "cases": "all", "roots_from_run": True, "hashes": {}}


def _case(*checklist: Question) -> Case:
    return Case(id="c", slot=1, template="f", formula='f1(I1, "a cat")', prompt="p", text_only_prompt="p",
                scene="{member}", references=(), terms=(), checklist=checklist)


# ------------------------------------------------------------------------------ every member of each enum

@pytest.mark.parametrize("member", list(Ensemble))
def test_every_ensemble_combines_and_the_scales_default_to_one(member):
    assert ENSEMBLES[member] is ENSEMBLES[member.value]
    assert combine(member, [PASSED, PASSED, FAILED]).passed and combine(member, [FAILED]) is FAILED
    assert set(ENSEMBLES) == set(Ensemble) and all(spec_of(n).ensemble in Ensemble for n in scale_names())


@pytest.mark.parametrize("member", list(Executor))
def test_every_executor_is_taken_and_another_refused_in_one_line(member):
    assert executor_of(str(member)) is member
    with pytest.raises(TraceError, match=r"^--executor: 'cloud' is neither local nor ray$"):
        executor_of("cloud")


@pytest.mark.parametrize("flag", sorted(CLI_CHOICES))
def test_the_cli_choices_are_the_vocabulary(flag):
    found = _choices(flag)
    assert found, f"no command takes {flag}"
    for command, choices in found.items():
        assert choices == tuple(str(v) for v in CLI_CHOICES[flag]()), (command, flag)


@pytest.mark.parametrize("member", [m for enum in ENUMS for m in enum], ids=lambda m: f"{type(m).__name__}.{m.name}")
def test_every_member_is_its_own_text(member):
    assert type(member)(str(member)) is member and json.dumps(member) == json.dumps(member.value)


def _literals(annotation) -> list[tuple[str, ...]]:
    """Every ``Literal[...]`` inside a field's annotation (through unions, Annotated, containers)."""
    if typing.get_origin(annotation) is typing.Literal:
        return [tuple(typing.get_args(annotation))]
    return [found for arg in typing.get_args(annotation) for found in _literals(arg)]


def _record_models() -> list[type[BaseModel]]:
    """The pydantic models of the record modules, and the models their fields hold."""
    import tracebench.records
    import tracebench.report
    import tracebench.score
    from tracebench.library import _models

    seen: dict[type, None] = {}
    for module in (tracebench.records, tracebench.report, tracebench.score, _models):
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BaseModel) and value is not BaseModel:
                seen.setdefault(value)
    return list(seen)


def _vocabularies() -> dict[str, tuple[str, ...]]:
    return {"scale": scale_names(), "expected answer": KINDS[DEFAULT_SCALE],
            **{enum.__name__: tuple(str(m) for m in enum) for enum in ENUMS}}


# fields whose Literal is a chosen part of a vocabulary (each of its names still a member)
PARTS = {"Entity.usable_as": "Role"}  # the roles a whole tagged entity may take: attach, ip


def _literal_mismatches(models) -> list[str]:
    """A Literal over a vocabulary (inside it, or sharing two of its names) that is not the vocabulary
    (of a field of :data:`PARTS`: not inside it)."""
    out = []
    for model in models:
        for name, field in model.model_fields.items():
            for literal in _literals(field.annotation):
                for vocabulary, names in _vocabularies().items():
                    inside, shared = set(literal) <= set(names), len(set(literal) & set(names))
                    if PARTS.get(f"{model.__name__}.{name}") == vocabulary:
                        wrong = not inside
                    else:
                        wrong = (inside or shared > 1) and set(literal) != set(names)
                    if wrong:
                        out.append(f"{model.__name__}.{name}: {literal} is not the {vocabulary}s {names}")
    return out


def test_no_record_literal_differs_from_its_vocabulary():
    assert len(_record_models()) > 20
    assert _literal_mismatches(_record_models()) == []

    class Stale(BaseModel):  # what records.py held before the registry: the check sees it
        scale: typing.Literal["ternary", "tiers"] | None = None
        batch: typing.Literal["case"] = "case"

    assert len(_literal_mismatches([Stale])) == 2


# ------------------------------------------------------------------------------ roles and families by their enums

# A member's text a name holds without holding the member: a g kind (``node.kind == "global"``), a formula's
# spelling of a symbol (``token == "f"``), a checklist aspect (``aspect == "relation"``), a zoo load
# (``mode.load == "global"``), a MIME type or a template part (``"text"``). Any other name compared with a
# member's text is a Role, Family or Operator spelled as a bare string.
NOT_THE_VOCABULARY = frozenset({"kind", "stem", "spelled", "token", "aspect", "load", "get_content_maintype", "type",
                                "part"})
MEMBER_TEXTS = frozenset(member.value for enum in (Role, Family, Operator) for member in enum)
_COMPARISONS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot)


def _spelled(node: ast.expr) -> set[str]:
    """The strings a literal operand spells: ``"g"``, ``("attach", "ip")``, ``{"global"}``."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}


def _subject(node: ast.expr) -> str:
    """The name a compared operand reads: ``t.role`` -> role, ``next(roles)`` -> roles, ``part.get("type")`` -> type."""
    while True:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            return node.attr
        if isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Name) and node.func.id == "next":
            node = node.args[0]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            return str(node.args[0].value)
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            return ""


def _bare_member_comparisons(source: str, name: str = "<source>") -> list[str]:
    """``file:line: comparison`` for each comparison of a name with a Role/Family/Operator text."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, operands, operands[1:]):
            for literal, other in ((left, right), (right, left)):
                if isinstance(op, _COMPARISONS) and _spelled(literal) & MEMBER_TEXTS \
                        and _subject(other) not in NOT_THE_VOCABULARY:
                    out.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_no_module_compares_a_role_family_or_operator_to_a_bare_string():
    package = Path(tracebench.__file__).parent
    found = [hit for path in sorted(package.rglob("*.py")) if path.name != "operators.py"
             for hit in _bare_member_comparisons(path.read_text(encoding="utf-8"), str(path.relative_to(package)))]
    assert found == [], "compare with the enum members of tracebench.operators"


@pytest.mark.parametrize("code,bare", [
    ('t.role == "global"', True), ('t.op in ("f", "g")', True), ('next(roles) == "relation"', True),
    ('roles == {"global"}', True), ('"anchor" != role', True), ('op == "compose"', True),
    ("t.role == Role.GLOBAL", False), ('node.kind in ("attach", "ip")', False), ('token == "f"', False),
    ('aspect == "relation"', False), ('t.role == "scene"', False)])
def test_the_bare_string_check_sees_a_bare_member(code, bare):
    assert bool(_bare_member_comparisons(code)) is bare


# ------------------------------------------------------------------------------ a scale added at run time

# A 5-point Likert scale, not shipped: the whole change is this registry entry and its text.
LIKERT_TEXT = ('Grade every question as it is asked from "5" (it fully holds) through "3" (it partly holds, or you '
               'cannot tell) to "1" (it does not hold).', "(answer 5, 4, 3, 2 or 1)")
LIKERT = ScaleSpec("likert5", ("5", "4", "3", "2", "1"), (1.0, 0.75, 0.5, 0.25, 0.0), ("5", "3", "1"),
                   instruction=LIKERT_TEXT[0], suffix=LIKERT_TEXT[1])


@pytest.fixture
def likert():
    assert LIKERT.name not in scale_names()
    scale = register_scale(LIKERT)
    try:
        yield scale
    finally:
        unregister_scale(LIKERT.name)


@pytest.fixture(scope="module")
def bench(shared_folder) -> Path:
    from tracebench.sample import SampleOptions, sample_benchmark

    options = SampleOptions(slots=(1, 2, 3), per_slot=6, seed=5, applications=False)
    return shared_folder("value-types-bench", lambda out: sample_benchmark(out, options))


def test_a_scale_registered_at_run_time_scores_alike_in_process_and_served(likert, bench, tmp_path, monkeypatch):
    from tracebench.run import RunOptions, run_benchmark
    from tracebench.score import score_run
    from tracebench.serve import ZooServer

    source = [p for p in Path(tracebench.__file__).parent.rglob("*.py")] + [data_path("templates", "judge/scales.toml")]
    assert not [p for p in source if LIKERT.name in p.read_text(encoding="utf-8")]  # nothing shipped names it
    assert all(LIKERT.name in choices for choices in _choices("--scale").values())
    settings = ModelSettings(max_retries=0, timeout=30.0, scale=LIKERT.name)
    run_benchmark(bench, tmp_path / "here", RunOptions(generator="synthetic:partial:0.6", judges=["oracle"],
                                                       settings=settings))
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    with ZooServer([bench]).start() as server:
        served = ModelSettings(base_url=server.base_url, max_retries=0, timeout=30.0, scale=LIKERT.name)
        run_benchmark(bench, tmp_path / "served", RunOptions(generator="openai:synthetic/partial:0.6",
                                                             judges=["openai:oracle"], settings=served, concurrency=2))
    here, there = (_verdicts(tmp_path / name) for name in ("here", "served"))
    assert here == there and ("fail", 0.5) in here.values()  # a partly met requirement: Likert "3"
    assert {vote.answer for v in read_verdicts(tmp_path / "served") for vote in v.votes} <= set(LIKERT.answers)
    mine, theirs = score_run(tmp_path / "here"), score_run(tmp_path / "served")
    assert (mine.operators, mine.avg, mine.by_slot) == (theirs.operators, theirs.avg, theirs.by_slot)
    assert RunManifest.model_validate_json((tmp_path / "served" / "run.json").read_text()).answer_scale is likert
    assert scale_of_answers(set(LIKERT.answers)) is Scale.TERNARY  # what a request without the header is taken for


def _verdicts(run: Path) -> dict[tuple[str, str], tuple[str, float | None]]:
    return {(v.case_id, v.question_id): (str(v.verdict), v.value) for v in read_verdicts(run)}


def test_serve_answers_on_the_scale_the_request_names(likert, bench):
    from tracebench.serve import ZooServer
    from tracebench.zoo import generate, parse_profile

    case = next(iter(read_cases(bench)))
    png, _ = generate(case, parse_profile("partial:1.0"), seed=0)
    lines = "\n".join(f"- {q.id}: {q.question}" for q in case.checklist)
    body = {"model": "oracle", "messages": [{"role": "user", "content": [
        {"type": "text", "text": lines},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()}}]}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "verdicts", "schema": {"properties": {
            "answers": {"items": {"properties": {"answer": {"enum": list(LIKERT.answers)}}}}}}}}}
    with ZooServer([bench]).start() as server:
        named = _answers(server.base_url, body, likert)
        guessed = _answers(server.base_url, body, None)
        with pytest.raises(urllib.error.HTTPError) as refused:
            _answers(server.base_url, body, "five")
    assert set(named.values()) <= set(LIKERT.answers) and "3" in named.values()
    assert set(guessed.values()) <= set(KINDS["ternary"])  # without the header: the old guess
    assert refused.value.code == 400 and "X-Tracebench-Scale: 'five' is not" in refused.value.read().decode()


def _answers(base_url: str, body: dict, scale: str | None) -> dict[str, str]:
    headers = {"Content-Type": "application/json"} | ({SCALE_HEADER: scale} if scale else {})
    request = urllib.request.Request(f"{base_url}/chat/completions", json.dumps(body).encode(), headers)
    with urllib.request.urlopen(request, timeout=30) as reply:
        content = json.loads(reply.read())["choices"][0]["message"]["content"]
    return {a["id"]: a["answer"] for a in json.loads(content)["answers"]}


def test_a_registered_name_is_not_taken_twice_and_the_shipped_stay(likert):
    assert register_scale(LIKERT) is likert  # the same spec again: no change
    with pytest.raises(ValueError, match="registered already"):
        register_scale(ScaleSpec(LIKERT.name, ("a", "b"), (1.0, 0.0), ("a", "b", "b")))
    with pytest.raises(ValueError, match="ships with tracebench"):
        unregister_scale(str(DEFAULT_SCALE))
    with pytest.raises(ValueError, match="reverse of every value"):
        ScaleSpec("odd", ("1", "2"), (1.0, 0.3), ("1", "2", "2"))
    assert KINDS[LIKERT.name] == LIKERT.answers and kind_of(likert, _q("no", "leakage", "compose")) == LIKERT.name
    assert truth_answer(LIKERT.name, _q("no", "leakage", "compose"), "holds") == "1"  # as asked: none leaked
