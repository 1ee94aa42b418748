"""Judges each check for every target as soon as that check's own answers are in, while the
diagnosis' slower queries are still in flight.

Judging a fleet is a verdict and its evidence per check per target: 0.1-0.3 s of CPU for a tree
over 1000 pods. Done after the last answer, it adds to the slowest query's time and holds the
event loop in one piece (webhooks, scrapes and the other trees of a round wait behind it). Judged
here, one check at a time as its answers arrive, the same work overlaps the wait for the rest.

The verdicts are the walk's own: the same `judge` of the same question, target and context values.
A check under another check is judged early only for the targets where that check matched (the
walk asks it only there); the walk judges whatever was not judged early (a target none of the
check's answers named, a check whose parent was not yet judged) itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from diagnosd.engine.judge import Answer, Judged, Key, Question, context_values, judge, result
from diagnosd.findings.model import CheckResult, Verdict
from diagnosd.trees.model import AnyNode, CheckNode, Tree

Job = tuple[str, datetime]
# What a check is judged on, built from the answers so far: its question and its context values.
Asker = Callable[[str, Mapping[Job, Answer]], tuple[Question, Sequence[tuple[str, Answer]]]]


@dataclass(frozen=True)
class Step:
    """One check to judge early: the detect or a check node, the requests it reads, and the check
    above it whose match opens it (None: asked for every target)."""

    id: str
    jobs: frozenset[Job]
    above: str | None = None
    # Where the walk shows it: its depth, the node it hangs under, the cause it concludes.
    depth: int = 0
    parent: str | None = None
    cause: str | None = None


def steps(tree: Tree, jobs_of: Callable[[str], Iterable[Job]]) -> list[Step]:
    """The detect and every check node, in seed order; `jobs_of(id)` the requests a check reads."""
    out = [Step("detect", frozenset(jobs_of("detect")))]

    def visit(nodes: Sequence[AnyNode], above: str | None, depth: int, parent: str | None) -> None:
        for node in nodes:
            if isinstance(node, CheckNode):
                cause = node.conclusion.cause if node.conclusion else None
                out.append(Step(node.id, frozenset(jobs_of(node.id)), above, depth, parent, cause))
                visit(node.children, node.id, depth + 1, node.id)
            else:  # a group or a manual check passes its parent's openness through, as the walk does
                visit(node.children, above, depth + 1, node.id)

    visit(tree.nodes, None, 1, None)
    return out


@dataclass
class EarlyJudge:
    """Verdicts judged so far and the results showing them, by check id and target key (`judged`),
    for the walk to read."""

    steps: Sequence[Step]
    ask: Asker
    # Targets judged between two pauses (a check over 1000 targets takes 10-30 ms of CPU).
    slice: int = 200
    judged: dict[str, dict[Key, tuple[Judged, CheckResult]]] = field(default_factory=dict)
    _waiting: list[Step] = field(init=False)

    def __post_init__(self) -> None:
        self._waiting = list(self.steps)

    def ready(self, answers: Mapping[Job, Answer]) -> Step | None:
        """The first waiting check whose answers are all in and whose parent check is judged."""
        for step in self._waiting:
            if (step.above is None or step.above in self.judged) and all(job in answers for job in step.jobs):
                self._waiting.remove(step)
                return step
        return None

    def judge(self, step: Step, answers: Mapping[Job, Answer]) -> Iterator[None]:
        """Judges the check for every target its answers name, pausing (yielding) every `slice`
        targets: the caller lets the event loop run there. Done once exhausted."""
        question, contexts = self.ask(step.id, answers)
        keys: Iterable[Key] = _keys(question)
        if step.above is not None:
            above = self.judged[step.above]
            keys = [k for k in keys if (j := above.get(k)) is not None and j[0].verdict is Verdict.MATCHED]
        judged: dict[Key, tuple[Judged, CheckResult]] = {}
        for done, key in enumerate(keys, 1):
            verdict = judge(question, key, context_values(contexts, key))
            judged[key] = verdict, result(question, verdict, step.depth, step.parent, step.cause)
            if done % self.slice == 0:
                yield
        # Published whole: a child waits for its parent's verdicts on every target.
        self.judged[step.id] = judged


def _keys(question: Question) -> set[Key]:
    """Every target any of the question's answers names (its conditions', baselines' and currents')."""
    keys: set[Key] = set()
    for part in question.conditions or (question,):
        for answer in (part.now, part.baseline, part.current):
            if answer is not None:
                keys.update(answer.by_target)
        if part.conditions:
            keys |= _keys(part)
    return keys
