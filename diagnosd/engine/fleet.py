"""Fleet-level results: checks whose answer has no target labels, judged once for the whole scope.

A sample without target labels (a `sum` over every GPU, a cluster-wide count) says nothing about
any one target. It is never attached to every target: each target shows the check as
`unknown (fleet_level)` and the fact is reported here, once, with its own verdict and evidence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from diagnosd.engine.judge import Answer, Question, context_values, judge, result
from diagnosd.findings.model import FleetResult, RootCause, Verdict
from diagnosd.trees.model import AnyNode, CheckNode, Tree


def fleet_level(question: Question) -> bool:
    """Whether every comparison of the question was answered only by samples without target labels."""
    if question.conditions:
        return all(fleet_level(c) for c in question.conditions)
    return question.now.fleet_level


def as_fleet(question: Question) -> Question:
    """The question with its fleet-level samples as the answer for the empty key `()`."""
    return replace(
        question,
        now=question.now.as_fleet(),
        baseline=question.baseline.as_fleet() if question.baseline is not None else None,
        current=question.current.as_fleet() if question.current is not None else None,
        conditions=tuple(as_fleet(c) for c in question.conditions),
    )


def fleet_results(
    tree: Tree, questions: Mapping[str, Question], contexts: Mapping[str, Sequence[tuple[str, Answer]]]
) -> tuple[FleetResult, ...]:
    """One result per fleet-level check (the detect included), in seed order.

    A fleet-level check is judged whatever its parent found for any target: a fleet-wide fact
    belongs to no target's branch. The traffic floor (per target) does not apply to it.
    """
    out: list[FleetResult] = []
    for key, node, depth, parent in _nodes(tree):
        question = questions.get(key)
        if question is None or not fleet_level(question):
            continue
        fleet = as_fleet(question)
        values = context_values([(name, a.as_fleet()) for name, a in contexts.get(key, ())], ()) if node else None
        judged = judge(fleet, (), values)
        conclusion = node.conclusion if node is not None else None
        check = result(fleet, judged, depth, parent, conclusion.cause if conclusion else None)
        finding = None
        if judged.verdict is Verdict.MATCHED and conclusion is not None:
            finding = RootCause(
                cause=conclusion.cause,
                title=conclusion.title,
                severity=conclusion.severity,
                remediation=tuple(conclusion.remediation),
                check=key,
                depth=depth,
                excess=judged.excess,
                evidence=(judged.evidence,) if judged.evidence is not None else (),
                caveat=conclusion.caveat,
            )
        out.append(FleetResult(check, finding))
    return tuple(out)


def _nodes(tree: Tree) -> list[tuple[str, CheckNode | None, int, str | None]]:
    out: list[tuple[str, CheckNode | None, int, str | None]] = [("detect", None, 0, None)]

    def visit(nodes: Sequence[AnyNode], depth: int, parent: str | None) -> None:
        for node in nodes:
            if isinstance(node, CheckNode):
                out.append((node.id, node, depth, parent))
            visit(list(node.children), depth + 1, node.id)

    visit(list(tree.nodes), 1, None)
    return out
