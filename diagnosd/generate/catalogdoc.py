"""docs/catalog.md, generated from the rules: per tree, the branches decided from data and those left to a person."""

from __future__ import annotations

from diagnosd.trees.catalog import Catalog
from diagnosd.trees.loader import RuleSet
from diagnosd.trees.model import AnyNode, CheckNode, GroupNode, ManualNode, walk

HEADER = """# Catalog coverage

Generated from `rules/` by `diagnosd rules catalog --out docs/catalog.md`; a test fails when this
file is stale. **Decided from data**: a check with a query (basis metric, config or derived).
**Manual**: a check left to a person, with the seed's guidance. Kinds: M metric,
C config-info, D derived, H human.
"""


def render(rules: RuleSet) -> str:
    lines = [HEADER]
    totals = [0, 0]
    required = [0, 0]
    planned: list[str] = []
    kinds = _kinds(rules.catalog)
    for tree in rules.trees.values():
        rows = [(node, depth) for node, depth in walk(list(tree.nodes)) if not isinstance(node, GroupNode)]
        data = sum(isinstance(n, CheckNode) for n, _ in rows)
        totals[0] += data
        totals[1] += len(rows)
        lines += [
            f"## `{tree.id}` — {tree.title.zh} ({tree.title.en})",
            "",
            f"{data} of {len(rows)} branches decided from data.",
            "",
            "| branch | cause | kind | decided by | could be decided from |",
            "|---|---|---|---|---|",
        ]
        for node, depth in rows:
            cause = _cause(node)
            kind = kinds.get((tree.id, cause), "") if cause else ""
            if kind[:1] in ("M", "C", "D"):
                required[1] += 1
                required[0] += isinstance(node, CheckNode)
            indent = "&nbsp;&nbsp;" * (depth - 1) + ("↳ " if depth > 1 else "")
            lines.append(
                f"| {indent}`{node.id}` {node.title.en} | {cause or ''} | {kind} | {_decided(node)} | {_source(node)} |"
            )
            if isinstance(node, ManualNode) and node.could_observe:
                planned.append(f"- `{tree.id}` / `{node.id}`: {node.could_observe}")
        lines.append("")
    lines += [
        "## Totals",
        "",
        f"- Branches decided from data: **{totals[0]} of {totals[1]}**.",
        f"- Catalog causes of kind M, C or D decided from data: **{required[0]} of {required[1]}**.",
        "",
        "## Next sources",
        "",
        "Manual branches that a source diagnosd does not read yet could decide:",
        "",
        *(planned or ["- none"]),
        "",
    ]
    return "\n".join(lines)


def _kinds(catalog: Catalog) -> dict[tuple[str, str], str]:
    return {(s.id, c.id): c.kind for s in catalog.symptoms for c in s.causes}


def _cause(node: AnyNode) -> str | None:
    conclusion = getattr(node, "conclusion", None)
    return conclusion.cause if conclusion else None


def _source(node: AnyNode) -> str:
    """For a manual branch: the source diagnosd does not read yet that could decide it."""
    text = node.could_observe or "" if isinstance(node, ManualNode) else ""
    return " ".join(text.replace("|", "/").split())


def _decided(node: AnyNode) -> str:
    if isinstance(node, CheckNode):
        return f"data ({node.basis})"
    return "manual"
