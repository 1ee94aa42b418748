"""A fleet's diagnosis that walks the tree only where the symptom is not ruled out.

On a fleet of 1000 pods with one in trouble, the whole walk reads every branch's series for the
1000 pods and judges 1000 walks, to say of 999 what their detect already said: the symptom is not
there, so no cause of it holds. A narrowed diagnosis asks the detect for the whole scope first,
then walks the tree over the targets where the symptom holds or could not be established (their
possible causes need the branches), with the scope narrowed to those targets' label values as
triage narrows its walks. Each of those targets is diagnosed exactly as the whole walk diagnoses
it (tests/engine/test_choices_real_prometheus.py holds every tree to it: the rewrite narrows only
the series that identify a target, never the peers, model groups, nodes or workloads a check
compares it with). A target where the symptom is clear keeps its detect and no checks.

Where the walk has to read the whole scope anyway, it does: when a query of the tree may answer
for no target (a `count`, a `sum` without the target labels: its value is the whole scope's,
which narrowed would be the walked targets' alone; trees/promql.answers_per_target), when the
detect saw no target (there is nothing to narrow to, and what the branches say of the fleet is all
there is), and when the narrowed walk still met a fleet-level answer (series without the target
labels).
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from diagnosd.engine import params as P
from diagnosd.engine.evaluator import Evaluator
from diagnosd.engine.scope import Scope
from diagnosd.errors import ScopeError
from diagnosd.findings.model import Diagnosis, TargetDiagnosis
from diagnosd.topology import Topology
from diagnosd.trees import promql
from diagnosd.trees.model import Tree, queries


def detect_only(tree: Tree) -> Tree:
    """The tree with its detect alone: no checks, no traffic gate (a copy; the tree is untouched).
    The traffic gate applies to checks only, so the detect's verdicts are the whole tree's."""
    return tree.model_copy(update={"nodes": [], "traffic": None})


def walked_scope(scope: Scope, targets: Sequence[TargetDiagnosis], strict: Collection[str] = ()) -> Scope:
    """The scope narrowed to `targets`; as it was where a target's label value cannot be a
    scope's (longer than any real one, not unicode), so that the walk still runs. A strict label
    is never narrowed: its matcher goes on every series, the peers and joins a check reads beside
    the target too, which would then be cut to the walked targets' values."""
    try:
        return scope.narrowed([{k: v for k, v in t.labels.items() if k not in strict} for t in targets])
    except ScopeError:
        return scope


async def diagnose_narrowed(
    evaluator: Evaluator,
    tree: Tree,
    scope: Scope,
    at: datetime | None = None,
    overrides: Mapping[str, float | str] | None = None,
) -> Diagnosis:
    """The diagnosis of `tree` over `scope`, walked where the symptom is not clear (module doc)."""
    at = (at or evaluator.clock()).astimezone(UTC)  # one moment for both passes
    if not _per_target(tree, P.effective(tree, overrides), evaluator.topology):
        return await evaluator.diagnose(tree, scope, at, overrides)
    detected = await evaluator.diagnose(detect_only(tree), scope, at, overrides)
    if not detected.targets:
        whole = await evaluator.diagnose(tree, scope, at, overrides)
        return replace(whole, queries=detected.queries + whole.queries)
    walked = [t for t in detected.targets if t.symptom_present is not False]
    if not walked:
        return detected
    narrowed = walked_scope(scope, walked, evaluator.strict_labels)
    full = await evaluator.diagnose(tree, narrowed, at, overrides)
    if full.fleet and narrowed != scope:
        discarded = full.queries
        full = await evaluator.diagnose(tree, scope, at, overrides)
        full = replace(full, queries=full.queries + discarded)  # every query sent is counted
    return merged(detected, full)


def _per_target(tree: Tree, values: Mapping[str, float | str], topology: Topology) -> bool:
    """Whether every query of the tree answers per target (none may sum the whole scope)."""
    key = tuple(sorted(values.items()))
    return all(_answers_per_target(text, key, tuple(tree.target), topology) for _, text in queries(tree))


@functools.lru_cache(maxsize=1024)
def _answers_per_target(
    text: str, values: tuple[tuple[str, float | str], ...], target: tuple[str, ...], topology: Topology
) -> bool:
    expanded = promql.substitute(text, dict(values), list(target), topology)
    return promql.answers_per_target(promql.parse(expanded), target)


def merged(detected: Diagnosis, walked: Diagnosis) -> Diagnosis:
    """The detect pass' targets, each not clear there replaced by its walk (the walk's own verdict
    stands where an answer changed between the two passes: it is one consistent reading); the
    detect pass' scope, both passes' queries, the walk's notes and fleet-level results."""
    labels = detected.target_labels

    def key(t: TargetDiagnosis) -> tuple[str, ...]:
        return tuple(t.labels.get(label, "") for label in labels)

    by_key = {key(t): t for t in walked.targets}
    targets = tuple(t if t.symptom_present is False else by_key.get(key(t), t) for t in detected.targets)
    return Diagnosis(
        symptom=detected.symptom,
        title=detected.title,
        evaluated_at=detected.evaluated_at,
        scope=detected.scope,
        target_labels=labels,
        targets=targets,
        queries=detected.queries + walked.queries,
        notes=walked.notes,  # the walk reads the detect too: its notes cover both
        fleet=walked.fleet,
    )
