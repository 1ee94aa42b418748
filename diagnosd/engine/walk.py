"""Walks one target down a tree in seed order: verdicts per node, then causes ranked causally.

A matched cause that another matched cause explains (the tree's `explains`) is a consequence,
shown under its cause and never a root cause; the rest rank by severity, then by how specific
(deep in the seed's drawing) their branch is, then by how far past its threshold the check is.
An explanation holds only where the explaining cause is at least as severe, was not seen in a
partial answer alone while the explained one was fully seen, and (with `slack`) is large enough.

A matched cause that a cause the walk could not settle (its check unknown, or skipped under an
unknown check: an exporter missing, say) would explain with a size check is not established
either way: it is a possible cause, naming what could not be checked, never a root cause that may
be a consequence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from diagnosd.engine import params as P
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
from diagnosd.trees.model import AnyNode, CheckNode, GroupNode, ManualNode, Severity, Tree, walk

# cause -> the causes it explains, each with the slack its change must cover (None: no size check).
Explanations = Mapping[str, Sequence[tuple[str, float | None]]]
SEVERITY_ORDER = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}


@dataclass
class Shared:
    """What the walks of one diagnosis share between its targets: the verdicts judged while the
    rest of the answers were in flight (engine/early.py), and the results that are the same for
    every target (a manual check's, a skipped one's), made once instead of once per target."""

    early: Mapping[str, Mapping[Key, tuple[Judged, CheckResult]]] = field(default_factory=dict)
    fixed: dict[str, CheckResult] = field(default_factory=dict)


@dataclass
class _Walk:
    key: Key
    questions: Mapping[str, Question]
    traffic: tuple[Answer, float] | None
    contexts: Mapping[str, Sequence[tuple[str, Answer]]]
    shared: Shared = field(default_factory=Shared)
    results: list[CheckResult] = field(default_factory=list)
    causes: list[RootCause] = field(default_factory=list)

    def nodes(
        self, nodes: Sequence[AnyNode], depth: int, parent: str | None, open_: bool, chain: tuple[Evidence, ...]
    ) -> None:
        for node in nodes:
            if isinstance(node, CheckNode):
                self.check(node, depth, parent, open_, chain)
            elif isinstance(node, ManualNode):
                manual = self.shared.fixed.get(node.id)
                if manual is None:
                    manual = self.shared.fixed[node.id] = CheckResult(
                        id=node.id,
                        kind=NodeKind.MANUAL,
                        title=node.title,
                        depth=depth,
                        verdict=Verdict.MANUAL,
                        parent=parent,
                        guidance=node.manual,
                        cause=node.conclusion.cause if node.conclusion else None,
                    )
                self.results.append(manual)
                self.nodes(node.children, depth + 1, node.id, open_, chain)
            else:
                self.group(node, depth, parent, open_, chain)

    def check(self, node: CheckNode, depth: int, parent: str | None, open_: bool, chain: tuple[Evidence, ...]) -> None:
        question = self.questions[node.id]
        cause = node.conclusion.cause if node.conclusion else None
        if not open_:
            skipped = self.shared.fixed.get(node.id)
            if skipped is None:
                judged = Judged(Verdict.SKIPPED, Reason.PARENT_NOT_MATCHED, f"only asked when {parent} matched")
                skipped = self.shared.fixed[node.id] = result(question, judged, depth, parent, cause)
            self.results.append(skipped)
            self.nodes(node.children, depth + 1, node.id, False, chain)
            return
        gated = self.gate(node)
        if gated is None:
            judged, checked = self.judged(node.id, question, depth, parent, cause)
        else:
            judged, checked = gated, result(question, gated, depth, parent, cause)
        self.results.append(checked)
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

    def judged(
        self, check: str, question: Question, depth: int, parent: str | None, cause: str | None
    ) -> tuple[Judged, CheckResult]:
        early = self.shared.early.get(check, {}).get(self.key)
        if early is not None:
            return early
        judged = judge(question, self.key, context_values(self.contexts.get(check, ()), self.key))
        return judged, result(question, judged, depth, parent, cause)

    def gate(self, node: CheckNode) -> Judged | None:
        """Too little traffic to judge a ratio: unknown, before anything is compared."""
        if not node.needs_traffic or self.traffic is None:
            return None
        answer, floor = self.traffic
        values = [] if answer.error else [s.value for s in answer.samples(self.key) if math.isfinite(s.value)]
        if not values:
            why = answer.error.detail if answer.error else "no traffic sample for this target"
            return Judged(Verdict.UNKNOWN, Reason.LOW_TRAFFIC, f"traffic unknown: {why}")
        if max(values) < floor:
            return Judged(Verdict.UNKNOWN, Reason.LOW_TRAFFIC, f"traffic {max(values):.4g} below the floor {floor:g}")
        return None

    def group(self, node: GroupNode, depth: int, parent: str | None, open_: bool, chain: tuple[Evidence, ...]) -> None:
        index = len(self.results)
        self.nodes(node.children, depth + 1, node.id, open_, chain)
        # Its verdict summarizes what is under it: made once that is walked, put before it.
        inner = [r.verdict for r in self.results[index:] if r.kind is not NodeKind.GROUP]
        self.results.insert(
            index,
            CheckResult(
                id=node.id,
                kind=NodeKind.GROUP,
                title=node.title,
                depth=depth,
                verdict=_summary(inner),
                parent=parent,
            ),
        )


def _summary(verdicts: Sequence[Verdict]) -> Verdict:
    for verdict in (Verdict.MATCHED, Verdict.UNKNOWN, Verdict.CLEAR, Verdict.MANUAL):
        if verdict in verdicts:
            return verdict
    return Verdict.SKIPPED


def explanations(tree: Tree, values: P.Params | None = None) -> dict[str, list[tuple[str, float | None]]]:
    """The tree's `explains`, with every slack resolved against the params in force."""
    resolved = values if values is not None else P.effective(tree, None)
    out: dict[str, list[tuple[str, float | None]]] = {}
    for node, _ in walk(list(tree.nodes)):
        conclusion = getattr(node, "conclusion", None)
        if conclusion is None or not conclusion.explains:
            continue
        out[conclusion.cause] = [
            (e.cause, None if e.slack is None else P.number(e.slack, resolved)) for e in conclusion.explains
        ]
    return out


def _rank_key(c: RootCause) -> tuple[int, int, float]:
    return (SEVERITY_ORDER.get(c.severity, len(SEVERITY_ORDER)), -c.depth, -c.excess)


def _change(c: RootCause, rest: bool = False) -> float | None:
    """The change on the cause's branch (its own ratio check, else the nearest one above it) as a
    factor >= 1: ×3 up and ÷3 down are both 3. Of an all / any check, its first ratio condition.

    With `rest`, a share (unit `ratio`, 0-1) that fell is sized by the rest of the share: hits
    0.9 -> 0.5 (÷1.8) leave misses 0.1 -> 0.5 (×5), the work they add."""
    last = _last_ratio(c)
    if last is None:
        return None
    compared = last.compared
    if rest and last.operator == "ratio_below" and last.unit == "ratio":
        compared = _rest_of_share(last.value, last.baseline)
    if compared is None or math.isnan(compared) or compared <= 0:
        return None
    return compared if compared >= 1 else 1 / compared


def _last_ratio(c: RootCause) -> Evidence | None:
    ratios = [r for r in (_first_ratio(e) for e in c.evidence) if r is not None]
    return ratios[-1] if ratios else None


def _rest_of_share(value: float | None, baseline: float | None) -> float | None:
    if value is None or baseline is None or not (0 <= value <= 1 and 0 <= baseline < 1):
        return None
    return (1 - value) / (1 - baseline)


def _first_ratio(e: Evidence) -> Evidence | None:
    if not e.conditions:
        return e if e.operator.startswith("ratio_") else None
    return next((r for r in map(_first_ratio, e.conditions) if r is not None), None)


def _partial(c: RootCause) -> bool:
    """Whether any answer behind the cause's match came with warnings (a store or ingester missing)."""

    def seen_partially(e: Evidence) -> bool:
        return bool(e.warnings) or any(seen_partially(x) for x in e.conditions)

    return any(seen_partially(e) for e in c.evidence)


def _accounts_for(cause: RootCause, other: RootCause, slack: float | None, via: RootCause | None = None) -> bool:
    """Whether `cause`, matched together with `other`, is shown as what produced it.

    With `via` (a cause that `cause` accounts for and that explains `other` too), `other` is sized
    against the product of the two changes: computed prefill is requests × misses, so traffic ×2
    that also halved a 90 % hit ratio (misses ×5.5, by evicting cached prefixes) accounts for
    prefill ×11, which neither change alone covers."""
    # An explanation never demotes a more severe cause: both stay root causes.
    if _rank_key(cause)[0] > _rank_key(other)[0]:
        return False
    # A partial answer can show a problem but never rule one out: a match seen only with a store
    # missing does not move a fully observed cause out of the root causes.
    if _partial(cause) and not _partial(other):
        return False
    if slack is None:
        return True
    # A share that fell explains a quantity that grew by what it left over (misses, not hits);
    # against another falling share, by its own factor.
    explained = _last_ratio(other)
    grew = explained is not None and explained.operator == "ratio_above"
    big, small = _change(cause, rest=grew), _change(other)
    if via is not None:
        through = _change(via, rest=grew)
        big = big * through if big is not None and through is not None else None
    if big is None or small is None:
        return False  # the sizes cannot be compared: the explanation is not established
    return small <= big * slack


@dataclass(frozen=True)
class Unsettled:
    """A cause whose check could not be made, and the causes of the checks above it (it would
    refine them, never compete with them)."""

    severity: Severity
    above: frozenset[str]
    reason: Reason | None = None


def unsettled(results: Sequence[CheckResult], severities: Mapping[str, Severity]) -> dict[str, Unsettled]:
    """The causes whose check could not be made: unknown, or skipped below an unknown check (groups
    are looked through)."""
    by_id = {r.id: r for r in results}

    def ran(r: CheckResult | None) -> CheckResult | None:
        while r is not None and (r.verdict is Verdict.SKIPPED or r.kind is NodeKind.GROUP):
            r = by_id.get(r.parent) if r.parent else None
        return r

    def above(r: CheckResult) -> frozenset[str]:
        out: set[str] = set()
        node = by_id.get(r.parent) if r.parent else None
        while node is not None:
            if node.cause:
                out.add(node.cause)
            node = by_id.get(node.parent) if node.parent else None
        return frozenset(out)

    out: dict[str, Unsettled] = {}
    for r in results:
        looked = ran(r) if r.cause and r.kind is NodeKind.CHECK else None
        if r.cause and looked is not None and looked.verdict is Verdict.UNKNOWN:
            out[r.cause] = Unsettled(severities.get(r.cause, Severity.WARNING), above(r), looked.reason)
    return out


_HISTORY = (Reason.NO_BASELINE, Reason.SHORT_HISTORY)


def _against_baseline(c: RootCause) -> bool:
    def has(e: Evidence) -> bool:
        return e.baseline_at is not None or any(has(x) for x in e.conditions)

    return any(has(e) for e in c.evidence)


def severities(tree: Tree) -> dict[str, Severity]:
    return {
        node.conclusion.cause: node.conclusion.severity
        for node, _ in walk(list(tree.nodes))
        if isinstance(node, CheckNode) and node.conclusion is not None
    }


def rank(
    causes: Sequence[RootCause],
    explains: Explanations,
    unsettled: Mapping[str, Unsettled] | None = None,
) -> tuple[tuple[RootCause, ...], tuple[RootCause, ...], tuple[RootCause, ...]]:
    """(root causes, consequences, undecided), each ranked; every cause carries what it explains and
    what explains it. Undecided: matched causes no matched cause explains but a cause that could
    not be checked would (named in `unsettled_by`), unless that one only refines it (sits below it)."""
    matched = {c.cause: c for c in causes}
    by: dict[str, list[str]] = {}
    for cause in causes:
        for name, slack in explains.get(cause.cause, ()):
            other = matched.get(name)
            if other is not None and name != cause.cause and _accounts_for(cause, other, slack):
                by.setdefault(name, []).append(cause.cause)
    # Two sized explanations along a chain (A explains B, both explain C) size C by both changes
    # at once: C may be the product of the two (A's requests × B's misses), which neither covers
    # alone. Both then explain C.
    for cause in causes:
        sized = [(name, slack) for name, slack in explains.get(cause.cause, ()) if slack is not None]
        for name, slack in sized:
            other = matched.get(name)
            if other is None or name == cause.cause or cause.cause in by.get(name, ()):
                continue
            for via_name, _ in sized:
                via = matched.get(via_name)
                onward = dict(explains.get(via_name, ()))
                if (
                    via is not None
                    and via_name != name
                    and cause.cause in by.get(via_name, ())
                    and onward.get(name) is not None
                    and _accounts_for(via, other, None)
                    and _accounts_for(cause, other, slack, via=via)
                ):
                    found = by.setdefault(name, [])
                    found += [c for c in (via_name, cause.cause) if c not in found]
                    break
    built: dict[str, RootCause] = {}

    def build(name: str, visiting: frozenset[str]) -> RootCause:
        if name in built:
            return built[name]
        c = matched[name]
        inside = visiting | {name}
        direct = sorted((matched[x] for x, who in by.items() if name in who and x not in inside), key=_rank_key)
        explainers = sorted((matched[w] for w in by.get(name, ())), key=_rank_key)
        out = replace(
            c,
            explained_by=tuple(e.cause for e in explainers),
            explains=tuple(build(d.cause, inside) for d in direct),
        )
        built[name] = out
        return out

    # Sizes cannot be compared with a check that was not made: any explanation it would give counts.
    doubts: dict[str, list[str]] = {}
    for name, doubt in (unsettled or {}).items():
        for explained, slack in explains.get(name, ()):
            other = matched.get(explained)
            if (
                other is not None
                and name not in matched
                and explained not in doubt.above
                and SEVERITY_ORDER[doubt.severity] <= _rank_key(other)[0]
                # Only a sized explanation: it ties the explained change to the size the unchecked
                # cause would produce (the bigger steps of a contended GPU), so all of it may be that
                # cause's doing. An unsized one ("whenever both hold") would make a cause with an
                # optional explainer unreportable wherever that explainer's metrics are not exported
                # (SGLang without its prompt histogram never naming a full KV pool). And never more
                # than it could do matched: a sized explanation of a cause without a change of its
                # own (a plain threshold) does not hold.
                and slack is not None
                and _change(other) is not None
                # Without history nothing is new, yet a cause read from the present alone holds.
                and not (doubt.reason in _HISTORY and not _against_baseline(other))
            ):
                doubts.setdefault(explained, []).append(name)
    ordered = sorted(causes, key=_rank_key)
    roots = tuple(build(c.cause, frozenset()) for c in ordered if c.cause not in by and c.cause not in doubts)
    consequences = tuple(build(c.cause, frozenset()) for c in ordered if c.cause in by)
    undecided = tuple(
        replace(build(c.cause, frozenset()), unsettled_by=tuple(sorted(doubts[c.cause])))
        for c in ordered
        if c.cause not in by and c.cause in doubts
    )
    return roots, consequences, undecided


def diagnose_target(
    tree: Tree,
    key: Key,
    questions: Mapping[str, Question],
    traffic: tuple[Answer, float] | None,
    contexts: Mapping[str, Sequence[tuple[str, Answer]]],
    explains: Explanations | None = None,
    causes: Mapping[str, Severity] | None = None,
    shared: Shared | None = None,
) -> TargetDiagnosis:
    """One target's walk. `explains` (explanations) and `causes` (severities) are facts of the tree:
    a caller walking many targets computes them once; without them they are computed here.
    `shared`: what the caller's walks of many targets share (Shared)."""
    state = _Walk(key, questions, traffic, contexts, shared or Shared())
    detect_q = questions["detect"]
    detected, detect = state.judged("detect", detect_q, 0, None, None)
    present = {Verdict.MATCHED: True, Verdict.CLEAR: False}.get(detected.verdict)
    state.nodes(tree.nodes, 1, None, True, ())
    # A cause is only a cause of a symptom that is there (nothing is ranked where it is not);
    # where the symptom could not be established, the matched branches would explain it
    # ("possible"), and nothing is raised.
    roots: tuple[RootCause, ...] = ()
    consequences: tuple[RootCause, ...] = ()
    undecided: tuple[RootCause, ...] = ()
    if present is not False:
        doubts = unsettled(state.results, severities(tree) if causes is None else causes)
        explains = explanations(tree) if explains is None else explains
        roots, consequences, undecided = rank(state.causes, explains, doubts)
    return TargetDiagnosis(
        labels=dict(zip(tree.target, key, strict=True)),
        symptom_present=present,
        detect=detect,
        root_causes=roots if present else (),
        checks=tuple(state.results),
        consequences=consequences,
        possible_causes=(*roots, *undecided) if present is None else undecided,
    )
