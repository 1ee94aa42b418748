"""The shape of rules/<id>.test.yaml: series in promtool notation and the expected diagnosis."""

from __future__ import annotations

from pydantic import Field

from diagnosd.trees.model import DURATION, Strict

Duration = str


class InputSeries(Strict):
    series: str
    values: str


class Expectation(Strict):
    target: dict[str, str]
    symptom_present: bool | None = None
    # The symptom could not be established (no baseline yet, a partial answer...): nothing is a root cause.
    symptom_unknown: bool = False
    top_cause: str | None = None
    causes: list[str] = []
    absent_causes: list[str] = []
    no_cause: bool = False
    # Verdicts by check id; `detect` and `check/condition` name the parts of all / any.
    checks: dict[str, str] = {}
    # Evidence values (the judged number: a sustained condition's quantile) by the same keys,
    # to 0.1 % or 1e-9: the numbers a person would read.
    values: dict[str, float] = {}
    # cause -> the causes that must explain it: it is a consequence shown under them, not a root cause.
    explained: dict[str, list[str]] = {}
    # Symptom unknown: causes that must be listed as possible ("would explain it"), never as root causes.
    possible_causes: list[str] = []


class Case(Strict):
    name: str
    eval_time: Duration = Field(pattern=DURATION.pattern)
    interval: Duration | None = Field(default=None, pattern=DURATION.pattern)
    params: dict[str, float | str] = {}
    scope: dict[str, str] = {}
    input_series: list[InputSeries] = Field(min_length=1)
    expect: list[Expectation] = Field(min_length=1)
    # check id -> verdict of its fleet-level result (a check answered without target labels).
    fleet: dict[str, str] = {}


class TestFile(Strict):
    interval: Duration = Field(default="1m", pattern=DURATION.pattern)
    tests: list[Case] = Field(min_length=1)
