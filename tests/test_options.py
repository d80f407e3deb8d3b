"""The options records of a run and a diagnosis: every option checked once, when the record is
made (before a file is read or a provider built), with the one line the command prints."""

from __future__ import annotations

import pytest

from tracebench.diagnose import DiagnoseOptions
from tracebench.errors import TraceError
from tracebench.providers import ModelSettings
from tracebench.run import RunOptions

ZOO = {"generator": "synthetic:perfect", "judges": ["oracle"]}


@pytest.mark.parametrize("changed, message", [
    ({"concurrency": 0}, "--concurrency: 0 must be at least 1"),
    ({"judge_batch": "all"}, "--judge-batch: 'all' is neither case nor op"),
    ({"ensemble": "vote"}, "--ensemble: 'vote' is neither mean nor majority nor median"),
    ({"max_images": 0}, "--max-images: 0 must be at least 1"),
    ({"samples": 0}, "--samples: 0 must be a whole number from 1 to 1000"),
    ({"samples": True}, "--samples: True must be a whole number from 1 to 1000"),
    ({"samples": 2, "settings": ModelSettings(sample=1)}, "--samples: a run of generation 1 of each case makes one sample"),
    ({"max_calls": 0}, "--max-calls: 0 must be at least 1"),
    ({"max_cost": float("inf"), "prices": {}}, "--max-cost: inf must be a positive amount"),
    ({"max_cost": 5.0}, "--max-cost: give --price-file FILE, the prices the budget is counted in"),
    ({"executor": "gpu"}, "--executor: 'gpu' is neither local nor ray"),
    ({"workers": 0}, "--workers: 0 must be at least 1"),
])
def test_a_run_option_is_refused_when_the_record_is_made(changed, message):
    with pytest.raises(TraceError) as refused:
        RunOptions(**{**ZOO, **changed})
    assert str(refused.value) == message


def test_a_run_options_record_is_frozen_and_holds_its_judges_as_a_tuple():
    options = RunOptions(**ZOO)
    assert options.judges == ("oracle",) and options.settings == ModelSettings()
    with pytest.raises(AttributeError):
        options.concurrency = 2  # type: ignore[misc]


@pytest.mark.parametrize("changed, message", [
    ({"strategy": "greedy"}, "--strategy: 'greedy' is neither full nor adaptive"),
    ({"repeats": 0}, "--repeats: 0 must be a whole number from 1 to 1000"),
    ({"executor": "gpu"}, "--executor: 'gpu' is neither local nor ray"),
    ({"workers": 0}, "--workers: 0 must be at least 1"),
    ({"gating": "sideways"}, "'sideways' is not a valid Gating"),
])
def test_a_diagnosis_option_is_refused_when_the_record_is_made(changed, message):
    with pytest.raises((TraceError, ValueError)) as refused:
        DiagnoseOptions(**changed)
    assert str(refused.value) == message


def test_diagnosis_options_default_to_the_paper_s_window_and_gating():
    options = DiagnoseOptions()
    assert (options.cases, options.strategy, options.window, options.gating.value) == ("failing", "full", 100, "within")
