"""The YAML shape of a troubleshooting tree (rules/<symptom>.yaml), as strict pydantic models.

This is the file format only; the engine compiles it into queries and the findings package
holds what an evaluation found. Unknown keys are errors everywhere.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

ID_PATTERN = r"^[a-z][a-z0-9_]*$"
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
PARAM_REF = re.compile(r"^\$([a-z][a-z0-9_]*)$")
DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")

Id = Annotated[str, Field(pattern=ID_PATTERN)]
# A number, or "$param" naming one of the tree's params.
Number = float | Annotated[str, Field(pattern=PARAM_REF.pattern)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Text(Strict):
    """Every human-facing string exists in the seed's Chinese and in English."""

    zh: Annotated[str, Field(min_length=1)]
    en: Annotated[str, Field(min_length=1)]


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class Basis(StrEnum):
    """How a check knows (CATALOG.md kinds M, C, D)."""

    METRIC = "metric"
    CONFIG = "config"
    DERIVED = "derived"


class Param(Strict):
    default: float | str
    doc: Annotated[str, Field(min_length=1)]
    # True for limits no exporter publishes (max-num-seqs...): findings say they relied on it.
    assumed: bool = False
    unit: str | None = None


class Compare(Strict):
    """One comparison: of the value itself, or of the value against its own past (baseline)."""

    above: Number | None = None
    below: Number | None = None
    ratio_above: Number | None = None
    ratio_below: Number | None = None
    delta_above: Number | None = None
    delta_below: Number | None = None
    # How far back the baseline lies: a duration, or "$param".
    baseline: str | None = None

    @model_validator(mode="after")
    def _one_operator(self) -> Compare:
        ops = [name for name in OPERATORS if getattr(self, name) is not None]
        if len(ops) != 1:
            raise ValueError(f"exactly one of {', '.join(OPERATORS)} is required, got {ops or 'none'}")
        relative = ops[0].startswith(("ratio_", "delta_"))
        if relative and self.baseline is None:
            raise ValueError(f"{ops[0]} compares with a baseline: set 'baseline' (e.g. 1d)")
        if not relative and self.baseline is not None:
            raise ValueError(f"{ops[0]} compares the value itself: 'baseline' does not apply")
        return self

    @property
    def operator(self) -> str:
        return next(name for name in OPERATORS if getattr(self, name) is not None)

    @property
    def threshold(self) -> float | str:
        value: float | str = getattr(self, self.operator)
        return value


OPERATORS = ("above", "below", "ratio_above", "ratio_below", "delta_above", "delta_below")


class Explains(Strict):
    """Another cause of the tree that this conclusion accounts for when both matched.

    With `slack`, only while the explained change is no bigger than this one's times `slack`
    (both checks compare ratios to a baseline): prompts ×3 explain prefill work up to ×3·slack.
    """

    cause: Id
    slack: Number | None = None


class Conclusion(Strict):
    cause: Id
    title: Text
    remediation: list[Text] = Field(min_length=1)
    severity: Severity = Severity.WARNING
    # Required for derived checks: what the inference cannot see, said in every finding.
    caveat: Text | None = None
    # Causes this one explains: matched together, they are shown under it as consequences.
    # A cause id, or {cause: id, slack: number} to require that this change is large enough.
    explains: list[Explains] = []

    @field_validator("explains", mode="before")
    @classmethod
    def _ids_as_items(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"cause": item} if isinstance(item, str) else item for item in value]
        return value


class Context(Strict):
    """A value shown beside a check's evidence without deciding anything (e.g. GPU temperature)."""

    id: Id
    title: Text
    query: str
    unit: str | None = None


class Sustained(Strict):
    """持续: the comparison held for `share` of the window's evaluation steps, not at every one.

    Judged on a low (or high) quantile of the value over the window: above T at the 20th
    percentile means above T in at least 80 % of the steps, so one noisy dip changes nothing.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    for_: Annotated[str, Field(alias="for")]
    share: Number = 0.8
    step: str = "1m"

    @field_validator("share")
    @classmethod
    def _a_share(cls, value: float | str) -> float | str:
        if not isinstance(value, str) and not 0 < value <= 1:
            raise ValueError(f"share {value:g} must lie in (0, 1]")
        return value


class Conditional(Strict):
    """One comparison (`query` and `compare`), or `all:` / `any:` of conditions, each its own evidence."""

    query: str | None = None
    compare: Compare | None = None
    unit: str | None = None
    # The value is read from this label of the sample (config-info metrics carry config as labels).
    value_label: str | None = None
    # No sample for a known target means 0 (event counts): only when the metric exists at all.
    absent_as_zero: bool = False
    sustained: Sustained | None = None
    all: list[Condition] | None = None
    any: list[Condition] | None = None

    @model_validator(mode="after")
    def _one_shape(self) -> Conditional:
        combined = [name for name in ("all", "any") if getattr(self, name) is not None]
        simple = self.query is not None or self.compare is not None
        if len(combined) > 1 or (combined and simple):
            raise ValueError("either query and compare, or one of all / any")
        if not combined:
            if self.query is None or self.compare is None:
                raise ValueError("a comparison needs both query and compare (or all / any of conditions)")
            return self
        parts = self.conditions
        if len(parts) < 2:
            raise ValueError(f"{combined[0]} needs at least two conditions")
        ids = [c.id for c in parts]
        if len(set(ids)) != len(ids):
            raise ValueError(f"condition ids must be unique: {ids}")
        stray = [n for n in ("unit", "value_label", "sustained") if getattr(self, n) is not None]
        if stray or self.absent_as_zero:
            raise ValueError(f"{', '.join(stray or ['absent_as_zero'])}: set it on each condition")
        return self

    @property
    def combine(self) -> Literal["all", "any"] | None:
        if self.all is not None:
            return "all"
        return "any" if self.any is not None else None

    @property
    def conditions(self) -> list[Condition]:
        return list(self.all or self.any or [])

    def comparison(self) -> tuple[str, Compare]:
        """The query and compare of a simple comparison (never of all / any)."""
        if self.query is None or self.compare is None:
            raise ValueError("all / any has no single query")
        return self.query, self.compare


class Condition(Conditional):
    """A part of `all:` / `any:`: its title is its evidence line."""

    id: Id
    title: Text


def leaves(key: str, item: Conditional) -> list[tuple[str, Conditional]]:
    """Every simple comparison under a detect or check, keyed `key` or `key/condition/...`."""
    if item.combine is None:
        return [(key, item)]
    return [leaf for c in item.conditions for leaf in leaves(f"{key}/{c.id}", c)]


class CheckNode(Conditional):
    id: Id
    title: Text
    basis: Basis = Basis.METRIC
    # The check means nothing below the tree's traffic floor (ratios of tiny rates).
    needs_traffic: bool = False
    context: list[Context] = []
    conclusion: Conclusion | None = None
    children: list[Node] = []

    @model_validator(mode="after")
    def _derived_says_why(self) -> CheckNode:
        if self.basis is Basis.DERIVED and (self.conclusion is None or self.conclusion.caveat is None):
            raise ValueError("a derived check needs conclusion.caveat: what the inference cannot see")
        return self


class ManualNode(Strict):
    """A branch no metric can observe: the seed's guidance, left to a person."""

    id: Id
    title: Text
    manual: Text
    # Where a log source or Kubernetes events could decide it one day.
    could_observe: str | None = None
    conclusion: Conclusion | None = None
    children: list[Node] = []


class GroupNode(Strict):
    """A heading of the seed (e.g. "客户端侧") that only groups further nodes."""

    id: Id
    title: Text
    group: Literal[True]
    children: list[Node] = Field(min_length=1)


def _node_kind(value: Any) -> str:
    if isinstance(value, dict):
        if "query" in value or "all" in value or "any" in value:
            return "check"
        if "manual" in value:
            return "manual"
        if "group" in value:
            return "group"
    return "check"  # reports the missing keys of a check, the most common node


Node = Annotated[
    Annotated[CheckNode, Tag("check")] | Annotated[ManualNode, Tag("manual")] | Annotated[GroupNode, Tag("group")],
    Discriminator(_node_kind),
]


class Detect(Conditional):
    """The symptom's own entry condition, evaluated per target."""

    title: Text
    # Values shown beside the detect's evidence, deciding nothing (e.g. the histogram's top bucket).
    context: list[Context] = []


class Traffic(Strict):
    """Per-target traffic floor below which `needs_traffic` checks are unknown (too little traffic)."""

    query: str
    min: Number


class Tree(Strict):
    id: Id
    title: Text
    target: list[str] = Field(min_length=1)
    params: dict[str, Param] = {}
    detect: Detect
    traffic: Traffic | None = None
    nodes: list[Node] = Field(min_length=1)


Condition.model_rebuild()
Conditional.model_rebuild()
CheckNode.model_rebuild()
ManualNode.model_rebuild()
GroupNode.model_rebuild()
Tree.model_rebuild()

AnyNode = CheckNode | ManualNode | GroupNode


def walk(nodes: list[AnyNode], depth: int = 1) -> list[tuple[AnyNode, int]]:
    """Every node in seed order (pre-order), with its depth (1 = top level)."""
    out: list[tuple[AnyNode, int]] = []
    for node in nodes:
        out.append((node, depth))
        out.extend(walk(list(node.children), depth + 1))
    return out


def comparisons(tree: Tree) -> list[tuple[str, Conditional]]:
    """Every simple comparison of the tree: the detect's and each check's, `key/condition` inside all / any."""
    out = leaves("detect", tree.detect)
    for node, _ in walk(list(tree.nodes)):
        if isinstance(node, CheckNode):
            out += leaves(node.id, node)
    return out


def queries(tree: Tree) -> list[tuple[str, str]]:
    """Every query of a tree as written, keyed: each comparison (as `comparisons` keys it), traffic,
    and each context value (`detect.name`, `check.name`). The one enumeration every reader uses."""
    out = [(key, leaf.comparison()[0]) for key, leaf in comparisons(tree)]
    out += [(f"detect.{c.id}", c.query) for c in tree.detect.context]
    if tree.traffic is not None:
        out.append(("traffic", tree.traffic.query))
    for node, _ in walk(list(tree.nodes)):
        if isinstance(node, CheckNode):
            out += [(f"{node.id}.{c.id}", c.query) for c in node.context]
    return out
