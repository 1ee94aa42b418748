"""The composition root: builds rules, sources and the engine from settings. Nothing at import time."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from prometheus_client import CollectorRegistry

from diagnosd.diagnoser import Diagnoser
from diagnosd.engine.params import effective
from diagnosd.errors import ParamError, Problem, SettingsError
from diagnosd.moments import utc_now
from diagnosd.settings import Settings
from diagnosd.sources import PrometheusConfig, PrometheusSource, QuerySource
from diagnosd.topology import DEFAULT as DEFAULT_TOPOLOGY
from diagnosd.topology import Topology
from diagnosd.trees import RuleSet, load_rules
from diagnosd.trees.aliases import Aliases, load_aliases
from diagnosd.trees.location import rules_dir_variable, shipped_rules_dir


def default_rules_dir() -> Path:
    """$DIAGNOSD_RULES_DIR, else the trees shipped with the package (diagnosd.trees.location)."""
    return rules_dir_variable(os.environ) or shipped_rules_dir()


@dataclass(frozen=True)
class Rules:
    ruleset: RuleSet
    aliases: Aliases
    directory: Path


def load(directory: Path | None = None) -> Rules:
    """Load and validate rules; raises RulesError with every problem."""
    where = directory or default_rules_dir()
    return Rules(load_rules(where), load_aliases(where), where)


@asynccontextmanager
async def diagnoser(
    config: PrometheusConfig,
    rules: Rules,
    *,
    params: Mapping[str, Mapping[str, float | str]] | None = None,
    strict_labels: Sequence[str] = (),
    topology: Topology = DEFAULT_TOPOLOGY,
    wrap: Callable[[QuerySource], QuerySource] | None = None,
) -> AsyncIterator[Diagnoser]:
    """The daemon's Diagnoser, unmetered, on a PrometheusSource whose client lives as long as the
    context: what the command line diagnoses with, so it refuses a blind answer as the daemon does.
    `wrap` puts a layer around the source (a benchmark's query counter)."""
    async with config.client() as client:
        source: QuerySource = PrometheusSource(config, client)
        yield Diagnoser(
            wrap(source) if wrap else source,
            rules.ruleset,
            rules.aliases,
            params=params,
            strict_labels=strict_labels,
            topology=topology,
        )


# The daemon's composition: settings + rules + the seams a test may replace (registry, clock, source).

SourceFactory = Callable[[], AbstractAsyncContextManager[QuerySource]]


@dataclass(frozen=True)
class Runtime:
    """What `diagnosd serve` is built from, loaded and cross-checked; it opens nothing by itself."""

    settings: Settings
    rules: Rules
    registry: CollectorRegistry
    clock: Callable[[], datetime]
    source: SourceFactory


def build(
    settings: Settings,
    *,
    registry: CollectorRegistry | None = None,
    clock: Callable[[], datetime] | None = None,
    source: SourceFactory | None = None,
) -> Runtime:
    """Load the rules and check the settings against them; raises RulesError or SettingsError."""
    # The settings already hold $DIAGNOSD_RULES_DIR (settings_loader asks rules_dir_variable).
    rules = load(settings.rules_dir or shipped_rules_dir())
    problems = _cross_check(settings, rules)
    if problems:
        raise SettingsError(problems)
    config = settings.prometheus.config()
    return Runtime(
        settings=settings,
        rules=rules,
        registry=registry if registry is not None else CollectorRegistry(),
        clock=clock or utc_now,
        source=source or (lambda: prometheus_source(config)),
    )


@asynccontextmanager
async def prometheus_source(config: PrometheusConfig) -> AsyncIterator[QuerySource]:
    """A PrometheusSource whose HTTP client lives as long as the context."""
    async with config.client() as client:
        yield PrometheusSource(config, client)


def _cross_check(settings: Settings, rules: Rules) -> list[Problem]:
    trees = rules.ruleset.trees
    known = ", ".join(trees)
    problems: list[Problem] = []

    def unknown(path: str, symptom: str) -> None:
        problems.append(Problem("settings", None, path, f"unknown symptom {symptom!r} (known: {known})"))

    for alertname, symptom in settings.webhook.alertname_map.items():
        if symptom not in trees:
            unknown(f"webhook.alertname_map.{alertname}", symptom)
    for symptom in settings.scheduler.symptoms:
        if symptom not in trees:
            unknown("scheduler.symptoms", symptom)
    for symptom in settings.findings.for_by_symptom:
        if symptom not in trees:
            unknown(f"findings.for_by_symptom.{symptom}", symptom)
    for symptom, overrides in settings.params.items():
        if symptom not in trees:
            unknown(f"params.{symptom}", symptom)
            continue
        try:
            effective(trees[symptom], overrides)
        except ParamError as error:
            problems.append(Problem("settings", None, f"params.{symptom}.{error.name}", error.reason))
    return problems
