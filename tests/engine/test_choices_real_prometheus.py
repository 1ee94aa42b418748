"""A scope whose labels take several values (a coalesced batch of alerts, daemon/alertmanager/
coalesce.py) diagnoses each of its targets exactly as that target's own scope does, and as the
whole namespace does, on every shipped tree, against a real Prometheus holding a simulated fleet
with a full KV pool. Only the chosen targets are judged."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from diagnosd.daemon import compose
from diagnosd.daemon.settings import Settings
from diagnosd.engine import Scope
from diagnosd.engine.evaluator import Looking
from diagnosd.findings.model import TargetDiagnosis
from diagnosd.promlocal import LocalPrometheus, backfill
from diagnosd.sim import history, scenario
from diagnosd.sim.simulator import Simulator

ANCHOR = 1_780_000_000.0
AT = datetime.fromtimestamp(ANCHOR, UTC)


@pytest.fixture(scope="module")
def fleet_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("choices")
    sim = Simulator(scenario.load("kv_pool_full"), anchor=ANCHOR, history=2 * 3600.0)
    history.write(work / "fleet.om", sim)
    backfill(work / "fleet.om", work / "tsdb")
    (work / "fleet.om").unlink()
    with LocalPrometheus(work / "prometheus", tsdb=work / "tsdb") as prom:
        yield prom.url


def seen(target: TargetDiagnosis) -> tuple[Any, ...]:
    """What a target's diagnosis says: presence, causes in rank, every check's verdict and value."""
    return (
        target.symptom_present,
        [c.cause for c in target.root_causes],
        [c.cause for c in target.consequences],
        [c.cause for c in target.possible_causes],
        [(r.id, r.verdict, r.reason, r.evidence.value if r.evidence else None) for r in target.checks],
    )


def test_each_target_of_a_scope_of_choices_is_diagnosed_as_on_its_own(fleet_url: str) -> None:
    asyncio.run(_compare(fleet_url))


async def _compare(url: str) -> None:
    rules = compose.load()
    settings = Settings.model_validate({"prometheus": {"url": url}})
    present = 0
    async with compose.prometheus_source(settings.prometheus.config()) as source:
        evaluator = Looking(clock=lambda: AT).evaluator(source)
        for symptom, tree in sorted(rules.ruleset.trees.items()):
            wide = await evaluator.diagnose(tree, Scope(), AT)
            by_key = {tuple(t.labels[label] for label in tree.target): t for t in wide.targets}
            # The targets where the symptom is, first: a batch is made of alerting targets.
            keys = sorted(by_key, key=lambda k: (by_key[k].symptom_present is not True, k))[:3]
            assert keys, f"{symptom}: the fleet has no target for it"
            choices = {label: {key[i] for key in keys} for i, label in enumerate(tree.target)}
            batch = await evaluator.diagnose(tree, Scope.among(choices), AT)
            got = {tuple(t.labels[label] for label in tree.target): t for t in batch.targets}
            assert set(got) == set(keys), f"{symptom}: the batch judged {sorted(got)}, not {keys}"
            for key in keys:
                alone = await evaluator.diagnose(tree, Scope.of(dict(zip(tree.target, key, strict=True))), AT)
                (own,) = alone.targets
                assert seen(got[key]) == seen(own) == seen(by_key[key]), f"{symptom} {key}"
                present += got[key].symptom_present is True
    # Not vacuous: the full KV pool's symptoms are there, with their causes, on some batch's target.
    assert present >= 3
