"""Faithful knowledge: every branch of every seed tree is in the rules, in the seed's order, in its own words.

The seed is read as drawn: a title line, then `├─`/`└─` lines whose indentation gives the depth.
Top-level branches must be the tree's top-level nodes, verbatim and in order; every deeper line's
text must appear among the Chinese texts (titles, guidance, conclusions, remediation) of the
top-level branch it belongs to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from diagnosd.trees import load_rules, walk
from diagnosd.trees.model import AnyNode, Text
from tests.conftest import REPO, RULES

SEED = REPO / "docs" / "seed" / "troubleshooting-trees.zh.txt"
BRANCH = re.compile(r"^(?P<indent>(?:│  |   )*)[├└]─ (?P<text>.+)$")


@dataclass
class SeedBranch:
    text: str
    lines: list[str] = field(default_factory=list)


@dataclass
class SeedTree:
    title: str
    branches: list[SeedBranch] = field(default_factory=list)


def read_seed(path: Path) -> list[SeedTree]:
    trees: list[SeedTree] = []
    for raw in path.read_text(encoding="utf-8").splitlines()[1:]:
        line = raw.rstrip()
        if not line or set(line) <= {"│", " "}:
            continue
        match = BRANCH.match(line)
        if match is None:
            trees.append(SeedTree(line))
        elif not match.group("indent"):
            trees[-1].branches.append(SeedBranch(match.group("text")))
        else:
            trees[-1].branches[-1].lines.append(match.group("text"))
    return trees


def fragments(line: str) -> list[str]:
    """The seed's own words of a nested line, without its arrows and the "是 →" of the yes-branch."""
    text = re.sub(r"^是 → ", "", line)
    return [piece.strip(" ：:") for piece in re.split(r"→|，|(?<=？)", text) if piece.strip(" ：:")]


def zh_texts(node: AnyNode) -> str:
    texts: list[Text] = [node.title]
    for inner, _ in walk([node]):
        texts.append(inner.title)
        if getattr(inner, "manual", None):
            texts.append(inner.manual)  # type: ignore[union-attr]
        conclusion = getattr(inner, "conclusion", None)
        if conclusion:
            texts += [conclusion.title, *conclusion.remediation, *([conclusion.caveat] if conclusion.caveat else [])]
    return normalize("\n".join(t.zh for t in texts))


def normalize(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("*", ""))


SEED_TREES = read_seed(SEED)
RULESET = load_rules(RULES)
BY_TITLE = {t.title.zh: t for t in RULESET.trees.values()}


def test_the_seed_has_twenty_trees_and_each_has_a_rule() -> None:
    assert len(SEED_TREES) == 20
    assert [s.title for s in SEED_TREES if s.title not in BY_TITLE] == []


@pytest.mark.parametrize("seed", SEED_TREES, ids=lambda s: s.title)
def test_top_level_branches_in_seed_order_verbatim(seed: SeedTree) -> None:
    tree = BY_TITLE[seed.title]
    assert [n.title.zh for n in tree.nodes] == [b.text for b in seed.branches]


@pytest.mark.parametrize("seed", SEED_TREES, ids=lambda s: s.title)
def test_every_nested_line_is_carried_in_its_branch(seed: SeedTree) -> None:
    tree = BY_TITLE[seed.title]
    missing = []
    for branch, node in zip(seed.branches, tree.nodes, strict=True):
        carried = zh_texts(node)
        missing += [
            f"{branch.text} / {piece}"
            for line in branch.lines
            for piece in fragments(line)
            if normalize(piece) not in carried
        ]
    assert missing == []
