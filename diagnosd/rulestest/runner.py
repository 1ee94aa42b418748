"""`diagnosd rules test`: every tree's series tests, loaded into one store, answered by one real
Prometheus (backfilled) or VictoriaMetrics (imported).

Each test's series carry an isolation label (`diagnosd_test`) that the runner also adds to the
scope, so all tests share one time frame without seeing each other. On a store other than
Prometheus, the cases listed as known differences (`differences.py`) must differ, and only they.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml
from pydantic import ValidationError

from diagnosd.daemon import compose
from diagnosd.daemon.diagnoser import Diagnoser
from diagnosd.engine import Scope
from diagnosd.errors import DiagnosdError, NotationError
from diagnosd.findings.lifecycle import Trigger
from diagnosd.findings.model import Diagnosis, Evidence, TargetDiagnosis
from diagnosd.promlocal.openmetrics import Series
from diagnosd.rulestest import differences, notation
from diagnosd.rulestest.spec import Case, Expectation, TestFile
from diagnosd.rulestest.stores import Backend, Binaries, serving
from diagnosd.sources import PrometheusConfig
from diagnosd.trees import promql
from diagnosd.trees.model import Tree

ISOLATION_LABEL = "diagnosd_test"
# Far enough in the past to never meet live data; retention is counted from the newest block.
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class CaseResult:
    tree: str
    name: str
    failures: list[str] = field(default_factory=list)
    # A known difference of the store: why the case answers otherwise there, and how it did.
    differs: str | None = None
    differences: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures


@dataclass(frozen=True)
class Loaded:
    tree: Tree
    case: Case
    case_id: str
    interval: timedelta


def run_tests(directory: Path, args: argparse.Namespace) -> bool:
    backend = Backend(getattr(args, "backend", Backend.PROMETHEUS))
    binaries = Binaries(
        args.prometheus_binary, args.promtool_binary, getattr(args, "victoria_metrics_binary", "victoria-metrics")
    )
    results = collect(directory, args.only, backend=backend, binaries=binaries)
    for result in results:
        mark = "ok  " if result.passed else "FAIL"
        if result.passed and result.differs is not None:
            mark = "diff"
        print(f"{mark} {result.tree}: {result.name}")
        if result.differs is not None:
            print(f"       known difference on {backend}: {result.differs}")
        for line in (*result.differences, *result.failures):
            print(f"       {line}")
    failed = sum(not r.passed for r in results)
    where = "" if backend is Backend.PROMETHEUS else f" on {backend}"
    known = sum(r.passed and r.differs is not None for r in results)
    differing = f" ({known} known differences)" if where else ""
    print(f"rules test{where}: {len(results) - failed} passed{differing}, {failed} failed")
    return failed == 0 and bool(results)


def collect(
    directory: Path,
    only: Sequence[str] = (),
    prometheus: str = "prometheus",
    promtool: str = "promtool",
    *,
    backend: Backend = Backend.PROMETHEUS,
    binaries: Binaries | None = None,
) -> list[CaseResult]:
    binaries = (binaries or Binaries(prometheus, promtool)).check(backend)
    rules = compose.load(directory)
    trees = [t for t in rules.ruleset.trees.values() if not only or t.id in only]
    results: list[CaseResult] = []
    loaded: list[Loaded] = []
    for tree in trees:
        cases, problem = _read(directory / f"{tree.id}.test.yaml", tree)
        if problem:
            results.append(CaseResult(tree.id, "(test file)", [problem]))
        loaded.extend(cases)
    if not loaded:
        return results
    with tempfile.TemporaryDirectory(prefix="diagnosd-rules-test-") as tmp:
        series, problems = _series(loaded)
        results.extend(problems)
        with serving(backend, series, Path(tmp), binaries) as url:
            results.extend(asyncio.run(_evaluate(url, rules, loaded)))
    return judge(results, differences.KNOWN.get(backend, {}), {t.id for t in trees}, backend)


def judge(
    results: list[CaseResult], known: Mapping[tuple[str, str], str], trees: set[str], backend: Backend
) -> list[CaseResult]:
    """Each listed case must differ (its diff kept, the case passing); a listed case that passes, or
    that no longer exists, fails: the list says what is true of the store, not what once was."""
    seen = {(r.tree, r.name) for r in results}
    for result in results:
        reason = known.get((result.tree, result.name))
        if reason is None:
            continue
        if result.passed:
            result.failures.append(f"listed as a known difference on {backend} ({reason}), but it passes: unlist it")
        else:
            result.differs, result.differences, result.failures = reason, result.failures, []
    gone = [key for key in known if key[0] in trees and key not in seen]
    results.extend(
        CaseResult(tree, name, [f"listed as a known difference on {backend}, no such case"]) for tree, name in gone
    )
    return results


def _read(path: Path, tree: Tree) -> tuple[list[Loaded], str | None]:
    if not path.is_file():
        return [], f"no test file {path.name}: every tree ships with its tests"
    try:
        spec = TestFile.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    except (yaml.YAMLError, ValidationError) as error:
        return [], f"{path}: {error}"
    default = _duration(spec.interval)
    return [
        Loaded(tree, case, f"{tree.id}/{index}", _duration(case.interval) if case.interval else default)
        for index, case in enumerate(spec.tests)
    ], None


def _series(loaded: list[Loaded]) -> tuple[list[Series], list[CaseResult]]:
    out: list[Series] = []
    problems: list[CaseResult] = []
    for item in loaded:
        step = item.interval.total_seconds()
        seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
        try:
            for one in item.case.input_series:
                name, labels = notation.series(one.series)
                # The same series twice is two histories of one series: the store would refuse
                # the second as out of order, for the whole run, far from the test that wrote it.
                key = (name, tuple(sorted(labels.items())))
                if key in seen:
                    raise NotationError(f"series {one.series} is given twice")
                seen.add(key)
                values = notation.expand(one.values)
                points = [(EPOCH.timestamp() + i * step, v) for i, v in enumerate(values) if v is not None]
                out.append(Series(name, {**labels, ISOLATION_LABEL: item.case_id}, points))
        except NotationError as error:
            problems.append(CaseResult(item.tree.id, item.case.name, [str(error)]))
    return out, problems


async def _evaluate(url: str, rules: compose.Rules, loaded: list[Loaded]) -> list[CaseResult]:
    config = PrometheusConfig(url=url, timeout=30.0)
    limit = asyncio.Semaphore(4)
    async with compose.diagnoser(config, rules, strict_labels=[ISOLATION_LABEL]) as diagnoser:

        async def one(item: Loaded) -> CaseResult:
            async with limit:
                return await _case(diagnoser, item)

        return list(await asyncio.gather(*(one(item) for item in loaded)))


async def _case(diagnoser: Diagnoser, item: Loaded) -> CaseResult:
    result = CaseResult(item.tree.id, item.case.name)
    at = EPOCH + _duration(item.case.eval_time)
    try:
        scope = Scope.of({**item.case.scope, ISOLATION_LABEL: item.case_id})
        looked = await diagnoser.diagnose(item.tree, scope, at, Trigger.CLI, item.case.params)
    except DiagnosdError as error:
        result.failures.append(f"diagnosis failed: {error}")
        return result
    diagnosis = looked.diagnosis
    result.failures.extend(f"a query failed: {error}" for error in looked.errors)
    for expectation in item.case.expect:
        result.failures.extend(check(diagnosis, expectation))
    result.failures.extend(check_fleet(diagnosis, item.case.fleet))
    return result


def check_fleet(diagnosis: Diagnosis, want: Mapping[str, str]) -> list[str]:
    """The fleet-level results (checks answered without target labels) against `fleet:`."""
    got = {f.check.id: f.check for f in diagnosis.fleet}
    out: list[str] = []
    for check_id, verdict in want.items():
        found = got.get(check_id)
        if found is None:
            out.append(f"[fleet] check {check_id}: want {verdict}, no fleet-level result (got {sorted(got)})")
        elif str(found.verdict) != verdict:
            detail = _explain(found.verdict, found.reason, found.detail)
            out.append(f"[fleet] check {check_id}: want {verdict}, got {found.verdict} ({detail})")
    return out


def check(diagnosis: Diagnosis, want: Expectation) -> list[str]:
    """Every way the diagnosis differs from the expectation, as readable diff lines."""
    found = next((t for t in diagnosis.targets if dict(t.labels) == want.target), None)
    where = " ".join(f"{k}={v}" for k, v in want.target.items())
    if found is None:
        seen = "; ".join(" ".join(f"{k}={v}" for k, v in t.labels.items()) for t in diagnosis.targets) or "none"
        return [f"[{where}] not diagnosed; targets seen: {seen}"]
    return [f"[{where}] {line}" for line in _differences(found, want)]


def _differences(t: TargetDiagnosis, want: Expectation) -> list[str]:
    causes = [c.cause for c in t.root_causes]
    verdicts = {c.id: str(c.verdict) for c in t.checks}
    evidence = {c.id: c.evidence for c in (t.detect, *t.checks) if c.evidence is not None}
    for key, e in list(evidence.items()):
        evidence.update(_condition_evidence(key, e))
    verdicts.update({key: str(e.verdict) for key, e in evidence.items() if e.verdict is not None})
    verdicts["detect"] = str(t.detect.verdict)
    out: list[str] = []
    for key, want_value in want.values.items():
        got = evidence[key].value if key in evidence else None
        if got is None or not math.isclose(got, want_value, rel_tol=1e-3, abs_tol=1e-9):
            out.append(f"value of {key}: want {want_value:g}, got {got}")
    if want.symptom_present is not None and t.symptom_present != want.symptom_present:
        out.append(
            f"symptom_present: want {want.symptom_present}, got {t.symptom_present} "
            f"({_explain(t.detect.verdict, t.detect.reason, t.detect.detail)})"
        )
    if want.symptom_unknown and t.symptom_present is not None:
        out.append(
            f"symptom_present: want unknown, got {t.symptom_present} "
            f"({_explain(t.detect.verdict, t.detect.reason, t.detect.detail)})"
        )
    if want.top_cause is not None and (not causes or causes[0] != want.top_cause):
        out.append(f"top cause: want {want.top_cause}, got {causes[0] if causes else 'none'} (all: {causes})")
    out.extend(f"cause {c}: want present, missing (got {causes}); {_why(t, c)}" for c in want.causes if c not in causes)
    out.extend(f"cause {c}: must not appear, but did (got {causes})" for c in want.absent_causes if c in causes)
    if want.no_cause and causes:
        out.append(f"no cause wanted, got {causes}")
    consequences = {c.cause: c for c in t.consequences}
    for cause, by in want.explained.items():
        found = consequences.get(cause)
        if found is None:
            where = "a root cause" if cause in causes else "not matched"
            out.append(f"cause {cause}: want explained by {by}, but it is {where}; {_why(t, cause)}")
            continue
        missing = [b for b in by if b not in found.explained_by]
        if missing:
            out.append(f"cause {cause}: want explained by {by}, explained by {list(found.explained_by)}")
    possible = [c.cause for c in t.possible_causes]
    out.extend(
        f"possible cause {c}: want listed, missing (got {possible}); {_why(t, c)}"
        for c in want.possible_causes
        if c not in possible
    )
    for check_id, verdict in want.checks.items():
        if verdicts.get(check_id) != verdict:
            node = next((c for c in t.checks if c.id == check_id), None)
            detail = _explain(node.verdict, node.reason, node.detail) if node else "no such check"
            out.append(f"check {check_id}: want {verdict}, got {verdicts.get(check_id)} ({detail})")
    return out


def _condition_evidence(key: str, e: Evidence) -> dict[str, Evidence]:
    """The evidence of every condition of an all / any, keyed `check/condition/...`."""
    out: dict[str, Evidence] = {}
    for c in e.conditions:
        out[c.check] = c  # the condition's key: `check/condition/...`
        out.update(_condition_evidence(c.check, c))
    return out


def _why(t: TargetDiagnosis, cause: str) -> str:
    node = next((c for c in t.checks if c.cause == cause), None)
    if node is None:
        return "no node concludes it"
    e = node.evidence
    numbers = f" value={e.value} baseline={e.baseline} threshold={e.threshold}" if e else ""
    return f"check {node.id} was {_explain(node.verdict, node.reason, node.detail)}{numbers}"


def _explain(verdict: object, reason: object, detail: str | None) -> str:
    return f"{verdict}" + (f", {reason}" if reason else "") + (f": {detail}" if detail else "")


def _duration(text: str) -> timedelta:
    return promql.parse_duration(text)
