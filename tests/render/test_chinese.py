"""With --lang zh every word of the frame is Chinese, and every zh remediation says what its en twin says.

Every shipped tree is diagnosed through the real Evaluator on a fake source shaped so that checks
match, clear and stay unknown (no data, too little traffic, metric absent), then drawn in zh, in
full and collapsed. Once the rules' own zh texts are taken out, what is left may hold ASCII only in
metric, label and param names, label values, flags, paths, units, numbers, product names and PromQL.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta

import pytest

from diagnosd.daemon import compose
from diagnosd.engine.evaluator import Evaluator
from diagnosd.findings.model import Diagnosis
from diagnosd.render.text import render
from diagnosd.sources.base import Sample
from diagnosd.trees.model import CheckNode, Condition, Conditional, GroupNode, ManualNode, Text, Tree, walk
from tests.conftest import RULES
from tests.engine.fakes import FakeSource

AT = datetime(2026, 3, 1, 12, tzinfo=UTC)
NAN = float("nan")
TREES = sorted(compose.load(RULES).ruleset.trees.values(), key=lambda t: t.id)

# Names of products and hardware a Chinese SRE writes as they are.
PROPER = {
    "Prometheus",
    "vLLM",
    "SGLang",
    "LiteLLM",
    "Enterprise",
    "NVIDIA",
    "GPU",
    "GPUs",
    "CPU",
    "Operator",
    "Kubernetes",
    "Pod",
    "KV",
    "NaN",
    "PD",
    "IB",
    "NIC",
    "TP",
    "EP",
    "MoE",
    "DCGM",
    "API",
    "dcgm-exporter",
    "kube-state-metrics",
}
UNITS = {"s", "ms", "min", "h", "d", "B", "kB", "MB", "GB", "TB", "W", "token", "pp"}
CHAR_CLASS = r"[A-Za-z0-9_:.+\-]"


class EveryQuery(FakeSource):
    """Answers every query: a big value on one target, zero on another, 0/0 on the third."""

    def __init__(self, tree: Tree, absent: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.tree = tree
        self.absent = absent

    async def query(self, promql: str, at: datetime) -> list[Sample]:
        self.queries.append((promql, at))
        now = at > AT - timedelta(hours=2)

        def labels(i: int) -> dict[str, str]:
            return {label: f"{label}-{i}" for label in self.tree.target}

        return [Sample(labels(1), 5e5 if now else 1.0), Sample(labels(2), 0.0 if now else 1.0), Sample(labels(3), NAN)]

    async def metric_names(
        self, candidates: object, start: datetime, end: datetime, where: Sequence[str] = ()
    ) -> set[str]:
        return {name for name in candidates if not name.startswith(self.absent)}  # type: ignore[attr-defined]


async def diagnose(tree: Tree, absent: tuple[str, ...] = ()) -> Diagnosis:
    return await Evaluator(EveryQuery(tree, absent)).diagnose(tree, None, AT)


def rule_texts(tree: Tree) -> Iterator[Text]:
    yield tree.title
    yield tree.detect.title
    yield from (c.title for _, c in conditions(tree.detect))
    for node, _ in walk(list(tree.nodes)):
        yield node.title
        if isinstance(node, CheckNode):
            yield from (c.title for _, c in conditions(node))
        if isinstance(node, ManualNode):
            yield node.manual
        if isinstance(node, CheckNode):
            yield from (c.title for c in node.context)
        if not isinstance(node, GroupNode) and node.conclusion is not None:
            yield node.conclusion.title
            yield from node.conclusion.remediation
            if node.conclusion.caveat is not None:
                yield node.conclusion.caveat


def conditions(item: Conditional) -> list[tuple[int, Condition]]:
    """Every condition of an all / any, nested ones too."""
    return [(0, c) for c in item.conditions] + [x for c in item.conditions for x in conditions(c)]


def causes(tree: Tree) -> set[str]:
    return {
        node.conclusion.cause
        for node, _ in walk(list(tree.nodes))
        if not isinstance(node, GroupNode) and node.conclusion is not None
    }


def foreign_words(out: str, tree: Tree) -> list[str]:
    """ASCII words of the frame: what is left once rule texts, names, flags, numbers are taken out."""
    for text in sorted({t.zh for t in rule_texts(tree)}, key=len, reverse=True):
        out = out.replace(text, " ")
    for cause in sorted(causes(tree), key=len, reverse=True):
        out = re.sub(rf"\b{cause}\b", " ", out)
    out = re.sub(r"`[^`]*`", " ", out)  # quoted config
    out = re.sub(rf"{CHAR_CLASS}+=\S+", " ", out)  # label=value, param=value, verbose=true
    out = re.sub(r"--[a-z0-9-]+", " ", out)  # flags
    out = re.sub(r"(?<![\w])/[\w/.-]*", " ", out)  # paths such as /metrics/
    out = re.sub(r"\b\w*[_:]\w*\b", " ", out)  # metric, label, param and cause names; PromQL
    out = re.sub(r"[\d.]+[kMGT]?\b|°C", " ", out)  # numbers, degrees
    return [w for w in re.findall(r"[A-Za-z][A-Za-z-]*", out) if w not in PROPER | UNITS and w != tree.id]


@pytest.mark.parametrize("tree", TREES, ids=lambda t: t.id)
async def test_every_tree_drawn_in_chinese_has_a_chinese_frame(tree: Tree) -> None:
    whole = await diagnose(tree)
    missing = await diagnose(tree, absent=("vllm", "sglang", "DCGM", "litellm", "kube_", "node_", "process_"))
    outs = [render(whole, "zh", tree=tree), render(whole, "zh", verbose=True, tree=tree), render(missing, "zh")]
    joined = "\n".join(outs)
    assert "unknown" not in joined
    assert "None" not in joined
    assert {"▲", "·", "?"} <= set(joined)  # matched, clear and unknown checks were all drawn
    assert foreign_words(joined, tree) == []


async def test_the_chinese_frame_has_every_kind_of_line() -> None:
    outs = []
    for tree in TREES:
        outs += [render(await diagnose(tree), "zh", tree=tree), render(await diagnose(tree), "zh", verbose=True)]
    joined = "\n".join(outs)
    for phrase in (
        *("个目标中", "个有此症状", "症状存在", "无此症状的目标", "症状未知且无命中项的目标", "阈值", "基线"),
        *("比值", "差值", "根因（最可能的在前）", "修复：", "注意：", "严重程度：", "未知：", "0/0"),
        *("流量过低", "是", "否", "最高桶", "假设值", "个请求", "显示每个目标的完整检查树"),
    ):
        assert phrase in joined, phrase


FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*|\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b|(?<![\w.])\d+(?:\.\d+)?")


@pytest.mark.parametrize("tree", TREES, ids=lambda t: t.id)
def test_every_flag_env_var_and_number_of_an_en_remediation_is_in_its_zh_twin(tree: Tree) -> None:
    weaker = [
        (node.id, r.en, r.zh, missing)
        for node, _ in walk(list(tree.nodes))
        if not isinstance(node, GroupNode) and node.conclusion is not None
        for r in node.conclusion.remediation
        if (missing := sorted({x for x in FLAG.findall(r.en) if x not in r.zh}))
    ]
    assert weaker == []
