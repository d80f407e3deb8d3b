"""The provider registry: every registered scheme builds a complete provider (its kind, a spec,
the command's settings in place), a provider added at run time is one file and one registry
line, a provider without a spec is refused in one line, the help and errors list what is
registered, and ``tracebench.providers`` imports nothing of the zoo, the library or sampling."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tracebench.cli._args import provider_help
from tracebench.errors import TraceError
from tracebench.providers import (Generator, Judge, ModelSettings, ProviderSettings, building, make_generator, make_judge,
                                  register_scheme, scheme_usage, schemes)
from tracebench.providers import _schemes
from tracebench.providers._schemes import ROLES
from tracebench.run import RunOptions, read_verdicts, run_benchmark

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = ROOT / "examples" / "plugins"
BASES = {"generator": Generator, "judge": Judge}
SETTINGS = ModelSettings(scale="ternary", sample=2, generator_options={"seed": 3}, max_retries=0, timeout=5.0)
# the argument each scheme is named with here ({tmp}: a folder of this test); a scheme registered
# without one fails its test below until it is given one
ARGUMENTS = {
    ("generator", "openai"): "some-model@http://127.0.0.1:9/v1",
    ("generator", "folder"): "{tmp}",
    ("generator", "command"): "./make.sh {{output}}",
    ("generator", "synthetic"): "global-interference",
    ("generator", "python"): str(PLUGINS / "first_reference.py"),
    ("judge", "openai"): "some-model@http://127.0.0.1:9/v1",
    ("judge", "oracle"): None,
    ("judge", "python"): str(PLUGINS / "always_yes.py"),
}
REGISTERED = [(role, scheme.name) for role in ROLES for scheme in schemes(role)]


@pytest.fixture
def registry(monkeypatch):
    """The registry as it is, restored after the test (a scheme registered here goes with it)."""
    monkeypatch.setattr(_schemes, "_SCHEMES", dict(_schemes._SCHEMES))


def make(role: str, spec: str, settings: ModelSettings = ModelSettings()):
    return (make_generator if role == "generator" else make_judge)(spec, settings)


@pytest.mark.parametrize("role,name", REGISTERED, ids=[f"{role}-{name}" for role, name in REGISTERED])
def test_every_registered_scheme_builds_a_complete_provider(role, name, tmp_path):
    assert (role, name) in ARGUMENTS, f"give {role} scheme {name!r} an argument in ARGUMENTS"
    argument = ARGUMENTS[role, name]
    spec = name if argument is None else f"{name}:{argument.format(tmp=tmp_path)}"
    provider = make(role, spec, SETTINGS)
    assert isinstance(provider, BASES[role]) and not isinstance(provider, BASES["judge" if role == "generator" else "generator"])
    assert provider.spec.partition(":")[0] == name  # it names itself as its scheme
    assert provider.provider_settings is not None and provider.provider_settings.spec in ("", spec.partition("@")[0])
    if role == "judge":  # the command's settings, in place as it was built
        assert provider.scale == "ternary"
    else:
        assert provider.sample == 2 and dict(provider.options) == {"seed": 3}
    usage = next(s.usage for s in schemes(role) if s.name == name)
    assert usage in scheme_usage(role) and usage in provider_help(role)


def test_the_built_in_schemes_are_the_documented_ones():
    assert scheme_usage("generator") == "openai:MODEL, folder:PATH, command:'...', synthetic:PROFILE or python:FILE.py[:NAME]"
    assert scheme_usage("judge") == "openai:MODEL, oracle[:flip=P,yes-bias=Q] or python:FILE.py[:NAME]"
    docs = (ROOT / "docs/evaluate.md").read_text(encoding="utf-8")
    for role in ROLES:
        for scheme in schemes(role):
            assert f"`{scheme.usage.partition('[')[0]}" in docs, scheme.usage


PROVIDER_FILE = '''
"""A judge answering every question with its argument: always:yes, always:no."""

from tracebench.providers import Judge


class Always(Judge):
    def __init__(self, answer):
        self.answer = answer
        self.spec = f"always:{answer}"

    def ask(self, case, questions, image, references):
        return {q.id: self.answer for q in questions}
'''


def test_a_provider_added_at_run_time_is_one_file_and_one_registry_line(small_bench, tmp_path, monkeypatch, registry):
    (tmp_path / "always_provider.py").write_text(PROVIDER_FILE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    register_scheme("always", "judge", "always_provider:Always", "always:ANSWER", "answers every question ANSWER")

    run = tmp_path / "run"
    run_benchmark(small_bench, run, RunOptions(generator="synthetic:global-interference", judges=["always:no"],
                  settings=ModelSettings(), progress=False))
    verdicts = list(read_verdicts(run))
    assert verdicts and {vote.judge for v in verdicts for vote in v.votes} == {"always:no"}
    assert {vote.answer for v in verdicts for vote in v.votes} == {"no"}
    # it is listed, helped and guessed like a built-in one
    assert scheme_usage("judge").endswith("python:FILE.py[:NAME] or always:ANSWER")
    assert "always:ANSWER (answers every question ANSWER)" in provider_help("judge")
    with pytest.raises(TraceError, match=r"\(did you mean always:\.\.\.\?\)"):
        make_judge("alway:no")
    with pytest.raises(TraceError, match="registered already"):
        register_scheme("always", "judge", "always_provider:Other", "always:ANSWER", "another")


def test_a_provider_without_a_spec_is_refused_in_one_line(registry):
    class Nameless(Judge):
        def __init__(self, argument=None):
            self.argument = argument

        def ask(self, case, questions, image, references):
            return {}

    register_scheme("nameless", "judge", Nameless, "nameless:ARG", "names itself with no spec")
    with pytest.raises(TraceError) as refused:
        make_judge("nameless:x")
    message = str(refused.value)
    assert message == ("--judge nameless:x: Nameless sets no spec (the name its verdicts and cache keys record): "
                       "set spec in the class or in its __init__")
    register_scheme("named", "judge", type("Named", (Nameless,), {"spec": "named"}), "named", "names itself", bare=True)
    assert make_judge("named").spec == "named"


def test_a_scheme_is_registered_whole(registry):
    for args, fragment in ((("Bad", "judge", "m:C", "Bad:X", "help"), "lower-case letters"),
                           (("x", "critic", "m:C", "x:X", "help"), "is not generator or judge"),
                           (("x", "judge", "m:C", "y:X", "help"), "usage starting with its name"),
                           (("x", "judge", "m:C", "x:X", "two\nlines"), "one line of help"),
                           (("x", "judge", "module.Class", "x:X", "help"), "is not module:name")):
        with pytest.raises(TraceError, match=fragment):
            register_scheme(*args)
    assert ("judge", "x") not in _schemes._SCHEMES


def test_settings_are_in_place_before_init():
    seen = {}

    class Reads(Generator):
        def __init__(self):
            seen.update(sample=self.sample, options=dict(self.options), max_images=self.max_images, spec=self.spec)

        def generate(self, case, references):
            return b""

    given = ProviderSettings(spec="python:reads", sample=4, options={"steps": 8}, max_images=2)
    built = building(given, Reads)
    assert seen == {"sample": 4, "options": {"steps": 8}, "max_images": 2, "spec": "python:reads"}
    assert built.provider_settings is given
    direct = Reads()  # built directly: its class's declarations, nothing configured
    assert direct.provider_settings is None and direct.sample == 0 and direct.max_images is None and direct.spec == ""


FORBIDDEN = ("tracebench.zoo", "tracebench.library", "tracebench.sample")


def _imported(path: Path) -> list[str]:
    """Every module a source file imports, anywhere in it (functions too), relative names resolved."""
    package = ["tracebench", "providers"]
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names += [module] + [f"{module}.{alias.name}" for alias in node.names]
    return names


def test_providers_import_nothing_of_the_zoo_the_library_or_sampling():
    files = sorted((ROOT / "tracebench" / "providers").glob("*.py"))
    assert len(files) >= 10
    imported = {path.name: _imported(path) for path in files}
    assert "tracebench.providers._base" in imported["_registry.py"]  # the check resolves relative imports
    assert "tracebench.records" in imported["_base.py"]
    leaks = [(name, module) for name, modules in imported.items() for module in modules
             if any(module == f or module.startswith(f + ".") for f in FORBIDDEN)]
    assert leaks == []
