"""Walks one target down a tree in seed order: verdicts per node, then ranked root causes."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from diagnosd.engine.judge import Answer, Judged, Key, Question, context_values, judge, result
from diagnosd.findings.model import (
    CheckResult,
    Evidence,
    NodeKind,
    Reason,
    RootCause,
    TargetDiagnosis,
    Verdict,
)
from diagnosd.trees.model import AnyNode, CheckNode, GroupNode, ManualNode, Tree


@dataclass
class _Walk:
    key: Key
    questions: Mapping[str, Question]
    traffic: tuple[Answer, float] | None
    contexts: Mapping[str, Sequence[tuple[str, Answer]]]
    results: list[CheckResult] = field(default_factory=list)
    causes: list[RootCause] = field(default_factory=list)

    def nodes(
        self, nodes: Sequence[AnyNode], depth: int, parent: str | None, open_: bool, chain: tuple[Evidence, ...]
    ) -> None:
        for node in nodes:
            if isinstance(node, CheckNode):
                self.check(node, depth, parent, open_, chain)
            elif isinstance(node, ManualNode):
                self.results.append(
                    CheckResult(
                        id=node.id,
                        kind=NodeKind.MANUAL,
                        title=node.title,
                        depth=depth,
                        verdict=Verdict.MANUAL,
                        parent=parent,
                        guidance=node.manual,
                        cause=node.conclusion.cause if node.conclusion else None,
                    )
                )
                self.nodes(node.children, depth + 1, node.id, open_, chain)
            else:
                self.group(node, depth, parent, open_, chain)

    def check(self, node: CheckNode, depth: int, parent: str | None, open_: bool, chain: tuple[Evidence, ...]) -> None:
        question = self.questions[node.id]
        cause = node.conclusion.cause if node.conclusion else None
        if not open_:
            judged = Judged(Verdict.SKIPPED, Reason.PARENT_NOT_MATCHED, f"only asked when {parent} matched")
        else:
            judged = self.gate(node) or judge(question, self.key, context_values(self.contexts[node.id], self.key))
        self.results.append(result(question, judged, depth, parent, cause))
        matched = judged.verdict is Verdict.MATCHED
        here = (*chain, judged.evidence) if matched and judged.evidence else chain
        if matched and node.conclusion is not None:
            c = node.conclusion
            self.causes.append(
                RootCause(
                    cause=c.cause,
                    title=c.title,
                    severity=c.severity,
                    remediation=tuple(c.remediation),
                    check=node.id,
                    depth=depth,
                    excess=judged.excess,
                    evidence=here,
                    caveat=c.caveat,
                )
            )
        self.nodes(node.children, depth + 1, node.id, matched, here)

    def gate(self, node: CheckNode) -> Judged | None:
        """Too little traffic to judge a ratio: unknown, before anything is compared."""
        if not node.needs_traffic or self.traffic is None:
            return None
        answer, floor = self.traffic
        values = [] if answer.error else [s.value for s in answer.samples(self.key) if not math.isnan(s.value)]
        if not values:
            why = answer.error.detail if answer.error else "no traffic sample for this target"
            return Judged(Verdict.UNKNOWN, Reason.LOW_TRAFFIC, f"traffic unknown: {why}")
        if max(values) < floor:
            return Judged(Verdict.UNKNOWN, Reason.LOW_TRAFFIC, f"traffic {max(values):.4g} below the floor {floor:g}")
        return None

    def group(self, node: GroupNode, depth: int, parent: str | None, open_: bool, chain: tuple[Evidence, ...]) -> None:
        index = len(self.results)
        self.results.append(
            CheckResult(
                id=node.id,
                kind=NodeKind.GROUP,
                title=node.title,
                depth=depth,
                verdict=Verdict.CLEAR,
                parent=parent,
            )
        )
        self.nodes(node.children, depth + 1, node.id, open_, chain)
        inner = [r.verdict for r in self.results[index + 1 :] if r.kind is not NodeKind.GROUP]
        self.results[index] = CheckResult(
            id=node.id,
            kind=NodeKind.GROUP,
            title=node.title,
            depth=depth,
            verdict=_summary(inner),
            parent=parent,
        )


def _summary(verdicts: Sequence[Verdict]) -> Verdict:
    for verdict in (Verdict.MATCHED, Verdict.UNKNOWN, Verdict.CLEAR, Verdict.MANUAL):
        if verdict in verdicts:
            return verdict
    return Verdict.SKIPPED


def diagnose_target(
    tree: Tree,
    key: Key,
    questions: Mapping[str, Question],
    traffic: tuple[Answer, float] | None,
    contexts: Mapping[str, Sequence[tuple[str, Answer]]],
) -> TargetDiagnosis:
    detect_q = questions["detect"]
    detected = judge(detect_q, key)
    detect = result(detect_q, detected, 0, None, None)
    present = {Verdict.MATCHED: True, Verdict.CLEAR: False}.get(detected.verdict)
    state = _Walk(key, questions, traffic, contexts)
    state.nodes(tree.nodes, 1, None, True, ())
    # A cause is only a cause of a symptom that is there (or that could not be ruled out).
    causes = () if present is False else tuple(sorted(state.causes, key=lambda c: (-c.depth, -c.excess)))
    return TargetDiagnosis(
        labels=dict(zip(tree.target, key, strict=True)),
        symptom_present=present,
        detect=detect,
        root_causes=causes,
        checks=tuple(state.results),
    )
